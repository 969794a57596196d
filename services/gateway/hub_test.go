package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// viewers opens n event streams of sid from the same gateway and waits
// until all are open. close ends them.
func (e *env) viewers(n int, path string) (streams []*sseStream, close func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.t.Context())
	open := testutil.Metric(e.t, e.reg, "acp_gateway_sse_streams")
	for range n {
		streams = append(streams, e.streamCtx(ctx, path))
	}
	testutil.Eventually(e.t, "the streams to open", func() bool {
		return testutil.Metric(e.t, e.reg, "acp_gateway_sse_streams") == open+float64(n)
	})
	return streams, func() {
		cancel()
		for _, s := range streams {
			<-s.done
		}
	}
}

// streamCtx is stream, ending when ctx is done.
func (e *env) streamCtx(ctx context.Context, path string) *sseStream {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if err != nil {
		e.t.Fatalf("NewRequest: %v", err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		e.t.Fatalf("GET %s = %d, want 200", path, resp.StatusCode)
	}
	s := &sseStream{t: e.t, header: resp.Header, ch: make(chan sseEvent, 4096), done: make(chan struct{}), resume: make(chan struct{})}
	close(s.resume)
	go s.read(ctx, resp.Body)
	e.t.Cleanup(func() {
		resp.Body.Close()
		<-s.done
	})
	return s
}

// TestLiveHubOneSubscriptionPerSession: however many viewers a session
// has on one gateway, the gateway holds two NATS subscriptions for it (its
// tail and its deltas), taken with the first viewer and released with the
// last; every viewer gets every event.
func TestLiveHubOneSubscriptionPerSession(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	e.backend.CreateSession(ns, "s2", "demo")
	subs := func() float64 { return testutil.Metric(t, e.reg, "acp_gateway_live_subscriptions") }
	if got := subs(); got != 0 {
		t.Fatalf("live subscriptions before any stream = %v, want 0", got)
	}

	many, closeMany := e.viewers(10, "/v1/sessions/s1/events")
	if got := subs(); got != 2 {
		t.Errorf("live subscriptions with 10 viewers of one session = %v, want 2", got)
	}
	one, closeOne := e.viewers(1, "/v1/sessions/s2/events")
	if got := subs(); got != 4 {
		t.Errorf("live subscriptions with viewers of two sessions = %v, want 4", got)
	}

	s1 := e.backend.Append(ns, "s1", chunk("one"))
	e.backend.Delta(ns, "s1", s1, chunk("on"))
	s2 := e.backend.Append(ns, "s1", chunk("two"))
	o1 := e.backend.Append(ns, "s2", chunk("other"))
	for _, s := range many {
		wantDurable(t, s.next(), s1)
		wantEphemeral(t, s.next(), s1, "on")
		wantDurable(t, s.next(), s2)
	}
	wantDurable(t, one[0].next(), o1)

	closeMany()
	testutil.Eventually(t, "s1's subscriptions to go", func() bool { return subs() == 2 })
	closeOne()
	testutil.Eventually(t, "every subscription to go", func() bool { return subs() == 0 })

	// A new viewer subscribes again, and misses nothing in between.
	s3 := e.backend.Append(ns, "s1", chunk("three"))
	again, closeAgain := e.viewers(1, "/v1/sessions/s1/events?after="+strconv.FormatUint(s2, 10))
	defer closeAgain()
	wantDurable(t, again[0].next(), s3)
	s4 := e.backend.Append(ns, "s1", chunk("four"))
	wantDurable(t, again[0].next(), s4)
	if got := subs(); got != 2 {
		t.Errorf("live subscriptions with one viewer again = %v, want 2", got)
	}
}

// TestLiveHubCatchUpOnce: when the tail skips events, the session's feed
// reads them back once, by event number, for all its viewers: each viewer
// gets them in order, and no viewer reads history for them.
func TestLiveHubCatchUpOnce(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	streams, closeAll := e.viewers(8, "/v1/sessions/s1/events")
	defer closeAll()
	s1 := e.backend.Append(ns, "s1", chunk("one")) // the feed counts from here
	for _, s := range streams {
		wantDurable(t, s.next(), s1)
	}
	reads := e.backend.Calls(events.OpReadHistory)

	var s2, s3 uint64
	e.backend.WithoutTail(func() {
		s2 = e.backend.Append(ns, "s1", chunk("two"))
		s3 = e.backend.Append(ns, "s1", chunk("three"))
	})
	s4 := e.backend.Append(ns, "s1", chunk("four"))
	for _, s := range streams {
		if p := wantDurable(t, s.next(), s2); p.EventNo != 2 {
			t.Errorf("caught-up event = %+v, want event no 2", p)
		}
		wantDurable(t, s.next(), s3)
		wantDurable(t, s.next(), s4)
	}
	// A delta after a record the tail skipped: one more catch-up, then
	// the delta after it.
	var s5 uint64
	e.backend.WithoutTail(func() { s5 = e.backend.Append(ns, "s1", chunk("five")) })
	e.backend.Delta(ns, "s1", s5, chunk("six"))
	for _, s := range streams {
		wantDurable(t, s.next(), s5)
		wantEphemeral(t, s.next(), s5, "six")
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got != 2 {
		t.Errorf("gap fills = %v, want 2 (one per gap, for all 8 viewers)", got)
	}
	if got := e.backend.Calls(events.OpReadHistory) - reads; got != 0 {
		t.Errorf("viewers made %d history reads for the gaps, want 0", got)
	}
}

// TestLiveHubSlowViewerAlone: a viewer that stops reading is cut off
// alone; the session's other viewer goes on receiving every event, and the
// slow one resumes from where it was cut off.
func TestLiveHubSlowViewerAlone(t *testing.T) {
	e := newEnv(t, withConfig(func(c *gateway.Config) { c.StreamBuffer = 8 }))
	e.backend.CreateSession(ns, "s1", "demo")
	fast, closeFast := e.viewers(1, "/v1/sessions/s1/events")
	defer closeFast()
	url, client := smallBuffers(t, e.gw.Handler()) // the same gateway, so the same feed
	slowEnv := &env{t: t, url: url, client: client}
	slow := slowEnv.stream("/v1/sessions/s1/events", func(o *streamOptions) { o.paused = true })
	testutil.Eventually(t, "the slow stream to open", func() bool { return testutil.Metric(t, e.reg, "acp_gateway_sse_streams") == 2 })

	big := strings.Repeat("x", 64<<10)
	var seqs []uint64
	for i := 0; testutil.Metric(t, e.reg, "acp_gateway_sse_overflows_total") == 0; i++ {
		if i == 2000 {
			t.Fatal("no overflow after 2000 events of 64 KiB")
		}
		seqs = append(seqs, e.backend.Append(ns, "s1", chunk(big)))
	}
	for range 3 {
		seqs = append(seqs, e.backend.Append(ns, "s1", chunk("after")))
	}
	for _, seq := range seqs {
		wantDurable(t, fast[0].next(), seq)
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_overflows_total"); got != 1 {
		t.Errorf("overflows = %v, want 1 (the slow viewer only)", got)
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_live_subscriptions"); got != 2 {
		t.Errorf("live subscriptions = %v, want 2", got)
	}

	close(slow.resume)
	got := slow.ended()
	if len(got) < 2 {
		t.Fatalf("slow stream carried %d events, want some and an error", len(got))
	}
	wantErrorEvent(t, got[len(got)-1], events.CodeUnavailable)
	got = got[:len(got)-1]
	for i, ev := range got {
		wantDurable(t, ev, seqs[i])
	}
	r := e.stream("/v1/sessions/s1/events", withHeader("Last-Event-ID", got[len(got)-1].ID))
	for _, seq := range seqs[len(got):] {
		wantDurable(t, r.next(), seq)
	}
}

// TestLiveHubJoinWhileAppending: viewers join a session's feed one after
// another while events are appended without pause. Each follows the
// protocol (join, backfill after its cursor, dedupe by sequence), so each
// receives every event of the log from its cursor on, once and in order,
// whichever of the backfill and the feed brought it.
func TestLiveHubJoinWhileAppending(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	stop, appended := make(chan struct{}), make(chan []uint64, 1)
	go func() {
		var seqs []uint64
		for i := 0; ; i++ {
			select {
			case <-stop:
				appended <- seqs
				return
			default:
			}
			seqs = append(seqs, e.backend.Append(ns, "s1", chunk(strconv.Itoa(i))))
		}
	}()
	var streams []*sseStream
	for range 12 {
		s, _ := e.viewers(1, "/v1/sessions/s1/events")
		streams = append(streams, s[0])
	}
	close(stop)
	seqs := <-appended
	if len(seqs) == 0 {
		t.Fatal("nothing appended")
	}
	for i, s := range streams {
		for _, seq := range seqs {
			if ev := s.next(); ev.ID != strconv.FormatUint(seq, 10) {
				t.Fatalf("viewer %d: event %q %s, want durable %d", i, ev.ID, ev.Data, seq)
			}
		}
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_live_subscriptions"); got != 2 {
		t.Errorf("live subscriptions = %v, want 2", got)
	}
}
