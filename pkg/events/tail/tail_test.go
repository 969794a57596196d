package tail_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
	"skein.dev/pkg/events/tail"
)

func TestMain(m *testing.M) { testutil.Main(m, nil) }

// wait bounds every read and every follow of these tests: a deadline for
// a test that went wrong, not a measured figure.
const wait = 30 * time.Second

// session is one session's log on a real server, and a tail reader's
// view of it.
type session struct {
	t    *testing.T
	nc   *nats.Conn // the reader's
	js   jetstream.JetStream
	w    *eventlog.Writer
	seqs []uint64 // every event stored, in order
}

// provision provisions the streams through writer and returns a session
// written on writer and read on reader.
func provision(t *testing.T, writer, reader *nats.Conn) *session {
	t.Helper()
	wjs, err := jetstream.New(writer)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), wjs, streams.Options{}, true); err != nil {
		t.Fatal(err)
	}
	rjs, err := jetstream.New(reader)
	if err != nil {
		t.Fatal(err)
	}
	return &session{t: t, nc: reader, js: rjs, w: eventlog.NewWriter(wjs, "default", "s1", eventlog.Position{}, "w")}
}

// write stores n events of size bytes of text.
func (s *session) write(n, size int) {
	s.t.Helper()
	for i := range n {
		text := fmt.Sprintf("%0*d", size, len(s.seqs)+i)
		a, err := s.w.Append(s.t.Context(), eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{
			Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)}})
		if err != nil {
			s.t.Fatal(err)
		}
		s.seqs = append(s.seqs, a[0].Seq)
	}
}

var (
	logSubject  = events.LogSubject("default", "s1", events.LogEvents)
	tailSubject = events.TailSubject("default", "s1", events.LogEvents)
)

// reader is a tail reader as the package's users write one: subscribe,
// read back from the cursor, then follow, reading to the end on a resync.
type reader struct {
	sub   *tail.Sub
	chain *tail.Chain
	got   []uint64
	// offer, when set, decides whether a message is offered (false: it
	// is lost in transit).
	offer func(*nats.Msg) bool
}

func (s *session) reader(after uint64) *reader {
	s.t.Helper()
	sub, err := tail.Subscribe(s.t.Context(), s.nc, tailSubject, 4096)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(sub.Stop)
	r := &reader{sub: sub, chain: tail.NewChain(s.js, events.StreamLog, logSubject, after)}
	ctx, cancel := context.WithTimeout(s.t.Context(), wait)
	defer cancel()
	if err := r.chain.CatchUp(ctx, 0, r.deliver); err != nil {
		s.t.Fatal(err)
	}
	return r
}

func (r *reader) deliver(rec *tail.Record) error {
	r.got = append(r.got, rec.Sequence)
	return nil
}

// follow reads until the reader has delivered every sequence of want.
func (r *reader) follow(t *testing.T, want []uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	for len(r.got) < len(want) {
		m, resync, err := r.sub.Next(ctx)
		switch {
		case err != nil:
			t.Fatalf("after %v of %v: %v", r.got, want, err)
		case resync:
			err = r.chain.CatchUp(ctx, 0, r.deliver)
		case r.offer == nil || r.offer(m):
			err = r.chain.Offer(ctx, m, r.deliver)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(r.got, want) {
		t.Fatalf("delivered %v, want %v", r.got, want)
	}
}

func inProcess(t *testing.T) *session {
	ns := natstest.Run(t)
	return provision(t, natstest.Connect(t, ns), natstest.Connect(t, ns))
}

// Records stored before the subscription are read back, those after
// follow, each once and in order, from a cursor in the middle too.
func TestBackfillThenLive(t *testing.T) {
	s := inProcess(t)
	s.write(3, 10)
	r := s.reader(0)
	s.write(3, 10)
	r.follow(t, s.seqs)

	r = s.reader(s.seqs[1])
	s.write(2, 10)
	r.follow(t, s.seqs[2:])
}

// A record republished twice, or read back and then republished, is
// delivered once; a record lost in transit is read back before the next
// one, which names it as its predecessor.
func TestRepublishedRecords(t *testing.T) {
	s := inProcess(t)
	r := s.reader(0)
	var mu sync.Mutex
	lost := map[string]bool{}
	n := 0
	r.offer = func(m *nats.Msg) bool {
		mu.Lock()
		defer mu.Unlock()
		n++
		seq := m.Header.Get(jetstream.SequenceHeader)
		switch {
		case n%4 == 2 && !lost[seq]:
			lost[seq] = true
			return false // lost in transit
		case n%4 == 3:
			// Republished twice.
			_ = r.chain.Offer(context.Background(), m, r.deliver)
		}
		return true
	}
	s.write(20, 10)
	r.follow(t, s.seqs)
	if len(lost) == 0 {
		t.Fatal("no record was lost: the test proves nothing")
	}
}

// Records republished while the reader's connection was away, with
// nothing after them, are read back once it reconnects.
func TestReconnect(t *testing.T) {
	ns := natstest.Run(t, natstest.WithListen())
	gate := &gatedDialer{open: make(chan struct{})}
	close(gate.open)
	rc, err := nats.Connect(ns.ClientURL(), nats.SetCustomDialer(gate), nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1), nats.Timeout(wait))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	s := provision(t, natstest.Connect(t, ns), rc)
	r := s.reader(0)
	s.write(2, 10)
	r.follow(t, s.seqs)

	disconnected := rc.StatusChanged(nats.RECONNECTING)
	defer rc.RemoveStatusListener(disconnected)
	gate.close()
	if err := rc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-disconnected:
	case <-time.After(wait):
		t.Fatal("the reader's connection did not go away")
	}
	s.write(3, 10) // republished while the reader is away: lost to it
	gate.reopen()
	r.follow(t, s.seqs)
}

