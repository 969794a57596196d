package adapterrunner

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/tcprelay"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
)

// outboxRig is an edge: a local server whose JetStream holds the outbox,
// and the hub's, reached through a relay the test cuts and heals.
type outboxRig struct {
	local     jetstream.JetStream
	hub       jetstream.JetStream // through the relay
	hubDirect jetstream.JetStream
	relay     *tcprelay.Relay
	m         *metrics
	localDir  string
}

func startOutboxRig(t *testing.T) *outboxRig {
	t.Helper()
	hubSrv := natstest.Run(t, natstest.WithListen())
	direct, err := jetstream.New(natstest.Connect(t, hubSrv))
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), direct, streams.Options{}, false); err != nil {
		t.Fatal(err)
	}
	relay, err := tcprelay.New(hubSrv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	// The hub as an edge runner reaches it: through its leaf node, whose
	// in-process connection never drops. A publish while the link is down
	// finds nobody, as here, where the client buffers nothing while it
	// reconnects; a buffer would send old copies after newer records.
	hubConn, err := nats.Connect("nats://"+relay.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hubConn.Close)
	hub, err := jetstream.New(hubConn, jetstream.WithPublishAsyncTimeout(ioAckTimeout))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &outboxRig{hub: hub, hubDirect: direct, relay: relay, localDir: dir,
		m: newMetrics(prometheus.NewRegistry(), hubConn, 1)}
	r.local = r.startLocal(t)
	return r
}

// startLocal starts the edge's own server on the rig's store, as a runner
// restarted on the same data directory does.
func (r *outboxRig) startLocal(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.Run(t, natstest.WithStoreDir(r.localDir))))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// run runs an outbox on local until the returned stop is called.
func (r *outboxRig) run(t *testing.T, local jetstream.JetStream) (*Outbox, func()) {
	t.Helper()
	o, err := openOutbox(t.Context(), local, r.hub, 0, slog.New(slog.DiscardHandler), r.m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	return o, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("outbox run: %v", err)
		}
	}
}

// send stores records from..to-1 of process p through a window on the
// outbox, as a process's records go, and waits until the outbox has them
// all (the window is empty).
func (r *outboxRig) send(t *testing.T, o *Outbox, from, to int) {
	t.Helper()
	w := newIOWindow(o.Publisher(), slog.New(slog.DiscardHandler), r.m, DefaultIOWindowRecords, DefaultIOWindowBytes)
	for n := from; n < to; n++ {
		w.add(uint64(n), &nats.Msg{Subject: events.IOSubject(events.DefaultNamespace, "s1", "r1"),
			Header: nats.Header{jetstream.MsgIDHeader: []string{ioMsgID(events.DefaultNamespace, "s1", "p", uint64(n))},
				events.HeaderRecordNo: []string{strconv.Itoa(n)}},
			Data: fmt.Appendf(nil, "record %d", n)})
	}
	w.close()
	select {
	case <-w.done:
	case <-t.Context().Done():
		t.Fatal("the outbox did not take the records")
	}
}

// awaitHub waits until the hub's ACP_IO holds n records, and checks that
// they are records 0..n-1, in order.
func (r *outboxRig) awaitHub(t *testing.T, n int) {
	t.Helper()
	str, err := r.hubDirect.Stream(t.Context(), events.StreamIO)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.PollWithin(t.Context(), testutil.PollTimeout, fmt.Sprintf("%d records at the hub", n), func() (bool, error) {
		info, err := str.Info(t.Context())
		return err == nil && info.State.Msgs >= uint64(n), err
	}); err != nil {
		t.Fatal(err)
	}
	cons, err := str.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(n + 1)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for m := range batch.Messages() {
		if got, want := string(m.Data()), fmt.Sprintf("record %d", i); got != want {
			t.Fatalf("hub record %d = %q, want %q", i, got, want)
		}
		i++
	}
	if i != n {
		t.Fatalf("the hub holds %d records, want %d", i, n)
	}
}

// outboxEmpty waits until the outbox holds nothing: the hub stored all.
func outboxEmpty(t *testing.T, local jetstream.JetStream) {
	t.Helper()
	if err := testutil.PollWithin(t.Context(), testutil.PollTimeout, "the outbox to empty", func() (bool, error) {
		str, err := local.Stream(t.Context(), OutboxStream)
		if err != nil {
			return false, err
		}
		info, err := str.Info(t.Context())
		return err == nil && info.State.Msgs == 0, err
	}); err != nil {
		t.Fatal(err)
	}
}

// While the link to the hub is down, the records go to the outbox and
// the windows do not wait; once it is back they reach the hub, in order,
// and the outbox empties.
func TestOutboxKeepsRecordsWhileTheLinkIsDown(t *testing.T) {
	r := startOutboxRig(t)
	o, stop := r.run(t, r.local)
	defer stop()
	r.send(t, o, 0, 100)
	r.awaitHub(t, 100)

	r.relay.Cut()
	r.send(t, o, 100, 1100) // more than a window: the outbox holds them
	r.relay.Heal()
	r.awaitHub(t, 1100)
	outboxEmpty(t, r.local)
}

// The same with a silent link (a laptop asleep): what was in flight is
// sent again.
func TestOutboxAcrossABlackhole(t *testing.T) {
	r := startOutboxRig(t)
	o, stop := r.run(t, r.local)
	defer stop()
	r.relay.Blackhole()
	r.send(t, o, 0, 500)
	r.relay.Heal()
	r.awaitHub(t, 500)
	outboxEmpty(t, r.local)
}

// A runner restarted while the link is down finds its outbox on its disk
// and forwards it once the link is back.
func TestOutboxAcrossARestart(t *testing.T) {
	r := startOutboxRig(t)
	r.relay.Cut()
	o, stop := r.run(t, r.local)
	r.send(t, o, 0, 300)
	stop()

	// A new local server on the same store: the runner started again.
	local := r.startLocal(t)
	o, stop = r.run(t, local)
	defer stop()
	r.send(t, o, 300, 400)
	r.relay.Heal()
	r.awaitHub(t, 400)
	outboxEmpty(t, local)
}
