package gateway_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// wantDurable checks that ev is the durable event seq and returns it.
func wantDurable(t *testing.T, ev sseEvent, seq uint64) publicEvent {
	t.Helper()
	if ev.Event != "durable" || ev.ID != strconv.FormatUint(seq, 10) {
		t.Fatalf("event %q id %q (%s), want durable %d", ev.Event, ev.ID, ev.Data, seq)
	}
	p := decodeEvent(t, ev.Data)
	if p.Sequence != seq || p.Durability != "durable" {
		t.Fatalf("durable data %s, want sequence %d", ev.Data, seq)
	}
	return p
}

// wantEphemeral checks that ev is a delta carrying text after seq.
func wantEphemeral(t *testing.T, ev sseEvent, after uint64, text string) {
	t.Helper()
	if ev.Event != "ephemeral" || ev.ID != "" {
		t.Fatalf("event %q id %q (%s), want ephemeral without id", ev.Event, ev.ID, ev.Data)
	}
	p := decodeEvent(t, ev.Data)
	want := `{"type":"text","text":"` + text + `"}`
	if p.Durability != "ephemeral" || p.AfterSequence == nil || *p.AfterSequence != after || string(p.Content) != want {
		t.Fatalf("ephemeral data %s, want afterSequence %d content %s", ev.Data, after, want)
	}
}

// wantErrorEvent checks that ev is an error event with code.
func wantErrorEvent(t *testing.T, ev sseEvent, code events.Code) {
	t.Helper()
	var body apiError
	if ev.Event != "error" || json.Unmarshal([]byte(ev.Data), &body) != nil || body.Error.Code != string(code) || body.Error.RequestID == "" {
		t.Fatalf("event %q %s, want error %s with a request ID", ev.Event, ev.Data, code)
	}
}

func TestEventsBackfillThenLive(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	seqs := e.backend.Turn("s1", "say one\nupdate "+toolCall)

	s := e.stream("/v1/sessions/s1/events")
	if got := s.header.Get("Cache-Control"); got != "no-cache" {
		t.Errorf("Cache-Control = %q, want no-cache", got)
	}
	if len(seqs) != 3 {
		t.Fatalf("the turn stored events %v, want the prompt, a message and a tool call", seqs)
	}
	for i, want := range []string{"user_message_chunk", "agent_message_chunk", "tool_call"} {
		if p := wantDurable(t, s.next(), seqs[i]); p.EventNo != uint64(i+1) || p.Type != want || p.SessionID != "s1" {
			t.Errorf("event %d = %+v, want %s no %d of s1", i, p, want, i+1)
		}
	}

	// Live: each chunk is a delta after the turn's prompt, then the whole
	// message is durable. The adapter's stderr is not for clients.
	acc := e.backend.StartTurn("s1", nil, "stderr adapter noise\nsay Hel\npause p1\nsay lo\npause p2")
	wantDurable(t, s.next(), acc.Sequence)
	e.backend.Paused("p1")
	wantEphemeral(t, s.next(), acc.Sequence, "Hel")
	e.backend.Release("p1")
	e.backend.Paused("p2")
	wantEphemeral(t, s.next(), acc.Sequence, "lo")
	e.backend.Release("p2")
	e.backend.AwaitTurn("s1", acc)
	msg := e.backend.EventsFrom("s1", acc.Sequence)[1]
	if p := wantDurable(t, s.next(), msg); !strings.Contains(string(p.Content), `"Hello"`) {
		t.Errorf("message = %s, want Hello", p.Content)
	}

	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_streams"); got != 1 {
		t.Errorf("sse_streams = %v, want 1", got)
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got != 0 {
		t.Errorf("gap fills = %v, want 0", got)
	}
}

// toolCall is a tool_call update the test agent sends verbatim.
const toolCall = `{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Run","status":"pending"}`

