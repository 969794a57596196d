package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// The turn rules under forced races. Each race parks the test agent at a
// point the test controls (a pause, or a permission request), then lets the
// contenders go at once, many times over; the log must name exactly one
// winner each time, and every answer must agree with it.

// promptResult is what a prompt call returned.
type promptResult struct {
	res *events.AcpPromptResponse
	err error
}

func (h *harness) promptAsync(ctx context.Context, sid, key, script string) <-chan promptResult {
	ch := make(chan promptResult, 1)
	go func() {
		res, err := h.prompt(ctx, sid, key, script)
		ch <- promptResult{res, err}
	}()
	return ch
}

// cancelRace is one iteration of TestCancelRacesCompletion.
type cancelRace struct {
	mode   int
	cancel *events.AcpCancelPromptResponse
	prompt promptResult
}

// cancelPrompt against the turn's completion: first writer wins. The agent
// is parked at a pause right before its last words; the test releases it
// and cancels at once (in three launch orders), and the log's TurnFinished
// decides who won. Every answer must agree with the log.
func TestCancelRacesCompletion(t *testing.T) {
	h := startRig(t, session.Config{})
	sids := []string{"c0", "c1", "c2", "c3"}
	for _, sid := range sids {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	n := iterations(240)
	races := make([]cancelRace, n)
	ctx := t.Context()
	parallelLoops(t, sids, n, func(sid string, i int) error {
		name := fmt.Sprintf("%s_%d", sid, i)
		done := h.promptAsync(ctx, sid, "", "pause "+name+"\nsay done")
		if err := testagent.WaitPaused(ctx, h.control, name); err != nil {
			return err
		}
		release := func() error { return os.WriteFile(testagent.ReleaseFile(h.control, name), nil, 0o644) }
		var cancelErr, releaseErr error
		r := &races[i]
		r.mode = i % 3
		switch r.mode {
		case 0: // cancel first, release at once
			var wg sync.WaitGroup
			wg.Go(func() { r.cancel, cancelErr = h.cancelPrompt(ctx, sid) })
			wg.Go(func() { releaseErr = release() })
			wg.Wait()
		case 1: // release first, cancel at once
			var wg sync.WaitGroup
			wg.Go(func() { releaseErr = release() })
			wg.Go(func() { r.cancel, cancelErr = h.cancelPrompt(ctx, sid) })
			wg.Wait()
		case 2: // the agent has left the pause: its answer is on the way
			if releaseErr = release(); releaseErr == nil {
				releaseErr = testutil.Poll(ctx, "the agent to leave "+name, func() (bool, error) {
					_, err := os.Stat(testagent.PausedFile(h.control, name))
					return errors.Is(err, os.ErrNotExist), nil
				})
			}
			r.cancel, cancelErr = h.cancelPrompt(ctx, sid)
		}
		if err := errors.Join(cancelErr, releaseErr); err != nil {
			return err
		}
		r.prompt = <-done
		return nil
	})
	if t.Failed() {
		return
	}

	counts := map[string]int{}
	for k, sid := range sids {
		log, evs := h.readLog(t, sid)
		var mine []int
		for i := k; i < n; i += len(sids) {
			mine = append(mine, i)
		}
		if len(log.Turns) != len(mine) {
			t.Fatalf("%s: %d accepted turns, want %d", sid, len(log.Turns), len(mine))
		}
		for j, i := range mine {
			r, turn := races[i], log.Turns[j]
			if f := finishes(turn); f != 1 || turn.Finish == nil {
				t.Errorf("%s #%d: %d TurnFinished records, want 1", sid, i, f)
				continue
			}
			outcome := turn.Finish.Outcome
			counts[fmt.Sprintf("mode %d %s/%s", r.mode, outcome, r.cancel.Status)]++
			text := agentText(evs, turn.ID)
			switch outcome {
			case events.OutcomeCancelled:
				if r.cancel.Status != events.CancelCancelled {
					t.Errorf("%s #%d: the log says cancelled, cancel answered %q", sid, i, r.cancel.Status)
				}
				if r.prompt.err != nil || r.prompt.res.StopReason != "cancelled" {
					t.Errorf("%s #%d: the log says cancelled, prompt = %+v, %v", sid, i, r.prompt.res, r.prompt.err)
				}
				if text != "" {
					t.Errorf("%s #%d: a cancelled turn has durable agent output %q", sid, i, text)
				}
			case events.OutcomeCompleted:
				if s := r.cancel.Status; s != events.OutcomeCompleted && s != events.CancelNoActivePrompt {
					t.Errorf("%s #%d: the log says completed, cancel answered %q", sid, i, s)
				}
				if r.prompt.err != nil || r.prompt.res.StopReason != "end_turn" || !strings.Contains(string(r.prompt.res.Message), "done") {
					t.Errorf("%s #%d: the log says completed, prompt = %+v, %v", sid, i, r.prompt.res, r.prompt.err)
				} else if string(r.prompt.res.Message) != string(turn.Finish.Message) {
					t.Errorf("%s #%d: prompt message %s, the log's %s", sid, i, r.prompt.res.Message, turn.Finish.Message)
				}
				if text != "done" {
					t.Errorf("%s #%d: a completed turn's durable output is %q, want %q", sid, i, text, "done")
				}
			default:
				t.Errorf("%s #%d: outcome %q (%+v), want completed or cancelled", sid, i, outcome, turn.Finish.Error)
			}
		}
	}
	t.Logf("%d races (outcome/cancel status by launch order): %v", n, counts)
}

// A cancelled turn's buffered chunks never become durable, though they were
// shown live; the user message stays; the adapter is sent session/cancel
// (it answers its prompt "cancelled"). A cancel with no turn is
// no_active_prompt and is not remembered.
func TestCancelDropsBufferedChunks(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if res, err := h.cancelPrompt(ctx, "s1"); err != nil || res.Status != events.CancelNoActivePrompt {
		t.Fatalf("cancel before any turn = %+v, %v, want %s", res, err, events.CancelNoActivePrompt)
	}
	// The idle cancel is not remembered: the next prompt runs to its end.
	if res, err := h.prompt(ctx, "s1", "", "say first"); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("prompt after an idle cancel = %+v, %v", res, err)
	}

	live, err := h.nc.SubscribeSync(events.LiveSubject("default", "s1"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Unsubscribe()
	done := h.promptAsync(ctx, "s1", "", "chunks 5\npause p\nsay more")
	if err := testagent.WaitPaused(ctx, h.control, "p"); err != nil {
		t.Fatal(err)
	}
	// The five chunks are buffered once the owner has published them live
	// (the ones the runner read at once in one message).
	for n := 0; n < 5; {
		m, err := live.NextMsg(testutil.PollTimeout)
		if err != nil {
			t.Fatalf("live delta: %v", err)
		}
		v, err := events.Unmarshal(m.Data)
		if err != nil {
			t.Fatalf("live message: %v", err)
		}
		for _, d := range events.Deltas(v) {
			if !strings.Contains(string(d.Update), "chunk") {
				t.Fatalf("live delta %q, want a chunk", d.Update)
			}
			n++
		}
	}
	res, err := h.cancelPrompt(ctx, "s1")
	if err != nil || res.Status != events.CancelCancelled {
		t.Fatalf("cancel = %+v, %v, want %s", res, err, events.CancelCancelled)
	}
	pr := <-done
	if pr.err != nil || pr.res.StopReason != "cancelled" {
		t.Fatalf("cancelled prompt = %+v, %v, want stopReason cancelled", pr.res, pr.err)
	}
	// The agent heard session/cancel: it leaves the pause unreleased and
	// answers its prompt "cancelled".
	if err := testutil.Poll(ctx, "the agent's cancelled answer", func() (bool, error) {
		recs, err := eventlog.Forward(ctx, h.js, events.StreamIO, events.IOSubject("default", "s1"), 0, 1000)
		if err != nil {
			return false, err
		}
		for _, r := range recs {
			if r.Header.Get(events.HeaderRecord) != events.RecordAdapterPromptResult {
				continue
			}
			if res, err := events.Decode[events.AdapterPromptResult](r.Data); err == nil && res.StopReason == "cancelled" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(testagent.PausedFile(h.control, "p")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the agent is still paused after the cancel (stat: %v)", err)
	}

	// A cancel with no turn, after a cancelled one, is not remembered either.
	if res, err := h.cancelPrompt(ctx, "s1"); err != nil || res.Status != events.CancelNoActivePrompt {
		t.Errorf("idle cancel = %+v, %v, want %s", res, err, events.CancelNoActivePrompt)
	}
	if res, err := h.prompt(ctx, "s1", "", "say after"); err != nil || res.StopReason != "end_turn" || !strings.Contains(string(res.Message), "after") {
		t.Fatalf("prompt after the cancelled turn = %+v, %v", res, err)
	}

	log, evs := h.readLog(t, "s1")
	if got := log.Outcomes(); !slices.Equal(got, []string{"completed", "cancelled", "completed"}) {
		t.Fatalf("outcomes = %v, want completed, cancelled, completed", got)
	}
	cancelled := log.Turns[1]
	var user bool
	for _, e := range evs {
		if e.turnID != cancelled.ID || e.upd == nil {
			continue
		}
		switch e.upd.SessionUpdate {
		case "user_message_chunk":
			user = strings.Contains(e.upd.Content.Text, "chunks 5")
		case "agent_message_chunk":
			t.Errorf("the cancelled turn's chunk is durable: %+v", e.upd)
		}
	}
	if !user {
		t.Errorf("the cancelled turn's user message is not in the log")
	}
	if cancelled.Finish.StopReason != "cancelled" {
		t.Errorf("cancelled turn's stopReason = %q", cancelled.Finish.StopReason)
	}
}

// An adapter that ignores session/cancel: the turn ends cancelled at once,
// the adapter is evicted after CancelGrace (SessionUnloaded cancel_ignored),
// and the next prompt attaches a new adapter.
func TestCancelIgnoredEvictsAdapter(t *testing.T) {
	const grace = 300 * time.Millisecond
	h := startRig(t, session.Config{CancelGrace: grace})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{Agent: "stubborn"}); err != nil {
		t.Fatal(err)
	}
	first, err := h.lastAttached(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "s1", "", "pause stub\nsay never")
	if err := testagent.WaitPaused(ctx, h.control, "stub"); err != nil {
		t.Fatal(err)
	}
	res, err := h.cancelPrompt(ctx, "s1")
	if err != nil || res.Status != events.CancelCancelled {
		t.Fatalf("cancel = %+v, %v, want %s", res, err, events.CancelCancelled)
	}
	pr := <-done
	if pr.err != nil || pr.res.StopReason != "cancelled" {
		t.Fatalf("cancelled prompt = %+v, %v", pr.res, pr.err)
	}
	// Ended at once, not after the grace: the log orders the turn's
	// TurnFinished before the SessionUnloaded of the eviction (checked
	// below), which holds however slow the machine is.
	if _, err := os.Stat(testagent.PausedFile(h.control, "stub")); err != nil {
		t.Fatalf("the stubborn agent heard the cancel: %v", err)
	}

	// The next prompt waits out the grace, then runs on a new adapter.
	res2, err := h.prompt(ctx, "s1", "", "say again")
	if err != nil || !strings.Contains(string(res2.Message), "again") {
		t.Fatalf("prompt after eviction = %+v, %v", res2, err)
	}
	recs, err := h.ctl(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var unloaded *events.SessionUnloaded
	for _, r := range recs {
		names = append(names, r.VariantName())
		if u, ok := r.(*events.SessionUnloaded); ok {
			unloaded = u
		}
	}
	want := "SessionOpened,AdapterAttached,TurnFinished,SessionUnloaded,AdapterAttached,TurnFinished"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("control records = %s, want %s", got, want)
	}
	if unloaded == nil || unloaded.Reason != "cancel_ignored" {
		t.Errorf("SessionUnloaded = %+v, want reason cancel_ignored", unloaded)
	}
	second, err := h.lastAttached(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if second.ProcessID == first.ProcessID {
		t.Errorf("the next prompt ran on the evicted adapter %s", first.ProcessID)
	}
	// The evicted process is gone.
	if err := testutil.Poll(ctx, "the evicted adapter to exit", func() (bool, error) {
		return syscall.Kill(int(*first.Pid), 0) != nil, nil
	}); err != nil {
		t.Error(err)
	}
	log, _ := h.readLog(t, "s1")
	if got := log.Outcomes(); !slices.Equal(got, []string{"cancelled", "completed"}) {
		t.Errorf("outcomes = %v, want cancelled, completed", got)
	}
}

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
	if got := agentText(evs, turn.ID); got != "permission: selected yesafter" {
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
	if got := agentText(evs, log.Turns[0].ID); got != "permission: selected r1permission: selected a2end" {
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
	recs, err := eventlog.Forward(t.Context(), h.js, events.StreamIO, events.IOSubject("default", events.SessionID(sid)), 0, 10000)
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
	resp, err := events.Call[events.AcpGetDurableSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSession),
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
// spread over four ask sessions. For each, it starts a prompt running
// permissionScript, waits for the durable request, and calls contend with
// it; then it waits for the prompt's answer and hands everything to check.
func permRace(t *testing.T, h *rig, n int,
	contend func(sid string, i int, req *events.AcpDurablePermissionRequest) (any, error),
	check func(sid string, i int, req *events.AcpDurablePermissionRequest, got any, pr promptResult) error,
) {
	t.Helper()
	sids := []string{"p0", "p1", "p2", "p3"}
	for _, sid := range sids {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := t.Context()
	parallelLoops(t, sids, n, func(sid string, i int) error {
		after, err := h.lastSeq(ctx, sid)
		if err != nil {
			return err
		}
		done := h.promptAsync(ctx, sid, "", permissionScript)
		_, req, err := h.waitPermissionRequest(ctx, sid, after)
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

// respondPermission against cancelPrompt: one winner, recorded once; the
// loser's answer names it.
func TestRespondRacesCancel(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	type answers struct {
		respond *events.AcpRespondPermissionResponse
		cancel  *events.AcpCancelPromptResponse
	}
	var respondWon, cancelWon atomic.Int64
	permRace(t, h, iterations(200),
		func(sid string, i int, req *events.AcpDurablePermissionRequest) (any, error) {
			var a answers
			var rerr, cerr error
			race(i,
				func() { a.respond, rerr = h.respondPermission(ctx, sid, req.RequestID, "yes") },
				func() { a.cancel, cerr = h.cancelPrompt(ctx, sid) })
			return a, errors.Join(rerr, cerr)
		},
		func(sid string, i int, req *events.AcpDurablePermissionRequest, got any, pr promptResult) error {
			a := got.(answers)
			turn, resps, err := turnOfRequest(t, h, sid, req.RequestID)
			if err != nil {
				return err
			}
			if len(resps) != 1 {
				return fmt.Errorf("%d permission responses for %s, want 1", len(resps), req.RequestID)
			}
			resp := resps[0].resp
			switch a.respond.Status {
			case events.PermissionAccepted:
				respondWon.Add(1)
				if resp.Status != events.PermissionAccepted {
					return fmt.Errorf("respond accepted, the log says %s", resp.Status)
				}
				// The cancel came second: it cancelled the rest of the turn,
				// or found it over.
				switch {
				case a.cancel.Status == events.CancelCancelled && turn.Finish.Outcome == events.OutcomeCancelled:
				case (a.cancel.Status == events.OutcomeCompleted || a.cancel.Status == events.CancelNoActivePrompt) && turn.Finish.Outcome == events.OutcomeCompleted:
				default:
					return fmt.Errorf("cancel answered %s, the turn ended %s", a.cancel.Status, turn.Finish.Outcome)
				}
			case events.PermissionNotPending:
				cancelWon.Add(1)
				if a.respond.Reason == nil || *a.respond.Reason != events.ReasonPromptCancelled {
					return fmt.Errorf("respond lost with reason %v, want %s", a.respond.Reason, events.ReasonPromptCancelled)
				}
				if resp.Status != events.PermissionTerminal || resp.Reason == nil || *resp.Reason != events.ReasonPromptCancelled {
					return fmt.Errorf("cancel won, the log's response is %+v", resp)
				}
				if a.cancel.Status != events.CancelCancelled || turn.Finish.Outcome != events.OutcomeCancelled {
					return fmt.Errorf("cancel won, it answered %s and the turn ended %s", a.cancel.Status, turn.Finish.Outcome)
				}
			default:
				return fmt.Errorf("respond answered %+v", a.respond)
			}
			if pr.err != nil || pr.res.StopReason != turn.Finish.StopReason {
				return fmt.Errorf("prompt = %+v, %v; the turn ended %s/%s", pr.res, pr.err, turn.Finish.Outcome, turn.Finish.StopReason)
			}
			return nil
		})
	t.Logf("respond won %d, cancel won %d", respondWon.Load(), cancelWon.Load())
	// Each request's wait is timed once, by how it ended, before the
	// winner answers.
	for end, want := range map[string]int64{"answered": respondWon.Load(), "terminal": cancelWon.Load()} {
		if n := testutil.Metric(t, h.reg, "acp_session_permission_wait_seconds", "end", end); n != float64(want) {
			t.Errorf("permission waits ended %s: %v observed, want %d", end, n, want)
		}
	}
}

// respondPermission against respondPermission: one accepted, the other
// not_pending/already_resolved, and the agent acts on the winner's option.
func TestRespondRacesRespond(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	type answers struct {
		yes, no *events.AcpRespondPermissionResponse
	}
	permRace(t, h, iterations(200),
		func(sid string, i int, req *events.AcpDurablePermissionRequest) (any, error) {
			var a answers
			var yerr, nerr error
			var wg sync.WaitGroup
			wg.Go(func() { a.yes, yerr = h.respondPermission(ctx, sid, req.RequestID, "yes") })
			wg.Go(func() { a.no, nerr = h.respondPermission(ctx, sid, req.RequestID, "no") })
			wg.Wait()
			return a, errors.Join(yerr, nerr)
		},
		func(sid string, i int, req *events.AcpDurablePermissionRequest, got any, pr promptResult) error {
			a := got.(answers)
			winner, loser, option := a.yes, a.no, "yes"
			if a.no.Status == events.PermissionAccepted {
				winner, loser, option = a.no, a.yes, "no"
			}
			if winner.Status != events.PermissionAccepted || loser.Status != events.PermissionNotPending ||
				loser.Reason == nil || *loser.Reason != events.ReasonAlreadyResolved {
				return fmt.Errorf("answers %+v and %+v, want one accepted and one not_pending/already_resolved", a.yes, a.no)
			}
			_, resps, err := turnOfRequest(t, h, sid, req.RequestID)
			if err != nil {
				return err
			}
			if len(resps) != 1 || resps[0].resp.Status != events.PermissionAccepted || !strings.Contains(string(resps[0].resp.Response), `"`+option+`"`) {
				return fmt.Errorf("permission responses %+v, want one accepted with %s", resps, option)
			}
			if pr.err != nil || !strings.Contains(string(pr.res.Message), "after") {
				return fmt.Errorf("prompt = %+v, %v", pr.res, pr.err)
			}
			return nil
		})
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
	if got := agentText(evs, log.Turns[0].ID); got != "permission: selected yespermission: selected noend" {
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

// race runs f and g at once and waits for both; iteration i decides which
// starts first, so each side gets its turn at leading.
func race(i int, f, g func()) {
	if i%2 == 1 {
		f, g = g, f
	}
	var wg sync.WaitGroup
	wg.Go(f)
	wg.Go(g)
	wg.Wait()
}
