package session_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

// Input requests (ACP elicitation/create) under the permission rules.

// inputSchema is a requested schema as an agent may write it, spaces and
// key order its own: the durable event must keep it byte for byte.
const inputSchema = `{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "color": {"type": "string", "enum": ["red", "blue"]}, "ok": {"type": "boolean"}}, "required": ["name"]}`

// inputScript asks for input, then speaks.
const inputScript = `elicit "Who are you?" ` + inputSchema + "\nsay after"

func (h *harness) respondInput(ctx context.Context, sid, requestID, action, content string) (*events.RespondInputResponse, error) {
	req := &events.RespondInputRequest{SessionID: sid, RequestID: requestID, Action: action}
	if content != "" {
		req.Content = events.JSON(content)
	}
	return rpc.Call[events.RespondInputResponse](ctx, h.nc, events.APISubject("default", events.OpRespondInput), req, nil)
}

// waitInputRequest waits until the newest public event of sid is an
// input_request stored after sequence after, and returns it.
func (h *harness) waitInputRequest(ctx context.Context, sid string, after uint64) (*eventlog.Record, *events.InputRequest, error) {
	return waitNewest[events.InputRequest](ctx, h, sid, after)
}

// inputEvents returns sid's input requests and responses, in log order.
func inputEvents(t testing.TB, h *rig, sid string) (reqs []*events.InputRequest, resps []*events.InputResponse) {
	t.Helper()
	recs, err := eventlog.Forward(t.Context(), h.js, events.StreamLog, events.LogSubject("default", events.SessionID(sid), events.LogEvents), 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		switch v, _ := events.Unmarshal(r.Data); v := v.(type) {
		case *events.InputRequest:
			reqs = append(reqs, v)
		case *events.InputResponse:
			resps = append(resps, v)
		}
	}
	return reqs, resps
}

// responsesTo returns the input responses to requestID.
func responsesTo(resps []*events.InputResponse, requestID string) []*events.InputResponse {
	var out []*events.InputResponse
	for _, r := range resps {
		if r.RequestID == requestID {
			out = append(out, r)
		}
	}
	return out
}

// inputState is the part of the session state about input requests.
type inputState struct {
	Status string `json:"status"`
	Inputs []struct {
		RequestID string          `json:"requestId"`
		Request   json.RawMessage `json:"request"`
	} `json:"inputs"`
}