func TestEventsResume(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	seqs := e.backend.Say("s1", "0", "1", "2")
	// ?after=N starts after N.
	s := e.stream("/v1/sessions/s1/events?after=" + strconv.FormatUint(seqs[1], 10))
	wantDurable(t, s.next(), seqs[2])
	wantDurable(t, s.next(), seqs[3])

	// Last-Event-ID wins over ?after, as when an EventSource reconnects
	// to the URL it started with.
	s = e.stream("/v1/sessions/s1/events?after="+strconv.FormatUint(seqs[0], 10),
		withHeader("Last-Event-ID", strconv.FormatUint(seqs[2], 10)))
	wantDurable(t, s.next(), seqs[3])
	s.wantDurables(e.backend.Say("s1", "live")...)
}

// TestEventsDedupe holds the stream between its subscription and its
// backfill until a turn has been stored: its records then arrive twice,
// from history and from the tail, and must be sent once.
func TestEventsDedupe(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, func(o *envOptions) {
		o.gateway = func(g *gateway.Gateway) {
			gateway.OnStreamSubscribed(g, func() {
				entered <- struct{}{}
				<-release
			})
		}
	})
	e.backend.Open("s1", "demo")
	first := e.backend.Say("s1", "one")
	streamed := make(chan *sseStream, 1)
	go func() { streamed <- e.stream("/v1/sessions/s1/events") }()
	<-entered // subscribed, flushed, not yet reading history
	second := e.backend.Say("s1", "two")
	close(release)
	s := <-streamed

	s.wantDurables(first...)
	s.wantDurables(second...)
	s.wantDurables(e.backend.Say("s1", "three")...) // not second again
}

// TestEventsGapFillFromTail: records whose tail messages were lost are
// missed; the next tail message names them as its predecessors and the
// stream fills the gap from history before sending it.
func TestEventsGapFillFromTail(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	first := e.backend.Say("s1", "one")

	s := e.stream("/v1/sessions/s1/events")
	s.wantDurables(first...)
	var lost []uint64
	e.backend.WithoutTail(func() { lost = e.backend.Say("s1", "two", "three") })
	s.wantDurables(lost...)
	s.wantDurables(e.backend.Say("s1", "four")...)
	// The live feed's check at the lost turn's end may find the gap
	// first; either way it is filled.
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got < 1 {
		t.Errorf("gap fills = %v, want at least 1", got)
	}
}

// TestEventsGapFillFromDelta: a delta that follows an event the stream has
// not sent proves that event exists; the stream fills first, so the delta
// comes after the event it follows.
func TestEventsGapFillFromDelta(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	first := e.backend.Say("s1", "one")

	s := e.stream("/v1/sessions/s1/events")
	s.wantDurables(first...)
	// The turn's prompt and tool call are stored while the tail is lost;
	// the chunk after them is the first the stream hears of the turn.
	var acc *events.PromptAccepted
	var stored []uint64
	e.backend.WithoutTail(func() {
		acc = e.backend.StartTurn("s1", nil, "update "+toolCall+"\npause p1\nsay after the tool call\npause p2")
		e.backend.Paused("p1")
		testutil.Eventually(t, "the tool call to be stored", func() bool {
			stored = e.backend.EventsFrom("s1", acc.Sequence)
			return len(stored) == 2
		})
	})
	e.backend.Release("p1")
	wantDurable(t, s.next(), stored[0])
	wantDurable(t, s.next(), stored[1])
	wantEphemeral(t, s.next(), stored[1], "after the tool call")
	e.backend.Release("p2")
	e.backend.AwaitTurn("s1", acc)
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got != 1 {
		t.Errorf("gap fills = %v, want 1", got)
	}
}

// TestEventsStaleDeltas: a delta published before the last event sent
// with an id (one that arrives late) is dropped; one that follows it is
// sent. The turn's end is such an event (its state event): a late delta
// of a turn that ended, which every viewer has stopped showing, is stale
// too.
func TestEventsStaleDeltas(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	seqs := e.backend.Say("s1", "one")
	end := e.backend.Last("s1")
	s := e.stream("/v1/sessions/s1/events")
	s.wantDurables(seqs...)
	e.backend.publishDelta("s1", seqs[0], "stale")
	e.backend.publishDelta("s1", seqs[1], "of the ended turn")
	e.backend.publishDelta("s1", end, "fresh")
	wantEphemeral(t, s.next(), end, "fresh")
}

