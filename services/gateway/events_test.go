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
	"skein.dev/services/gateway/gatewaytest"
)

func chunk(text string) string { return gatewaytest.TextChunk("agent_message_chunk", text) }

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
	e.backend.CreateSession(ns, "s1", "demo")
	// A native update that spans lines must reach the client intact.
	multiline := "{\"sessionUpdate\":\"tool_call\",\r\n \"toolCallId\":\"c1\",\n \"title\":\"Run\",\r \"status\":\"pending\"}"
	s1 := e.backend.Append(ns, "s1", chunk("one"))
	s2 := e.backend.Append(ns, "s1", multiline)

	s := e.stream("/v1/sessions/s1/events")
	if got := s.header.Get("Cache-Control"); got != "no-cache" {
		t.Errorf("Cache-Control = %q, want no-cache", got)
	}
	if p := wantDurable(t, s.next(), s1); p.EventNo != 1 || p.Type != "agent_message_chunk" || p.SessionID != "s1" {
		t.Errorf("first event = %+v, want agent_message_chunk no 1 of s1", p)
	}
	if p := wantDurable(t, s.next(), s2); p.Type != "tool_call" || p.EventNo != 2 {
		t.Errorf("multi-line event = %+v, want tool_call no 2", p)
	}

	s3 := e.backend.Append(ns, "s1", chunk("three"))
	wantDurable(t, s.next(), s3)
	e.backend.Stderr(ns, "s1", "adapter noise") // not for clients
	e.backend.Delta(ns, "s1", s3, chunk("Hel"))
	e.backend.Delta(ns, "s1", s3, chunk("lo"))
	wantEphemeral(t, s.next(), s3, "Hel")
	wantEphemeral(t, s.next(), s3, "lo")
	s4 := e.backend.Append(ns, "s1", chunk("Hello"))
	wantDurable(t, s.next(), s4)

	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_streams"); got != 1 {
		t.Errorf("sse_streams = %v, want 1", got)
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got != 0 {
		t.Errorf("gap fills = %v, want 0", got)
	}
}

func TestEventsResume(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	var seqs []uint64
	for i := range 4 {
		seqs = append(seqs, e.backend.Append(ns, "s1", chunk(strconv.Itoa(i))))
	}
	// ?after=N starts after N.
	s := e.stream("/v1/sessions/s1/events?after=" + strconv.FormatUint(seqs[1], 10))
	wantDurable(t, s.next(), seqs[2])
	wantDurable(t, s.next(), seqs[3])

	// Last-Event-ID wins over ?after, as when an EventSource reconnects
	// to the URL it started with.
	s = e.stream("/v1/sessions/s1/events?after="+strconv.FormatUint(seqs[0], 10),
		withHeader("Last-Event-ID", strconv.FormatUint(seqs[2], 10)))
	wantDurable(t, s.next(), seqs[3])
	s5 := e.backend.Append(ns, "s1", chunk("live"))
	wantDurable(t, s.next(), s5)
}

// TestEventsDedupe holds the stream between its subscription and its
// backfill until a record has been stored: it then arrives twice, from
// history and from the tail, and must be sent once.
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
	e.backend.CreateSession(ns, "s1", "demo")
	s1 := e.backend.Append(ns, "s1", chunk("one"))
	streamed := make(chan *sseStream, 1)
	go func() { streamed <- e.stream("/v1/sessions/s1/events") }()
	<-entered // subscribed, flushed, not yet reading history
	s2 := e.backend.Append(ns, "s1", chunk("two"))
	close(release)
	s := <-streamed

	wantDurable(t, s.next(), s1)
	wantDurable(t, s.next(), s2)
	s3 := e.backend.Append(ns, "s1", chunk("three"))
	wantDurable(t, s.next(), s3) // not s2 again
}

// TestEventsGapFillFromTail: records whose tail messages were lost are
// missed; the next tail message names them as its predecessors and the
// stream fills the gap from history before sending it.
func TestEventsGapFillFromTail(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	s1 := e.backend.Append(ns, "s1", chunk("one"))

	s := e.stream("/v1/sessions/s1/events")
	wantDurable(t, s.next(), s1)
	var s2, s3 uint64
	e.backend.WithoutTail(func() {
		s2 = e.backend.Append(ns, "s1", chunk("two"))
		s3 = e.backend.Append(ns, "s1", chunk("three"))
	})
	s4 := e.backend.Append(ns, "s1", chunk("four"))
	wantDurable(t, s.next(), s2)
	wantDurable(t, s.next(), s3)
	wantDurable(t, s.next(), s4)
	s5 := e.backend.Append(ns, "s1", chunk("five"))
	wantDurable(t, s.next(), s5)
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got != 1 {
		t.Errorf("gap fills = %v, want 1", got)
	}
}

// TestEventsGapFillFromDelta: a delta that follows an event the stream has
// not sent proves that event exists; the stream fills first, so the delta
// comes after the event it follows.
func TestEventsGapFillFromDelta(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	s1 := e.backend.Append(ns, "s1", chunk("one"))

	s := e.stream("/v1/sessions/s1/events")
	wantDurable(t, s.next(), s1)
	var s2 uint64
	e.backend.WithoutTail(func() {
		s2 = e.backend.Append(ns, "s1", `{"sessionUpdate":"tool_call","toolCallId":"c1","title":"t","status":"pending"}`)
	})
	e.backend.Delta(ns, "s1", s2, chunk("after the tool call"))
	wantDurable(t, s.next(), s2)
	wantEphemeral(t, s.next(), s2, "after the tool call")
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got != 1 {
		t.Errorf("gap fills = %v, want 1", got)
	}
}

