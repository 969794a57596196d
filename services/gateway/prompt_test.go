package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
)

// The prompt's caller waits on the log, never on a held request (DESIGN
// invariant 7): these tests hold the gateway to it.

// TestPromptOutlivesTheAcceptingReplica: the session service replica that
// accepted the turn answers and is gone; another writer ends the turn in
// the log. The HTTP prompt gets the turn's result all the same.
func TestPromptOutlivesTheAcceptingReplica(t *testing.T) {
	e := newEnv(t, withoutBackend)
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{}, true); err != nil {
		t.Fatal(err)
	}
	w := eventlog.NewWriter(js, ns, "s1", eventlog.Position{}, "replica-a")
	if _, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "demo", PermissionPolicy: events.PolicyAllowAll}}); err != nil {
		t.Fatal(err)
	}

	// Replica A accepts the turn, answers, and stops serving.
	accepted := make(chan *events.PromptAccepted, 1)
	svc, err := micro.AddService(e.nc, micro.Config{Name: "replica-a", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddEndpoint("prompt", micro.HandlerFunc(func(req micro.Request) {
		got, err := w.Append(context.WithoutCancel(t.Context()), eventlog.Entry{Kind: events.LogEvents,
			Header: map[string][]string{events.HeaderTurnID: {"t1"}, events.HeaderTurnAccepted: {"1"}},
			Value:  &events.AcpDurableSessionUpdate{Update: events.JSON(TextChunk("user_message_chunk", "hi"))}})
		if err != nil {
			_ = rpc.RespondError(req, err)
			return
		}
		acc := &events.PromptAccepted{SessionID: "s1", TurnID: "t1", Sequence: got[0].Seq}
		_ = rpc.Respond(req, acc)
		accepted <- acc
	}), micro.WithEndpointSubject(events.APISubject(ns, events.OpPrompt)))
	if err != nil {
		t.Fatal(err)
	}
	prompt := make(chan response, 1)
	go func() {
		prompt <- e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"hi"}]}`)
	}()
	acc := await(t, accepted, prompt)
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}

	// Replica B takes the session over and finishes the turn.
	// Its finish names the turn's reply by its record, as the session
	// service's does.
	b := eventlog.NewWriter(js, ns, "s1", w.Position(), "replica-b")
	reply := events.JSON(TextChunk("agent_message_chunk", "done"))
	got, err := b.Append(t.Context(),
		eventlog.Entry{Kind: events.LogControl, Value: &events.OwnerChanged{Owner: "b", LeaseRevision: 2}},
		eventlog.Entry{Kind: events.LogEvents, Header: map[string][]string{events.HeaderTurnID: {acc.TurnID}},
			Value: &events.AcpDurableSessionUpdate{Update: reply}},
	)
	if err != nil {
		t.Fatal(err)
	}
	msg := got[1].Seq
	if _, err := b.Append(t.Context(), eventlog.Entry{Kind: events.LogControl, Value: &events.TurnFinished{TurnID: acc.TurnID,
		Outcome: events.OutcomeCompleted, StopReason: "end_turn", Message: reply, MessageSeq: msg}}); err != nil {
		t.Fatal(err)
	}
	r := <-prompt
	// The reply as history shows it: the agent's update in Skein's
	// envelope, from its record.
	rec, err := eventlog.At(t.Context(), js, events.StreamLog, msg)
	if err != nil || rec == nil {
		t.Fatalf("the reply's record %d: %v, %v", msg, rec, err)
	}
	entry, err := eventlog.HistoryEntry("s1", rec.Sequence, rec.Time, rec.Header, rec.Data)
	if err != nil {
		t.Fatal(err)
	}
	public, err := eventjson.Durable(entry)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(public), `"text":"done"`) {
		t.Fatalf("the reply as history shows it = %s, want its text", public)
	}
	want := `{"sessionId":"s1","message":` + string(public) + `,"stopReason":"end_turn"}`
	if r.status != http.StatusOK || string(r.body) != want {
		t.Errorf("prompt = %d %s, want 200 %s", r.status, r.body, want)
	}
}

// TestPromptIdempotencyKey: a prompt sent again with its idempotency key
// gets the same turn's outcome, whether the turn still runs or already
// ended; the key with other content is idempotency_conflict.
func TestPromptIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	const body = `{"idempotencyKey":"k1","content":[{"type":"text","text":"say once\npause p1"}]}`
	first := make(chan response, 1)
	go func() { first <- e.do(http.MethodPost, "/v1/sessions/s1/prompt", body) }()
	e.backend.Paused("p1")
	// A retry while the turn runs waits for the same turn, not session_busy.
	prompts := e.backend.Calls(events.OpPrompt)
	retry := make(chan response, 1)
	go func() { retry <- e.do(http.MethodPost, "/v1/sessions/s1/prompt", body) }()
	testutil.Eventually(t, "the retry to reach the session service", func() bool { return e.backend.Calls(events.OpPrompt) > prompts })
	wantError(t, e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"idempotencyKey":"k1","content":[{"type":"text","text":"other"}]}`),
		http.StatusConflict, events.CodeIdempotencyConflict)
	e.backend.Release("p1")
	answers := map[string]response{"first": <-first, "retry while running": <-retry}

	// The message as history shows it, once the turn ended: its one reply.
	r := e.do(http.MethodGet, "/v1/sessions/s1/history", "")
	var page struct{ Events []json.RawMessage }
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatalf("history = %s: %v", r.body, err)
	}
	var reply []json.RawMessage
	for _, ev := range page.Events {
		if strings.Contains(string(ev), `"type":"agent_message_chunk"`) {
			reply = append(reply, ev)
		}
	}
	if len(reply) != 1 || !strings.Contains(string(reply[0]), `"text":"once"`) {
		t.Fatalf("history has replies %s, want one (one turn)", reply)
	}
	want := `{"sessionId":"s1","message":` + string(reply[0]) + `,"stopReason":"end_turn"}`
	for name, r := range answers {
		if r.status != http.StatusOK || string(r.body) != want {
			t.Errorf("%s = %d %s, want 200 %s", name, r.status, r.body, want)
		}
	}
	// After the turn: its stored outcome, at once; no new turn.
	if r := e.do(http.MethodPost, "/v1/sessions/s1/prompt", body); r.status != http.StatusOK || string(r.body) != want {
		t.Errorf("retry after the turn = %d %s, want 200 %s", r.status, r.body, want)
	}
}