// A read back whose direct get is never answered (its replica stalled) is
// asked again, and the reader goes on.
func TestStalledDirectGet(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	s := provision(t, natstest.Connect(t, ns), nc)
	s.write(5, 10)
	// Direct gets under the prefix "stall." reach a relay that drops the
	// first request and passes the others to the stream.
	var mu sync.Mutex
	dropped := 0
	relay, err := nc.Subscribe("stall.DIRECT.GET.>", func(m *nats.Msg) {
		mu.Lock()
		drop := dropped == 0
		if drop {
			dropped++
		}
		mu.Unlock()
		if drop {
			return
		}
		_ = nc.PublishMsg(&nats.Msg{Subject: jetstream.DefaultAPIPrefix + m.Subject[len("stall."):], Reply: m.Reply, Data: m.Data, Header: m.Header})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = relay.Unsubscribe() }()
	sjs, err := jetstream.NewWithAPIPrefix(nc, "stall.")
	if err != nil {
		t.Fatal(err)
	}
	chain := tail.NewChain(sjs, events.StreamLog, logSubject, 0)
	var got []uint64
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := chain.CatchUp(ctx, 0, func(r *tail.Record) error { got = append(got, r.Sequence); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, s.seqs) || dropped != 1 {
		t.Errorf("read back %v (%d requests dropped), want %v after one dropped", got, dropped, s.seqs)
	}
}

// Messages the client library drops for a slow reader are read back; the
// reader learns of the loss at its next call.
func TestDroppedMessages(t *testing.T) {
	s := inProcess(t)
	sub, err := tail.Subscribe(t.Context(), s.nc, tailSubject, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	r := &reader{sub: sub, chain: tail.NewChain(s.js, events.StreamLog, logSubject, 0)}
	s.write(30, 10) // not read meanwhile: all but one are dropped
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r.follow(t, s.seqs)
}

// Large records are read back in pages bounded by bytes.
func TestLargeRecords(t *testing.T) {
	ns := natstest.Run(t, natstest.WithMaxPayload(8<<20))
	s := provision(t, natstest.Connect(t, ns), natstest.Connect(t, ns))
	s.write(5, 4_000_000)
	r := s.reader(0)
	s.write(1, 4_000_000)
	r.follow(t, s.seqs)
}

// gatedDialer dials TCP while its gate is open, and holds dials while it
// is closed.
type gatedDialer struct {
	mu   sync.Mutex
	open chan struct{}
}

func (d *gatedDialer) Dial(network, address string) (net.Conn, error) {
	d.mu.Lock()
	open := d.open
	d.mu.Unlock()
	<-open
	return net.Dial(network, address)
}

func (d *gatedDialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.open = make(chan struct{})
}

func (d *gatedDialer) reopen() {
	d.mu.Lock()
	defer d.mu.Unlock()
	close(d.open)
}

// The rule of a chain, for records known by sequence and predecessor: a
// chain placed at 10 skips what it has, fills past a missed predecessor,
// delivers the rest; one joined at its first record delivers that alone,
// then holds to the same rule.
func TestDecideAt(t *testing.T) {
	placed := tail.NewChain(nil, events.StreamLog, "acp.log.default.s1.ev", 10)
	for _, tc := range []struct {
		seq, prev uint64
		want      tail.Action
	}{
		{9, 5, tail.Skip},
		{10, 7, tail.Skip},
		{12, 10, tail.Deliver},
		{12, 0, tail.Deliver}, // the subject's first record
		{15, 11, tail.Fill},
		{15, 14, tail.Fill},
	} {
		if got := placed.DecideAt(tc.seq, tc.prev); got != tc.want {
			t.Errorf("placed at 10: DecideAt(%d, %d) = %v, want %v", tc.seq, tc.prev, got, tc.want)
		}
	}
	joined := tail.Joined(nil, events.StreamLog, "acp.log.default.s1.ev")
	if got := joined.DecideAt(20, 17); got != tail.Deliver {
		t.Errorf("joined: DecideAt(20, 17) = %v, want Deliver", got)
	}
	joined.Delivered(20)
	if got, want := joined.DecideAt(20, 17), tail.Skip; got != want {
		t.Errorf("joined at 20: DecideAt(20, 17) = %v, want %v", got, want)
	}
	if got, want := joined.DecideAt(23, 21), tail.Fill; got != want {
		t.Errorf("joined at 20: DecideAt(23, 21) = %v, want %v", got, want)
	}
	joined.Delivered(18) // behind the place: stays
	if joined.Last() != 20 {
		t.Errorf("Last after Delivered(18) = %d, want 20", joined.Last())
	}
}

// A read back that fails is unavailable and keeps why, so a reader can
// tell a transient failure (no responder) from a lasting one.
func TestCatchUpErrorKeepsItsCause(t *testing.T) {
	ns := natstest.Run(t)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{}, true); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), events.StreamLog)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowDirect = false // no direct get is answered: no responders
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	c := tail.NewChain(js, events.StreamLog, events.LogSubject("default", "s1", events.LogEvents), 0)
	err = c.CatchUp(t.Context(), 0, func(*tail.Record) error { return nil })
	if !errors.Is(err, events.ErrUnavailable) || !eventlog.Transient(err) {
		t.Fatalf("CatchUp without direct gets = %v, want unavailable, and transient beneath", err)
	}
}
