package gateway_test

import (
	"net"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// TestLiveFeedMissedTurnEnd: the last records of a turn are stored while
// ACP_LOG republishes nothing, and nothing follows them. Every viewer still
// receives them, first while the turn is still open (the feed, quiet in an
// open turn, reads where the log ends), then when the turn's last event and
// its end are both missed; and a watch waiting for them answers with them
// rather than at its timeout.
func TestLiveFeedMissedTurnEnd(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	streams, closeAll := e.viewers(5, "/v1/sessions/s1/events")
	defer closeAll()

	// A keyed prompt: its turn ends on the key subject, not on the
	// control one. Each step of its tool call is durable at once.
	acc, err := turnwait.Accept(t.Context(), e.nc, ns, &events.AcpPromptRequest{
		SessionID: new("s1"), IdempotencyKey: new("k1"),
		Content: stacktest.TextContent("toolstep c1 pending\npause p1\ntoolstep c1 in_progress\npause p2\ntoolstep c1 completed")})
	if err != nil {
		t.Fatalf("prompt: %v", err)
	}
	e.backend.Paused("p1")
	a1 := e.backend.stored("s1", acc.Sequence, 2)[1]
	for _, s := range streams {
		wantDurable(t, s.next(), acc.Sequence)
		wantDurable(t, s.next(), a1)
	}

	// The turn goes on, but its next event is not republished.
	var a2 uint64
	e.backend.WithoutTail(func() {
		e.backend.Release("p1")
		e.backend.Paused("p2")
		a2 = e.backend.stored("s1", acc.Sequence, 3)[2]
	})
	for _, s := range streams {
		wantDurable(t, s.next(), a2)
	}

	// A watch waits after a2. The turn's last event and its end are
	// stored unseen, and nothing follows.
	reads := e.backend.Calls(events.OpGetSession)
	woke := make(chan watchResult, 1)
	go func() { woke <- e.watch(t, "s1", "?timeout=30&after="+strconv.FormatUint(a2, 10)) }()
	testutil.Eventually(t, "the watch to read the state", func() bool { return e.backend.Calls(events.OpGetSession) > reads })
	var a3 uint64
	e.backend.WithoutTail(func() {
		e.backend.Release("p2")
		testutil.Eventually(t, "the turn to end", func() bool {
			last, err := eventlog.Last(t.Context(), js, events.StreamLog, events.LogFilter(ns, "s1"))
			return err == nil && last != nil && last.Header.Get(events.HeaderRecord) == events.RecordTurnFinished
		})
		a3 = e.backend.stored("s1", acc.Sequence, 4)[3]
	})
	for _, s := range streams {
		wantDurable(t, s.next(), a3)
	}
	w := <-woke
	if len(w.Events) != 1 || w.Events[0].Sequence != a3 || *w.Cursor < a3 {
		t.Errorf("the watch after %d = %+v, want event %d (it timed out if none)", a2, w, a3)
	}
}

// TestLiveFeedCatchesUpOnReconnect: the NATS server the gateway is
// connected to restarts (on the same port and store), and events are
// appended before the gateway's connection is back, so nothing on the
// gateway receives their republish. No event follows them and no turn is
// open. Once the connection is back, every viewer has every one of them.
func TestLiveFeedCatchesUpOnReconnect(t *testing.T) {
	dir := t.TempDir()
	var srv *server.Server
	var port int
	// The gateway's connection tries again only when the test lets it:
	// waiting says that it lost the server.
	waiting, reconnect := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, func(o *envOptions) {
		o.server = func(t *testing.T) (*server.Server, *nats.Conn) {
			srv = natstest.Run(t, natstest.WithListen(), natstest.WithStoreDir(dir))
			port = srv.Addr().(*net.TCPAddr).Port
			gw := natstest.Connect(t, srv, nats.MaxReconnects(-1), nats.CustomReconnectDelay(func(int) time.Duration {
				select {
				case waiting <- struct{}{}:
				default:
				}
				select {
				case <-reconnect:
				case <-t.Context().Done():
				}
				return time.Millisecond
			}))
			return srv, gw
		}
	})
	e.backend.Open("s1", "demo")
	streams, closeAll := e.viewers(5, "/v1/sessions/s1/events")
	defer closeAll()
	first := e.backend.Say("s1", "one")
	for _, s := range streams {
		s.wantDurables(first...)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway's connection did not try to reconnect in 10 s")
	}
	natstest.Run(t, natstest.WithListen(), natstest.WithStoreDir(dir), func(o *server.Options) { o.Port = port })
	// Everything stops while the new server runs, before its shutdown.
	t.Cleanup(func() {
		_ = e.stop() // its error is checked by newEnv's cleanup
		e.backend.Stop()
	})
	// The services' connections are back, and JetStream has its streams.
	testutil.Eventually(t, "the services' connections and ACP_LOG", func() bool {
		_, err := e.backend.JetStream().Stream(t.Context(), events.StreamLog)
		return err == nil
	})
	seqs := e.backend.Say("s1", "missed 0", "missed 1", "missed 2")
	if e.nc.IsConnected() {
		t.Fatal("the gateway reconnected before the test let it")
	}
	close(reconnect)
	for _, s := range streams {
		s.wantDurables(seqs...)
	}
}

// TestLiveFeedsEndWithRun: no feed outlives Run. Its viewer here is served
// by another HTTP server on the gateway's handler, which Run's shutdown
// does not wait for; Run still returns only once the feed has stopped and
// released its subscriptions.
func TestLiveFeedsEndWithRun(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	srv := httptest.NewServer(e.gw.Handler())
	t.Cleanup(srv.Close)
	other := &env{t: t, url: srv.URL, client: srv.Client()}
	s := other.stream("/v1/sessions/s1/events")
	subs := func() float64 { return testutil.Metric(t, e.reg, "acp_gateway_live_subscriptions") }
	testutil.Eventually(t, "the stream's feed", func() bool { return subs() == 2 })

	if err := e.stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if got := subs(); got != 0 {
		t.Errorf("live subscriptions once Run returned = %v, want 0", got)
	}
	got := s.ended()
	if len(got) == 0 {
		t.Fatal("the stream ended without an error event")
	}
	wantErrorEvent(t, got[len(got)-1], events.CodeUnavailable)
}
