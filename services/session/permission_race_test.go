package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

// The permission rules: a response against the adapter's exit, and the
// requests a turn keeps pending together. The races both kinds of request
// share (an answer against a cancel or another answer) are in
// waiting_race_test.go.

// permissionScript asks for one permission, then speaks.
const permissionScript = "permission call_1 allow_once=yes,reject_once=no\nsay after"

// Policy ask: the durable permission_request carries the adapter's exact
// options and none of its private IDs; the session is waiting with it; an
// invalid option does not consume it; a valid one is accepted once.
func TestAskPermission(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	attached, err := h.lastAttached(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "s1", "", permissionScript)
	rec, req, err := h.waitPermissionRequest(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}

	// The adapter's own request, as the runner saw it.
	agentReq := adapterPermissionRequests(t, h, "s1")
	if len(agentReq) != 1 {
		t.Fatalf("%d session/request_permission on ACP_IO, want 1", len(agentReq))
	}
	var stored map[string]json.RawMessage
	if err := json.Unmarshal(req.Request, &stored); err != nil {
		t.Fatal(err)
	}
	if _, ok := stored["sessionId"]; ok {
		t.Errorf("the durable request carries a sessionId: %s", req.Request)
	}
	if strings.Contains(string(req.Request), attached.AcpSessionID) {
		t.Errorf("the durable request leaks the private ACP session ID %s: %s", attached.AcpSessionID, req.Request)
	}
	if string(stored["options"]) != string(agentReq[0].params["options"]) {
		t.Errorf("durable options = %s, the adapter offered %s", stored["options"], agentReq[0].params["options"])
	}
	if string(stored["toolCall"]) != string(agentReq[0].params["toolCall"]) {
		t.Errorf("durable toolCall = %s, the adapter sent %s", stored["toolCall"], agentReq[0].params["toolCall"])
	}
	// The public ID is the runner's correlation ID, never the adapter's
	// JSON-RPC id (which stays inside the runner).
	if !strings.HasPrefix(req.RequestID, "perm_") || req.RequestID != agentReq[0].id {
		t.Errorf("requestId %q, the runner's correlation ID %q", req.RequestID, agentReq[0].id)
	}
	if rec.Header.Get(events.HeaderTurnID) == "" {
		t.Errorf("the permission request carries no turn ID")
	}

	// The session's state is waiting, with the request.
	if err := testutil.Poll(ctx, "the projection to say waiting", func() (bool, error) {
		st := projectedState(t, h, "s1")
		return st.Status == "waiting" && len(st.Requests) == 1 && st.Requests[0].RequestID == req.RequestID, nil
	}); err != nil {
		t.Fatalf("%v; state %+v", err, projectedState(t, h, "s1"))
	}

	// An invalid option names the valid ones and consumes nothing.
	_, err = h.respondPermission(ctx, "s1", req.RequestID, "maybe")
	if code(err) != events.CodeInvalidPermissionOption || !strings.Contains(err.Error(), `"yes"`) || !strings.Contains(err.Error(), `"no"`) {
		t.Fatalf("respond with an invalid option = %v, want %s listing yes and no", err, events.CodeInvalidPermissionOption)
	}
	if st := projectedState(t, h, "s1"); st.Status != "waiting" || len(st.Requests) != 1 {
		t.Errorf("after an invalid option, state = %+v, want still waiting", st)
	}
	// An unknown request is not pending.
	if res, err := h.respondPermission(ctx, "s1", "perm_nope", "yes"); err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonUnknownRequest {
		t.Errorf("respond to an unknown request = %+v, %v", res, err)
	}
	// A session is named explicitly.
	if _, err := h.respondPermission(ctx, "", req.RequestID, "yes"); code(err) != events.CodeInvalidSessionID {
		t.Errorf("respond without a session = %v, want %s", err, events.CodeInvalidSessionID)
	}

	res, err := h.respondPermission(ctx, "s1", req.RequestID, "yes")
	if err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("respond = %+v, %v, want accepted", res, err)
	}
	if n := testutil.Metric(t, h.reg, "acp_session_permission_wait_seconds", "end", "answered"); n != 1 {
		t.Errorf("%v permission waits observed as answered, want 1", n)
	}
	res, err = h.respondPermission(ctx, "s1", req.RequestID, "no")
	if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonAlreadyResolved {
		t.Errorf("second respond = %+v, %v, want not_pending/already_resolved", res, err)
	}
	pr := <-done
	if pr.err != nil || !strings.Contains(string(pr.res.Message), "after") {
		t.Fatalf("prompt = %+v, %v", pr.res, pr.err)
	}
	res, err = h.respondPermission(ctx, "s1", req.RequestID, "yes")
	if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonAlreadyResolved {
		t.Errorf("respond after the turn = %+v, %v, want not_pending/already_resolved", res, err)
	}

	log, evs := h.readLog(t, "s1")
	if got := log.Outcomes(); !slices.Equal(got, []string{"completed"}) {
		t.Fatalf("outcomes = %v", got)
	}
	turn := log.Turns[0]
	if got := agentText(evs, turn.ID); got != "permission: selected yes\nafter" {
		t.Errorf("agent output %q, want the selected option, then after", got)
	}
	resps := permissionResponses(evs, req.RequestID)
	if len(resps) != 1 || resps[0].resp.Status != events.PermissionAccepted || !strings.Contains(string(resps[0].resp.Response), `"yes"`) {
		t.Errorf("permission responses = %+v, want one accepted with yes", resps)
	}
	if st := projectedState(t, h, "s1"); st.Status != "idle" {
		t.Errorf("state after the turn = %+v, want idle", st)
	}
}