func projectedInputs(t testing.TB, h *rig, sid string) inputState {
	t.Helper()
	resp, err := rpc.Call[events.AcpGetDurableSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSession),
		&events.AcpGetDurableSessionRequest{SessionID: &sid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st inputState
	if err := json.Unmarshal(resp.Session.State, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// The input_request carries the runner's correlation ID and the agent's
// message and schema byte for byte; the session waits with it; answers
// that do not fit the schema write nothing; the first fitting answer
// reaches the agent and is recorded once; later ones are not_pending.
func TestInputRequest(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "in1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	attached, err := h.lastAttached(ctx, "in1")
	if err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "in1", "", inputScript)
	rec, req, err := h.waitInputRequest(ctx, "in1", 0)
	if err != nil {
		t.Fatal(err)
	}

	// The runner's record of it: the same correlation ID, never the
	// agent's JSON-RPC id (a number for the test agent).
	ioRecs, err := eventlog.Forward(ctx, h.js, events.StreamIO, events.IOSessionSubjects("default", "in1"), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var forwarded []*events.AdapterInputRequest
	for _, r := range ioRecs {
		if v, _ := events.Unmarshal(r.Data); v != nil {
			if in, ok := v.(*events.AdapterInputRequest); ok {
				forwarded = append(forwarded, in)
			}
		}
	}
	if len(forwarded) != 1 || forwarded[0].RequestID != req.RequestID || !strings.HasPrefix(req.RequestID, "input_") {
		t.Fatalf("requestId %q; the runner forwarded %+v", req.RequestID, forwarded)
	}
	wantRequest := `{"mode":"form","message":"Who are you?","requestedSchema":` + inputSchema + `}`
	if string(req.Request) != wantRequest {
		t.Errorf("durable request\n got %s\nwant %s", req.Request, wantRequest)
	}
	if strings.Contains(string(req.Request), attached.AcpSessionID) {
		t.Errorf("the durable request leaks the private ACP session ID: %s", req.Request)
	}
	if rec.Header.Get(events.HeaderTurnID) == "" {
		t.Errorf("the input request carries no turn ID")
	}
	// The state is JSON encoded as a whole, which compacts what it holds:
	// the durable event is the byte-for-byte record.
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(wantRequest)); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, "the state to wait on the input", func() (bool, error) {
		st := projectedInputs(t, h, "in1")
		return st.Status == "waiting" && len(st.Inputs) == 1 && st.Inputs[0].RequestID == req.RequestID &&
			string(st.Inputs[0].Request) == compact.String(), nil
	}); err != nil {
		t.Fatalf("%v; state %+v", err, projectedInputs(t, h, "in1"))
	}

	// Answers that do not fit: invalid_request, and nothing written.
	before, err := h.lastSeq(ctx, "in1")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ action, content string }{
		{"accept", `{}`},                           // name is required
		{"accept", ``},                             // the same, no content at all
		{"accept", `{"name":7}`},                   // not a string
		{"accept", `{"name":"x","age":1.5}`},       // not an integer
		{"accept", `{"name":"x","age":"1"}`},       // not a number at all
		{"accept", `{"name":"x","color":"green"}`}, // not in the enum
		{"accept", `{"name":"x","ok":"yes"}`},      // not a boolean
		{"accept", `{"name":"x","nick":"y"}`},      // not in the schema
		{"accept", `{"name":"x","name":"y"}`},      // twice
		{"accept", `["name"]`},                     // not an object
		{"decline", `{"name":"x"}`},                // content with decline
		{"maybe", ``},                              // no such action
	} {
		if _, err := h.respondInput(ctx, "in1", req.RequestID, bad.action, bad.content); code(err) != events.CodeInvalidRequest {
			t.Errorf("answer %s %s = %v, want %s", bad.action, bad.content, err, events.CodeInvalidRequest)
		}
	}
	if after, err := h.lastSeq(ctx, "in1"); err != nil || after != before {
		t.Errorf("the refused answers moved the log from %d to %d (%v)", before, after, err)
	}
	if st := projectedInputs(t, h, "in1"); st.Status != "waiting" || len(st.Inputs) != 1 {
		t.Errorf("after refused answers, state = %+v, want still waiting", st)
	}
	if res, err := h.respondInput(ctx, "in1", "input_nope", "decline", ""); err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonUnknownRequest {
		t.Errorf("answer to an unknown request = %+v, %v", res, err)
	}

	content := `{"name":"skein","age":3.0,"color":"blue","ok":true}`
	res, err := h.respondInput(ctx, "in1", req.RequestID, "accept", content)
	if err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("answer = %+v, %v, want accepted", res, err)
	}
	res, err = h.respondInput(ctx, "in1", req.RequestID, "decline", "")
	if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonAlreadyResolved {
		t.Errorf("second answer = %+v, %v, want not_pending/already_resolved", res, err)
	}
	pr := <-done
	if pr.err != nil || !strings.Contains(string(pr.res.Message), "after") {
		t.Fatalf("prompt = %+v, %v", pr.res, pr.err)
	}
	log, evs := h.readLog(t, "in1")
	if got := agentText(evs, log.Turns[0].ID); got != "input: accept "+content+"\nafter" {
		t.Errorf("agent output %q, want the accepted content, then after", got)
	}
	_, resps := inputEvents(t, h, "in1")
	want := `{"action":"accept","content":` + content + `}`
	if got := responsesTo(resps, req.RequestID); len(got) != 1 || got[0].Status != events.PermissionAccepted || string(got[0].Response) != want {
		t.Errorf("input responses %+v, want one accepted with %s", got, want)
	}
	if st := projectedInputs(t, h, "in1"); st.Status != "idle" || len(st.Inputs) != 0 {
		t.Errorf("state after the turn = %+v, want idle", st)
	}

	// A person answers by default: the agent was offered form elicitation.
	if _, err := h.prompt(ctx, "in1", "", "caps"); err != nil {
		t.Fatal(err)
	}
	log, evs = h.readLog(t, "in1")
	if caps := agentText(evs, log.Turns[1].ID); !strings.Contains(caps, `"elicitation":{"form":{}}`) {
		t.Errorf("%s, want form elicitation advertised", caps)
	}
}