// TestPromptClientGoesAway: a client that disconnects ends the gateway's
// wait (the handler returns, counted as 499), and the turn goes on.
func TestPromptClientGoesAway(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/sessions/s1/prompt", strings.NewReader(`{"content":[{"type":"text","text":"pause p1"}]}`))
		if err == nil {
			var resp *http.Response
			if resp, err = e.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		done <- err
	}()
	e.backend.Paused("p1")
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	testutil.Eventually(t, "the prompt handler to return", func() bool {
		return testutil.Metric(t, e.reg, "acp_gateway_requests_total", "route", "POST /v1/sessions/{id}/prompt", "code", "499") == 1
	})
	if st := e.backend.State("s1"); st.Status != events.StatusRunning {
		t.Errorf("state = %+v, want the turn still running", st)
	}
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/cancel", ""), `{"status":"cancelled"}`)
}

// TestWrongReplyVariant: a service that answers with the wrong variant is
// an internal error (masked, logged), never a panic.
func TestWrongReplyVariant(t *testing.T) {
	e := newEnv(t, withoutBackend)
	svc, err := micro.AddService(e.nc, micro.Config{Name: "confused", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	wrong := micro.HandlerFunc(func(req micro.Request) { _ = rpc.Respond(req, &events.AcpListAgentsResponse{}) })
	for _, op := range []events.Op{events.OpPrompt, events.OpCancelPrompt, events.OpUnloadSession, events.OpDeleteSession} {
		if err := svc.AddEndpoint(string(op), wrong, micro.WithEndpointSubject(events.APISubject(ns, op))); err != nil {
			t.Fatal(err)
		}
	}
	for _, rt := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"hi"}]}`},
		{http.MethodPost, "/v1/sessions/s1/cancel", ""},
		{http.MethodPost, "/v1/sessions/s1/unload", ""},
		{http.MethodDelete, "/v1/sessions/s1", ""},
	} {
		r := e.do(rt.method, rt.path, rt.body)
		if body := wantError(t, r, http.StatusInternalServerError, events.CodeInternal); body.Error.Message != "internal error" {
			t.Errorf("%s %s: message %q, want a masked one", rt.method, rt.path, body.Error.Message)
		}
	}
	if !strings.Contains(e.logs.String(), "AcpListAgentsResponse") {
		t.Errorf("the log does not name the wrong variant:\n%s", e.logs.String())
	}
}