// TestEventsControlCursor: a cursor may name a lifecycle record (a delta's
// afterSequence may, and a client may resume from one), which no public
// event follows on the tail subject and history never returns. That is not
// a gap.
func TestEventsControlCursor(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	seqs := e.backend.Say("s1", "one")
	// The turn's end is a lifecycle record after its events.
	ctl := e.backend.Last("s1")
	if ctl <= seqs[len(seqs)-1] {
		t.Fatalf("the log ends at %d, its events at %d: want a lifecycle record last", ctl, seqs[len(seqs)-1])
	}
	s := e.stream("/v1/sessions/s1/events?after="+strconv.FormatUint(ctl, 10), withStates)
	e.backend.publishDelta("s1", ctl, "hi")
	wantEphemeral(t, s.next(), ctl, "hi")
	three := e.backend.Say("s1", "three")
	// The turn's end is a lifecycle record the stream sends as a state
	// event, its sequence as id; once sent, the feed vouches for it, and
	// a delta after it is sent without a fill.
	if st := s.next(); st.Event != "state" || decodeState(t, st.Data).Change != events.ChangeTurnAccepted {
		t.Fatalf("got %+v, want the turn's turn_accepted", st)
	}
	s.wantDurables(three...)
	ctl2 := e.backend.Last("s1")
	if st := s.nextDurable(); st.Event != "state" || st.ID != strconv.FormatUint(ctl2, 10) {
		t.Fatalf("got %+v, want the turn's end, id %d", st, ctl2)
	}
	e.backend.publishDelta("s1", ctl2, "a")
	e.backend.publishDelta("s1", ctl2, "b")
	wantEphemeral(t, s.next(), ctl2, "a")
	wantEphemeral(t, s.next(), ctl2, "b")
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got != 0 {
		t.Errorf("gap fills = %v, want 0", got)
	}
	// A client may resume from it: nothing is missing, and nothing is
	// sent again.
	r := e.stream("/v1/sessions/s1/events?after="+strconv.FormatUint(ctl2, 10), withStates)
	four := e.backend.Say("s1", "four")
	if st := r.nextDurable(); st.Event != "state" || decodeState(t, st.Data).Sequence != four[0] {
		t.Fatalf("resumed after the turn's end: %+v, want the next turn's turn_accepted", st)
	}
	r.wantDurables(four...)
}

func TestEventsRejectsBadRequests(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	wantError(t, e.do(http.MethodGet, "/v1/sessions/a.b/events", ""), http.StatusBadRequest, events.CodeInvalidSessionID)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/events?after=x", ""), http.StatusBadRequest, events.CodeInvalidCursor)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/events", "", "Last-Event-ID", "-3"), http.StatusBadRequest, events.CodeInvalidCursor)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/events?before=3", ""), http.StatusBadRequest, events.CodeInvalidRequest)
	if n := e.backend.Calls(events.OpReadHistory); n != 0 {
		t.Errorf("bad requests reached NATS: %d read_history calls, want 0", n)
	}
	// Failures of the first history read are ordinary HTTP errors.
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody/events", ""), http.StatusNotFound, events.CodeSessionNotFound)
}

// TestEventsCursorExpired: a cursor older than the retained history is
// cursor_expired, an ordinary HTTP error before the stream starts.
func TestEventsCursorExpired(t *testing.T) {
	e := newEnv(t, withMaxEvents(2))
	e.backend.Open("s1", "demo")
	acc := e.backend.StartTurn("s1", nil, "say one\nmessage\nsay two")
	e.backend.AwaitTurn("s1", acc)
	if kept := e.backend.EventsFrom("s1", acc.Sequence); len(kept) != 2 || kept[0] == acc.Sequence {
		t.Fatalf("the log keeps events %v of the turn accepted at %d, want the prompt pruned", kept, acc.Sequence)
	}
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/events?after="+strconv.FormatUint(acc.Sequence-1, 10), ""), http.StatusGone, events.CodeCursorExpired)
}