// inputPolicy decline: the capability is not advertised, and a request
// that comes anyway is declined at once, the request and the decline both
// in the log.
func TestInputPolicyDecline(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "in2", events.AcpOpenSessionRequest{InputPolicy: ptr(events.InputPolicyDecline)}); err != nil {
		t.Fatal(err)
	}
	if err := h.open(t, "in2", events.AcpOpenSessionRequest{}); code(err) != events.CodeSessionConflict {
		t.Errorf("reopen with the default input policy = %v, want %s", err, events.CodeSessionConflict)
	}
	if _, err := h.prompt(ctx, "in2", "", "caps\n"+inputScript); err != nil {
		t.Fatal(err)
	}
	log, evs := h.readLog(t, "in2")
	if got := agentText(evs, log.Turns[0].ID); !strings.HasPrefix(got, "caps: {") || strings.Contains(got, "elicitation") || !strings.HasSuffix(got, "input: decline\nafter") {
		t.Errorf("agent output %q, want capabilities without elicitation, then the decline", got)
	}
	reqs, resps := inputEvents(t, h, "in2")
	if len(reqs) != 1 || len(resps) != 1 || resps[0].RequestID != reqs[0].RequestID {
		t.Fatalf("input requests %+v, responses %+v, want one of each", reqs, resps)
	}
	if r := resps[0]; r.Status != events.PermissionTerminal || r.Reason == nil || *r.Reason != events.ReasonInputPolicy || string(r.Response) != `{"action":"decline"}` {
		t.Errorf("response %+v, want terminal/input_policy with a decline", r)
	}
	if res, err := h.respondInput(ctx, "in2", reqs[0].RequestID, "accept", `{"name":"x"}`); err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonInputPolicy {
		t.Errorf("a late answer = %+v, %v, want not_pending/input_policy", res, err)
	}
}

// Cancel, unload, the adapter's exit and delete each end an open request
// with a terminal outcome; the agent hears cancel when it is still there,
// and a late answer names what ended it.
func TestInputTerminal(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		end    func(t *testing.T, sid string)
		reason string
	}{
		{"cancel", func(t *testing.T, sid string) {
			if _, err := h.cancelPrompt(ctx, sid); err != nil {
				t.Fatal(err)
			}
		}, events.ReasonPromptCancelled},
		{"unload", func(t *testing.T, sid string) { h.unload(t, sid) }, events.ReasonPromptCancelled},
		{"exit", func(t *testing.T, sid string) {
			attached, err := h.lastAttached(ctx, sid)
			if err != nil || attached.Pid == nil {
				t.Fatalf("attached %+v, %v", attached, err)
			}
			if err := syscall.Kill(int(*attached.Pid), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}, events.ReasonAdapterExited},
		{"delete", func(t *testing.T, sid string) { h.deleteSession(t, sid) }, events.ReasonSessionDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := "it-" + tc.name
			if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
				t.Fatal(err)
			}
			done := h.promptAsync(ctx, sid, "", inputScript)
			_, req, err := h.waitInputRequest(ctx, sid, 0)
			if err != nil {
				t.Fatal(err)
			}
			tc.end(t, sid)
			<-done
			res, err := h.respondInput(ctx, sid, req.RequestID, "accept", `{"name":"late"}`)
			if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != tc.reason {
				t.Errorf("a late answer = %+v, %v, want not_pending/%s", res, err, tc.reason)
			}
			if tc.name == "delete" {
				return // the log is gone with the session
			}
			log, evs := h.readLog(t, sid)
			_, resps := inputEvents(t, h, sid)
			got := responsesTo(resps, req.RequestID)
			if len(got) != 1 || got[0].Status != events.PermissionTerminal || got[0].Reason == nil || *got[0].Reason != tc.reason ||
				string(got[0].Response) != `{"action":"cancel"}` {
				t.Fatalf("input responses %+v, want one terminal/%s cancel", got, tc.reason)
			}
			if tc.name == "cancel" {
				if text := agentText(evs, log.Turns[0].ID); text != "" && text != "input: cancel\n" && text != "input: cancelled\n" {
					t.Errorf("agent output %q", text)
				}
			}
			if st := projectedInputs(t, h, sid); len(st.Inputs) != 0 {
				t.Errorf("state %+v still lists inputs", st)
			}
		})
	}
}