// Two permission requests in one turn. The test agent asks one at a time
// (it waits for each answer), so they are sequential: each is pending alone,
// each gets its own requestId, each is resolved once.
func TestAskTwoPermissionsInOneTurn(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "s1", "", "permission call_1 allow_once=a1,reject_once=r1\npermission call_2 allow_always=a2,reject_always=r2\nsay end")
	rec1, req1, err := h.waitPermissionRequest(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := h.respondPermission(ctx, "s1", req1.RequestID, "r1"); err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("respond 1 = %+v, %v", res, err)
	}
	_, req2, err := h.waitPermissionRequest(ctx, "s1", rec1.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if req2.RequestID == req1.RequestID {
		t.Fatalf("two requests share the ID %s", req1.RequestID)
	}
	if _, err := h.respondPermission(ctx, "s1", req2.RequestID, "r1"); code(err) != events.CodeInvalidPermissionOption {
		t.Errorf("request 2 with request 1's option = %v, want %s", err, events.CodeInvalidPermissionOption)
	}
	if res, err := h.respondPermission(ctx, "s1", req2.RequestID, "a2"); err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("respond 2 = %+v, %v", res, err)
	}
	pr := <-done
	if pr.err != nil || pr.res.StopReason != "end_turn" {
		t.Fatalf("prompt = %+v, %v", pr.res, pr.err)
	}
	log, evs := h.readLog(t, "s1")
	if got := agentText(evs, log.Turns[0].ID); got != "permission: selected r1\npermission: selected a2\nend" {
		t.Errorf("agent output %q", got)
	}
	for _, id := range []string{req1.RequestID, req2.RequestID} {
		if n := len(permissionResponses(evs, id)); n != 1 {
			t.Errorf("%s has %d permission responses, want 1", id, n)
		}
	}
}

// agentRequest is a session/request_permission as the runner recorded it:
// its correlation ID and the adapter's params (without sessionId).
type agentRequest struct {
	id     string
	params map[string]json.RawMessage
}