// TestEventsStaleDeltas: a delta published before the last durable event
// sent is dropped; one that follows it is sent.
func TestEventsStaleDeltas(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	s1 := e.backend.Append(ns, "s1", chunk("one"))
	s2 := e.backend.Append(ns, "s1", chunk("two"))
	s := e.stream("/v1/sessions/s1/events")
	wantDurable(t, s.next(), s1)
	wantDurable(t, s.next(), s2)
	e.backend.Delta(ns, "s1", s1, chunk("stale"))
	e.backend.Delta(ns, "s1", s2, chunk("fresh"))
	wantEphemeral(t, s.next(), s2, "fresh")
}

// TestEventsControlCursor: a cursor may name a lifecycle record (a delta's
// afterSequence does, and a client may resume from one), which no public
// event follows on the tail subject and history never returns. That is not
// a gap.
func TestEventsControlCursor(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	s1 := e.backend.Append(ns, "s1", chunk("one"))
	ctl := e.backend.AppendControl(ns, "s1")
	info, _ := e.backend.Session(ns, "s1")
	if info.LatestSequence != ctl {
		t.Fatalf("latestSequence = %d, want the control record %d", info.LatestSequence, ctl)
	}
	s := e.stream("/v1/sessions/s1/events?after=" + strconv.FormatUint(ctl, 10))
	e.backend.Delta(ns, "s1", ctl, chunk("hi"))
	wantEphemeral(t, s.next(), ctl, "hi")
	s3 := e.backend.Append(ns, "s1", chunk("three"))
	wantDurable(t, s.next(), s3)
	// A delta after a control record the stream has not seen fills once,
	// finds nothing, and is sent.
	ctl2 := e.backend.AppendControl(ns, "s1")
	e.backend.Delta(ns, "s1", ctl2, chunk("a"))
	e.backend.Delta(ns, "s1", ctl2, chunk("b"))
	wantEphemeral(t, s.next(), ctl2, "a")
	wantEphemeral(t, s.next(), ctl2, "b")
	if got := testutil.Metric(t, e.reg, "acp_gateway_sse_gap_fills_total"); got != 1 {
		t.Errorf("gap fills = %v, want 1 (for ctl2 only)", got)
	}
	_ = s1
}

func TestEventsRejectsBadRequests(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
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
	e := newEnv(t, withBackend(gatewaytest.WithMaxEventsPerSession(2)))
	e.backend.CreateSession(ns, "s1", "demo")
	first := e.backend.Append(ns, "s1", chunk("one"))
	e.backend.Append(ns, "s1", chunk("two"))
	e.backend.Append(ns, "s1", chunk("three")) // "one" is pruned
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/events?after="+strconv.FormatUint(first-1, 10), ""), http.StatusGone, events.CodeCursorExpired)
}

func TestEventsHistoryFailsMidStream(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	s1 := e.backend.Append(ns, "s1", chunk("one"))
	s := e.stream("/v1/sessions/s1/events")
	wantDurable(t, s.next(), s1)
	// A record history cannot decode, whose tail message was lost: the
	// fill the next one triggers fails.
	e.backend.WithoutTail(func() { e.backend.AppendCorrupt(ns, "s1") })
	e.backend.Append(ns, "s1", chunk("three"))
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
	e.backend.CreateSession(ns, "s1", "demo")
	s := e.stream("/v1/sessions/s1/events")
	if got := s.comment(); got != "keepalive" {
		t.Errorf("comment = %q, want keepalive", got)
	}
}

// TestEventsShutdown: stopping the gateway ends every stream with an error
// that tells the client to resume.
func TestEventsShutdown(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
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
			e.backend.CreateSession(ns, "s1", "demo")
			url, client := smallBuffers(t, e.gw.Handler())
			slow := &env{t: t, url: url, client: client}
			s := slow.stream("/v1/sessions/s1/events", func(o *streamOptions) { o.paused = true })

			big := strings.Repeat("x", 64<<10)
			var seqs []uint64
			for i := 0; testutil.Metric(t, e.reg, "acp_gateway_sse_overflows_total") == 0; i++ {
				if i == 2000 {
					t.Fatal("no overflow after 2000 events of 64 KiB")
				}
				seqs = append(seqs, e.backend.Append(ns, "s1", chunk(big)))
			}
			close(s.resume)
			got := s.ended()
			if len(got) < 2 {
				t.Fatalf("slow stream carried %d events, want some and an error", len(got))
			}
			wantErrorEvent(t, got[len(got)-1], events.CodeUnavailable)
			got = got[:len(got)-1]
			for i, ev := range got {
				wantDurable(t, ev, seqs[i])
			}
			if len(got) == len(seqs) {
				t.Fatalf("the slow stream carried all %d events; the test did not overflow it", len(seqs))
			}

			r := e.stream("/v1/sessions/s1/events", withHeader("Last-Event-ID", got[len(got)-1].ID))
			for _, seq := range seqs[len(got):] {
				wantDurable(t, r.next(), seq)
			}
			if n := testutil.Metric(t, e.reg, "acp_gateway_sse_stream_ends_total", "reason", "overflow"); n != 1 {
				t.Errorf("stream ends{reason=overflow} = %v, want 1", n)
			}
		})
	}
}