func TestEventsHistoryFailsMidStream(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	s := e.stream("/v1/sessions/s1/events")
	s.wantDurables(e.backend.Say("s1", "one")...)
	// A record history cannot decode, whose tail message was lost: the
	// fill the delta after it triggers fails.
	var bad uint64
	e.backend.WithoutTail(func() { bad = e.backend.appendCorrupt("s1") })
	e.backend.publishDelta("s1", bad, "three")
	rest := s.ended()
	if len(rest) != 1 {
		t.Fatalf("stream ended with %v, want one error event", rest)
	}
	wantErrorEvent(t, rest[0], events.CodeInternal)
	if strings.Contains(rest[0].Data, "decode") || strings.Contains(rest[0].Data, "msgpack") {
		t.Errorf("error event %s leaks the internal error", rest[0].Data)
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_stream_ends_total", "reason", "error"); got != 1 {
		t.Errorf("stream ends{reason=error} = %v, want 1", got)
	}
}

func TestEventsKeepalive(t *testing.T) {
	e := newEnv(t, withConfig(func(c *gateway.Config) { c.Keepalive = 20 * time.Millisecond }))
	e.backend.Open("s1", "demo")
	s := e.stream("/v1/sessions/s1/events")
	if got := s.comment(); got != "keepalive" {
		t.Errorf("comment = %q, want keepalive", got)
	}
}

// TestEventsShutdown: stopping the gateway ends every stream with an error
// that tells the client to resume.
func TestEventsShutdown(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	s := e.stream("/v1/sessions/s1/events")
	testutil.Eventually(t, "the stream to open", func() bool { return testutil.Metric(t, e.reg, "acp_gateway_sse_streams") == 1 })
	if err := e.stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	rest := s.ended()
	if len(rest) != 1 {
		t.Fatalf("stream ended with %v, want one error event", rest)
	}
	wantErrorEvent(t, rest[0], events.CodeUnavailable)
}

// TestEventsSlowClient: a client that stops reading makes its stream's
// buffer overflow, by message count or by bytes. The stream then ends with
// an error instead of dropping events, and a reconnect with Last-Event-ID
// gets everything else: every durable event arrives exactly once across
// the two connections.
func TestEventsSlowClient(t *testing.T) {
	for _, tt := range []struct {
		name   string
		config func(*gateway.Config)
	}{
		{"messages", func(c *gateway.Config) { c.StreamBuffer = 2 }},
		{"bytes", func(c *gateway.Config) { c.StreamBufferBytes = 200 << 10 }},
	} {
		t.Run("bound="+tt.name, func(t *testing.T) {
			e := newEnv(t, withConfig(tt.config))
			e.backend.Open("s1", "demo")
			url, client := smallBuffers(t, e.gw.Handler())
			slow := &env{t: t, url: url, client: client}
			s := slow.stream("/v1/sessions/s1/events", func(o *streamOptions) { o.paused = true })

			var seqs []uint64
			for i := 0; testutil.Metric(t, e.reg, "acp_gateway_sse_overflows_total") == 0; i++ {
				if i == 500 {
					t.Fatal("no overflow after 500 turns of 64 KiB")
				}
				seqs = append(seqs, e.backend.Turn("s1", "big 65536")...)
			}
			close(s.resume)
			got := s.ended()
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
			if len(durable) == len(seqs) {
				t.Fatalf("the slow stream carried all %d events; the test did not overflow it", len(seqs))
			}

			r := e.stream("/v1/sessions/s1/events", withHeader("Last-Event-ID", durable[len(durable)-1].ID))
			r.wantDurables(seqs[len(durable):]...)
			if n := testutil.Metric(t, e.reg, "acp_gateway_sse_stream_ends_total", "reason", "overflow"); n != 1 {
				t.Errorf("stream ends{reason=overflow} = %v, want 1", n)
			}
		})
	}
}