func adapterPermissionRequests(t *testing.T, h *rig, sid string) []agentRequest {
	t.Helper()
	recs, err := eventlog.Forward(t.Context(), h.js, events.StreamIO, events.IOSessionSubjects("default", events.SessionID(sid)), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []agentRequest
	for _, r := range recs {
		v, err := events.Unmarshal(r.Data)
		if err != nil {
			t.Fatal(err)
		}
		req, ok := v.(*events.AdapterPermissionRequest)
		if !ok {
			continue
		}
		var params map[string]json.RawMessage
		if err := json.Unmarshal(req.Request, &params); err != nil {
			t.Fatal(err)
		}
		out = append(out, agentRequest{req.RequestID, params})
	}
	return out
}

// sessionState is the state a session's ACP_SESSIONS projection shows.
type sessionState struct {
	Status   string `json:"status"`
	TurnID   string `json:"turnId"`
	Requests []struct {
		RequestID string          `json:"requestId"`
		Request   json.RawMessage `json:"request"`
	} `json:"requests"`
	Inputs []struct {
		RequestID string          `json:"requestId"`
		Request   json.RawMessage `json:"request"`
	} `json:"inputs"`
	Error *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// projectedMeta returns sid's ACP_SESSIONS projection.
func projectedMeta(t testing.TB, h *rig, sid string) *events.SessionMeta {
	t.Helper()
	kv, err := h.js.KeyValue(t.Context(), events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), events.SessionKey("default", events.SessionID(sid)))
	if err != nil {
		t.Fatal(err)
	}
	meta, err := events.Decode[events.SessionMeta](e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return meta
}

// projectedState is the session's state as a client reads it: getSession
// (the history service), which must never say a turn runs after its
// prompt returned.
func projectedState(t testing.TB, h *rig, sid string) sessionState {
	t.Helper()
	resp, err := rpc.Call[events.AcpGetDurableSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSession),
		&events.AcpGetDurableSessionRequest{SessionID: &sid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st sessionState
	if err := json.Unmarshal(resp.Session.State, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func permissionResponses(evs []decoded, requestID string) []decoded {
	var out []decoded
	for _, e := range evs {
		if e.resp != nil && e.resp.RequestID == requestID {
			out = append(out, e)
		}
	}
	return out
}

// permRace runs n iterations of a race over a pending permission request,
// spread over four ask sessions (requestRace, with permissionScript).
func permRace(t *testing.T, h *rig, n int,
	contend func(sid string, i int, req *events.AcpDurablePermissionRequest) (any, error),
	check func(sid string, i int, req *events.AcpDurablePermissionRequest, got any, pr promptResult) error,
) {
	t.Helper()
	requestRace(t, h, n, []string{"p0", "p1", "p2", "p3"}, events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)},
		permissionScript, h.waitPermissionRequest, contend, check)
}

// requestRace runs n iterations of a race over a request that waits for a
// person, spread over the sessions sids, each opened with open. For each,
// it starts a prompt running script, waits for the durable request, and
// calls contend with it; then it waits for the prompt's answer and hands
// everything to check. The sessions' logs are audited at the end.
func requestRace[R any](t *testing.T, h *rig, n int, sids []string, open events.AcpOpenSessionRequest, script string,
	wait func(ctx context.Context, sid string, after uint64) (*eventlog.Record, R, error),
	contend func(sid string, i int, req R) (any, error),
	check func(sid string, i int, req R, got any, pr promptResult) error,
) {
	t.Helper()
	for _, sid := range sids {
		if err := h.open(t, sid, open); err != nil {
			t.Fatal(err)
		}
	}
	ctx := t.Context()
	parallelLoops(t, sids, n, func(sid string, i int) error {
		after, err := h.lastSeq(ctx, sid)
		if err != nil {
			return err
		}
		done := h.promptAsync(ctx, sid, "", script)
		_, req, err := wait(ctx, sid, after)
		if err != nil {
			return err
		}
		got, err := contend(sid, i, req)
		if err != nil {
			return err
		}
		return check(sid, i, req, got, <-done)
	})
	for _, sid := range sids {
		h.readLog(t, sid) // the audit
	}
}

// respondPermission against the adapter's death (SIGKILL): either the answer
// was delivered (accepted; the turn then completes or fails adapter_exited),
// or the exit won (not_pending/adapter_exited). Exactly one
// permission_response either way.
func TestRespondRacesAdapterExit(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	type answers struct {
		respond *events.AcpRespondPermissionResponse
		pid     int
	}
	counts := map[string]int{}
	var mu sync.Mutex
	permRace(t, h, iterations(200),
		func(sid string, i int, req *events.AcpDurablePermissionRequest) (any, error) {
			attached, err := h.lastAttached(ctx, sid)
			if err != nil {
				return nil, err
			}
			if attached.Pid == nil {
				return nil, errors.New("AdapterAttached without a pid")
			}
			a := answers{pid: int(*attached.Pid)}
			var rerr, kerr error
			race(i,
				func() { kerr = syscall.Kill(a.pid, syscall.SIGKILL) },
				func() { a.respond, rerr = h.respondPermission(ctx, sid, req.RequestID, "yes") })
			return a, errors.Join(rerr, kerr)
		},
		func(sid string, i int, req *events.AcpDurablePermissionRequest, got any, pr promptResult) error {
			a := got.(answers)
			// The exit is recorded (after the turn, if the turn won); the
			// next iteration must start on a new adapter.
			if err := testutil.Poll(ctx, "the adapter's exit in the log", func() (bool, error) {
				n, err := h.countCtl(ctx, sid, "AcpAgentExitedEvent")
				return n == i/4+1, err
			}); err != nil {
				return err
			}
			turn, resps, err := turnOfRequest(t, h, sid, req.RequestID)
			if err != nil {
				return err
			}
			if len(resps) != 1 {
				return fmt.Errorf("%d permission responses for %s, want 1", len(resps), req.RequestID)
			}
			resp := resps[0].resp
			key := a.respond.Status + "/" + turn.Finish.Outcome
			switch a.respond.Status {
			case events.PermissionAccepted:
				if resp.Status != events.PermissionAccepted {
					return fmt.Errorf("respond accepted, the log says %+v", resp)
				}
				switch {
				case turn.Finish.Outcome == events.OutcomeCompleted && pr.err == nil:
				case turn.Finish.Outcome == events.OutcomeFailed && code(pr.err) == events.CodeAdapterExited &&
					turn.Finish.Error != nil && turn.Finish.Error.Code == string(events.CodeAdapterExited):
				default:
					return fmt.Errorf("respond accepted; turn %s (%+v), prompt %+v, %v", turn.Finish.Outcome, turn.Finish.Error, pr.res, pr.err)
				}
			case events.PermissionNotPending:
				if a.respond.Reason == nil || *a.respond.Reason != events.ReasonAdapterExited {
					return fmt.Errorf("respond lost with reason %v, want %s", a.respond.Reason, events.ReasonAdapterExited)
				}
				if resp.Status != events.PermissionTerminal || resp.Reason == nil || *resp.Reason != events.ReasonAdapterExited {
					return fmt.Errorf("the exit won, the log's response is %+v", resp)
				}
				if turn.Finish.Outcome != events.OutcomeFailed || code(pr.err) != events.CodeAdapterExited {
					return fmt.Errorf("the exit won; turn %s, prompt %+v, %v", turn.Finish.Outcome, pr.res, pr.err)
				}
			default:
				return fmt.Errorf("respond answered %+v", a.respond)
			}
			mu.Lock()
			counts[key]++
			mu.Unlock()
			return nil
		})
	t.Logf("respond status / turn outcome: %v", counts)
}

// turnOfRequest returns the turn that asked requestID and the durable
// permission responses to it.
func turnOfRequest(t *testing.T, h *rig, sid, requestID string) (*eventlogtest.Turn, []decoded, error) {
	log, err := eventlogtest.Read(t.Context(), h.js, "default", events.SessionID(sid))
	if err != nil {
		return nil, nil, err
	}
	evs, err := decodeEvents(log.Events)
	if err != nil {
		return nil, nil, err
	}
	var turnID string
	for _, e := range evs {
		if e.req != nil && e.req.RequestID == requestID {
			turnID = e.turnID
		}
	}
	for _, turn := range log.Turns {
		if turn.ID == turnID {
			if turn.Finish == nil {
				return nil, nil, fmt.Errorf("turn %s of %s is not finished", turnID, requestID)
			}
			if f := finishes(turn); f != 1 {
				return nil, nil, fmt.Errorf("turn %s finished %d times", turnID, f)
			}
			return turn, permissionResponses(evs, requestID), nil
		}
	}
	return nil, nil, fmt.Errorf("no turn asked %s", requestID)
}

// Two requests pending at once in one turn: both are shown, the session is
// waiting on both, and they resolve independently, in any order.
func TestAskTwoPermissionsPendingTogether(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "s1", "", "permissions call_1,call_2 allow_once=yes,reject_once=no\nsay end")
	var st sessionState
	if err := testutil.Poll(ctx, "two pending requests", func() (bool, error) {
		st = projectedState(t, h, "s1")
		return len(st.Requests) == 2, nil
	}); err != nil {
		t.Fatal(err)
	}
	if st.Status != "waiting" || st.Requests[0].RequestID == st.Requests[1].RequestID {
		t.Fatalf("state = %+v, want waiting on two distinct requests", st)
	}
	// Answer the second first.
	if res, err := h.respondPermission(ctx, "s1", st.Requests[1].RequestID, "no"); err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("respond to the second = %+v, %v", res, err)
	}
	if after := projectedState(t, h, "s1"); after.Status != "waiting" || len(after.Requests) != 1 || after.Requests[0].RequestID != st.Requests[0].RequestID {
		t.Errorf("after one answer, state = %+v, want waiting on the first", after)
	}
	if res, err := h.respondPermission(ctx, "s1", st.Requests[0].RequestID, "yes"); err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("respond to the first = %+v, %v", res, err)
	}
	pr := <-done
	if pr.err != nil || pr.res.StopReason != "end_turn" {
		t.Fatalf("prompt = %+v, %v", pr.res, pr.err)
	}
	log, evs := h.readLog(t, "s1")
	if got := agentText(evs, log.Turns[0].ID); got != "permission: selected yes\npermission: selected no\nend" {
		t.Errorf("agent output %q, want the first answered yes and the second no", got)
	}
	for _, r := range st.Requests {
		if n := len(permissionResponses(evs, r.RequestID)); n != 1 {
			t.Errorf("%s has %d permission responses, want 1", r.RequestID, n)
		}
	}
	if st := projectedState(t, h, "s1"); st.Status != "idle" {
		t.Errorf("after the turn, state = %+v, want idle", st)
	}
}