// The owner stops while a request waits: the next one rebuilds it from the
// log alone, and an answer to it reaches the agent.
func TestInputTakeover(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "in3", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	first := h.promptAsync(ctx, "in3", "key-1", inputScript)
	_, req, err := h.waitInputRequest(ctx, "in3", 0)
	if err != nil {
		t.Fatal(err)
	}
	h.stopSvc()
	h.startSession() // takes the turn over, its request pending
	if err := testutil.Poll(ctx, "the new owner to show the input", func() (bool, error) {
		st := projectedInputs(t, h, "in3")
		return st.Status == "waiting" && len(st.Inputs) == 1 && st.Inputs[0].RequestID == req.RequestID, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.respondInput(ctx, "in3", req.RequestID, "accept", `{"age":1}`); code(err) != events.CodeInvalidRequest {
		t.Errorf("a missing required field after the takeover = %v, want %s: the schema is rebuilt too", err, events.CodeInvalidRequest)
	}
	if res, err := h.respondInput(ctx, "in3", req.RequestID, "accept", `{"name":"n"}`); err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("answer after the takeover = %+v, %v", res, err)
	}
	if r := <-first; r.err != nil || !strings.Contains(string(r.res.Message), "after") {
		t.Fatalf("prompt across the stop = %+v, %v", r.res, r.err)
	}
	log, evs := h.readLog(t, "in3")
	if got := agentText(evs, log.Turns[0].ID); got != "input: accept {\"name\":\"n\"}\nafter" {
		t.Errorf("agent output %q", got)
	}
}

// turnOfInput returns the finish of the turn that asked requestID, the
// agent's text in it, and the durable responses to the request, from the
// audited log. It fails no test itself: parallelLoops' goroutines call it.
func turnOfInput(ctx context.Context, h *rig, sid, requestID string) (*events.TurnFinished, string, []*events.InputResponse, error) {
	log, evs, err := h.audit(ctx, sid)
	if err != nil {
		return nil, "", nil, err
	}
	var resps []*events.InputResponse
	for _, r := range log.Events {
		if v, _ := events.Unmarshal(r.Data); v != nil {
			if resp, ok := v.(*events.InputResponse); ok && resp.RequestID == requestID {
				resps = append(resps, resp)
			}
		}
	}
	for _, turn := range log.Turns {
		for _, r := range turn.Records {
			if v, _ := events.Unmarshal(r.Data); v != nil {
				if in, ok := v.(*events.InputRequest); ok && in.RequestID == requestID {
					if turn.Finish == nil || finishes(turn) != 1 {
						return nil, "", nil, fmt.Errorf("the turn of %s finished %d times", requestID, finishes(turn))
					}
					return turn.Finish, agentText(evs, turn.ID), resps, nil
				}
			}
		}
	}
	return nil, "", nil, fmt.Errorf("no turn asked %s", requestID)
}

// A request Skein cannot forward (here a schema that is not an object's)
// is refused by the runner with -32602 and nothing is recorded: the turn
// goes on.
func TestInputRequestRefused(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "in4", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "in4", "", `elicit {"type": "array"}`+"\nsay after"); err != nil {
		t.Fatal(err)
	}
	log, evs := h.readLog(t, "in4")
	if got := agentText(evs, log.Turns[0].ID); !strings.HasPrefix(got, "input: error -32602 ") || !strings.HasSuffix(got, "after") {
		t.Errorf("agent output %q, want the refusal, then after", got)
	}
	if reqs, resps := inputEvents(t, h, "in4"); len(reqs) != 0 || len(resps) != 0 {
		t.Errorf("input events %+v, %+v, want none", reqs, resps)
	}
}
