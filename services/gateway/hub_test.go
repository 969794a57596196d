package gateway_test

import (
	"context"
	"net/http"
	"strconv"
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
	e.backend.Open("s1", "demo")
	e.backend.Open("s2", "demo")
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

	acc := e.backend.StartTurn("s1", nil, "say on\npause p1")
	for _, s := range many {
		wantDurable(t, s.next(), acc.Sequence)
	}
	e.backend.Paused("p1")
	for _, s := range many {
		wantEphemeral(t, s.next(), acc.Sequence, "on")
	}
	e.backend.Release("p1")
	e.backend.AwaitTurn("s1", acc)
	first := e.backend.EventsFrom("s1", acc.Sequence)
	other := e.backend.Say("s2", "other")
	for _, s := range many {
		s.wantDurables(first[1:]...)
	}
	one[0].wantDurables(other...)

	closeMany()
	testutil.Eventually(t, "s1's subscriptions to go", func() bool { return subs() == 2 })
	closeOne()
	testutil.Eventually(t, "every subscription to go", func() bool { return subs() == 0 })

	// A new viewer subscribes again, and misses nothing in between.
	third := e.backend.Say("s1", "three")
	again, closeAgain := e.viewers(1, "/v1/sessions/s1/events?after="+strconv.FormatUint(first[len(first)-1], 10))
	defer closeAgain()
	again[0].wantDurables(third...)
	again[0].wantDurables(e.backend.Say("s1", "four")...)
	if got := subs(); got != 2 {
		t.Errorf("live subscriptions with one viewer again = %v, want 2", got)
	}
}

// TestLiveHubCatchUpOnce: when the tail skips events, the session's feed
// reads them back once, by event number, for all its viewers: each viewer
// gets them in order, and no viewer reads history for them.
func TestLiveHubCatchUpOnce(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	streams, closeAll := e.viewers(8, "/v1/sessions/s1/events")
	defer closeAll()
	first := e.backend.Say("s1", "one") // the feed counts from here
	for _, s := range streams {
		s.wantDurables(first...)
	}
	reads := e.backend.Calls(events.OpReadHistory)

	var lost []uint64
	e.backend.WithoutTail(func() { lost = e.backend.Say("s1", "two", "three") })
	next := e.backend.Say("s1", "four")
	for _, s := range streams {
		if p := wantDurable(t, s.nextDurable(), lost[0]); p.EventNo != 3 {
			t.Errorf("caught-up event = %+v, want event no 3", p)
		}
		s.wantDurables(lost[1:]...)
		s.wantDurables(next...)
	}
	// A delta after records the tail skipped: one more catch-up, then the
	// delta after them.
	var acc *events.PromptAccepted
	var stored []uint64
	e.backend.WithoutTail(func() {
		acc = e.backend.StartTurn("s1", nil, "update "+toolCall+"\npause p1\nsay six\npause p2")
		e.backend.Paused("p1")
		testutil.Eventually(t, "the tool call to be stored", func() bool {
			stored = e.backend.EventsFrom("s1", acc.Sequence)
			return len(stored) == 2
		})
	})
	e.backend.Release("p1")
	for _, s := range streams {
		s.wantDurables(stored...)
		wantEphemeral(t, s.next(), stored[1], "six")
	}
	e.backend.Release("p2")
	e.backend.AwaitTurn("s1", acc)
	// One per gap, for all 8 viewers; the live feed's check at a lost
	// turn's end may find a gap before the next message does.
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got < 2 || got > 4 {
		t.Errorf("gap fills = %v, want 2 to 4 (at most two per gap, for all 8 viewers)", got)
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
	e.backend.Open("s1", "demo")
	fast, closeFast := e.viewers(1, "/v1/sessions/s1/events")
	defer closeFast()
	url, client := smallBuffers(t, e.gw.Handler()) // the same gateway, so the same feed
	slowEnv := &env{t: t, url: url, client: client}
	slow := slowEnv.stream("/v1/sessions/s1/events", func(o *streamOptions) { o.paused = true })
	testutil.Eventually(t, "the slow stream to open", func() bool { return testutil.Metric(t, e.reg, "acp_gateway_sse_streams") == 2 })

	var seqs []uint64
	for i := 0; testutil.Metric(t, e.reg, "acp_gateway_sse_overflows_total") == 0; i++ {
		if i == 500 {
			t.Fatal("no overflow after 500 turns of 64 KiB")
		}
		seqs = append(seqs, e.backend.Turn("s1", "big 65536")...)
	}
	seqs = append(seqs, e.backend.Say("s1", "after", "after", "after")...)
	fast[0].wantDurables(seqs...)
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_overflows_total"); got != 1 {
		t.Errorf("overflows = %v, want 1 (the slow viewer only)", got)
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_live_subscriptions"); got != 2 {
		t.Errorf("live subscriptions = %v, want 2", got)
	}

	close(slow.resume)
	got := slow.ended()
	if len(got) == 0 {
		t.Fatal("the slow stream ended without an error event")
	}
	wantErrorEvent(t, got[len(got)-1], events.CodeUnavailable)
	var durable []sseEvent
	for _, ev := range got[:len(got)-1] {
		if ev.Event != "ephemeral" {
			durable = append(durable, ev)
		}
	}
	if len(durable) == 0 {
		t.Fatalf("slow stream carried %v, want some durable events and an error", got)
	}
	for i, ev := range durable {
		wantDurable(t, ev, seqs[i])
	}
	r := e.stream("/v1/sessions/s1/events", withHeader("Last-Event-ID", durable[len(durable)-1].ID))
	r.wantDurables(seqs[len(durable):]...)
}

// TestLiveHubJoinWhileAppending: viewers join a session's feed one after
// another while events are appended without pause. Each follows the
// protocol (join, backfill after its cursor, dedupe by sequence), so each
// receives every event of the log from its cursor on, once and in order,
// whichever of the backfill and the feed brought it.
func TestLiveHubJoinWhileAppending(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
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
			seqs = append(seqs, e.backend.Say("s1", strconv.Itoa(i))...)
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
			if ev := s.nextDurable(); ev.ID != strconv.FormatUint(seq, 10) {
				t.Fatalf("viewer %d: event %q %s, want durable %d", i, ev.ID, ev.Data, seq)
			}
		}
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_live_subscriptions"); got != 2 {
		t.Errorf("live subscriptions = %v, want 2", got)
	}
}
