package session_test

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"skein.dev/pkg/events/eventlog"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// Requests an agent raises after its turn has ended, as claude-agent-acp's
// background tasks do: each gets the session's policy, as one raised in a
// turn does.

// lateScript ends its turn, then asks for permission outside it and
// reports the answer; the tool step after the report makes the report's
// message durable.
const lateScript = "say in turn\nlater\npermission late_1 allow_once=yes,reject_once=no\ntoolstep late_1 completed"

// lateText waits until the agent's text outside any turn contains want,
// and returns it.
func (h *rig) lateText(t *testing.T, sid, want string) string {
	t.Helper()
	var text string
	if err := testutil.Poll(t.Context(), "the agent's text after its turn to contain "+want, func() (bool, error) {
		_, evs := h.readLog(t, sid)
		text = agentText(evs, "")
		return strings.Contains(text, want), nil
	}); err != nil {
		t.Fatalf("%v; it is %q", err, text)
	}
	return text
}

// waitLatePermission waits for sid's permission request and returns it.
func (h *rig) waitLatePermission(ctx context.Context, t *testing.T, sid string) (*eventlog.Record, *events.AcpDurablePermissionRequest) {
	t.Helper()
	rec, req, err := h.waitPermissionRequest(ctx, sid, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rec, req
}

// waitState waits until sid's state, as getSession reads it, is ok.
func waitState(t *testing.T, h *rig, sid string, ok func(sessionState) bool) {
	t.Helper()
	if err := testutil.Poll(t.Context(), "the state of "+sid, func() (bool, error) {
		return ok(projectedState(t, h, sid)), nil
	}); err != nil {
		t.Fatalf("%v; it is %+v", err, projectedState(t, h, sid))
	}
}

// permissionEvents returns sid's permission requests and responses.
func permissionEvents(t *testing.T, h *rig, sid string) []decoded {
	t.Helper()
	_, evs := h.readLog(t, sid)
	var out []decoded
	for _, e := range evs {
		if e.req != nil || e.resp != nil {
			out = append(out, e)
		}
	}
	return out
}

// lateResponses returns the permission responses to requestID in sid's log.
func lateResponses(t *testing.T, h *rig, sid, requestID string) []*events.AcpDurablePermissionResponse {
	t.Helper()
	_, evs := h.readLog(t, sid)
	var out []*events.AcpDurablePermissionResponse
	for _, e := range permissionResponses(evs, requestID) {
		out = append(out, e.resp)
	}
	return out
}

// An automatic policy answers a late request as it answers one in a turn,
// and nothing is stored or shown of it.
func TestLatePermissionAutomatic(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   string
	}{
		{events.PolicyAllowAll, "permission: selected yes"},
		{events.PolicyRejectAll, "permission: selected no"},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			h := startRig(t, session.Config{})
			ctx := t.Context()
			if err := h.open(t, "late", events.AcpOpenSessionRequest{PermissionPolicy: new(tc.policy)}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.prompt(ctx, "late", "", lateScript); err != nil {
				t.Fatal(err)
			}
			h.lateText(t, "late", tc.want)
			if reqs := permissionEvents(t, h, "late"); len(reqs) != 0 {
				t.Errorf("permission events %+v, want none under %s", reqs, tc.policy)
			}
			if st := projectedState(t, h, "late"); st.Status != "idle" || len(st.Requests) != 0 {
				t.Errorf("state = %+v, want idle", st)
			}
		})
	}
}

// Policy ask: the late request is durable with no turn, the session shows
// waiting with it, any viewer answers it, first writer wins, and the
// session takes prompts meanwhile.
func TestLatePermissionAsk(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "late", events.AcpOpenSessionRequest{PermissionPolicy: new(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "late", "", lateScript); err != nil {
		t.Fatal(err)
	}
	rec, req := h.waitLatePermission(ctx, t, "late")
	if id := rec.Header.Get(events.HeaderTurnID); id != "" {
		t.Errorf("the late request is recorded in turn %s, want none", id)
	}
	waitState(t, h, "late", func(st sessionState) bool {
		return st.Status == "waiting" && st.TurnID == "" && len(st.Requests) == 1 && st.Requests[0].RequestID == req.RequestID
	})

	// A turn runs while the request waits, and the request still waits
	// after it.
	if res, err := h.prompt(ctx, "late", "", "say meanwhile"); err != nil || !strings.Contains(string(res.Message), "meanwhile") {
		t.Fatalf("prompt meanwhile = %+v, %v", res, err)
	}
	waitState(t, h, "late", func(st sessionState) bool {
		return st.Status == "waiting" && len(st.Requests) == 1 && st.Requests[0].RequestID == req.RequestID
	})

	if _, err := h.respondPermission(ctx, "late", req.RequestID, "nope"); code(err) != events.CodeInvalidPermissionOption {
		t.Errorf("answer with an option not offered = %v, want %s", err, events.CodeInvalidPermissionOption)
	}
	res, err := h.respondPermission(ctx, "late", req.RequestID, "yes")
	if err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("answer = %+v, %v, want accepted", res, err)
	}
	res, err = h.respondPermission(ctx, "late", req.RequestID, "no")
	if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonAlreadyResolved {
		t.Errorf("second answer = %+v, %v, want not_pending/already_resolved", res, err)
	}
	h.lateText(t, "late", "permission: selected yes")
	waitState(t, h, "late", func(st sessionState) bool { return st.Status == "idle" && len(st.Requests) == 0 })
	resps := lateResponses(t, h, "late", req.RequestID)
	if len(resps) != 1 || resps[0].Status != events.PermissionAccepted {
		t.Errorf("responses %+v, want one accepted", resps)
	}
}

// A late request nobody answered ends, recorded, when the session unloads
// and when its adapter exits; the agent hears cancelled.
func TestLatePermissionEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		end    func(t *testing.T, h *rig, sid string)
		reason string
	}{
		{"unload", func(t *testing.T, h *rig, sid string) { h.unload(t, sid) }, events.ReasonSessionUnloaded},
		{"exit", func(t *testing.T, h *rig, sid string) {
			attached, err := h.lastAttached(t.Context(), sid)
			if err != nil || attached.Pid == nil {
				t.Fatalf("attached %+v, %v", attached, err)
			}
			if err := syscall.Kill(int(*attached.Pid), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}, events.ReasonAdapterExited},
		{"delete", func(t *testing.T, h *rig, sid string) { h.deleteSession(t, sid) }, events.ReasonSessionDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startRig(t, session.Config{})
			ctx := t.Context()
			if err := h.open(t, "late", events.AcpOpenSessionRequest{PermissionPolicy: new(events.PolicyAsk)}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.prompt(ctx, "late", "", lateScript); err != nil {
				t.Fatal(err)
			}
			_, req := h.waitLatePermission(ctx, t, "late")
			tc.end(t, h, "late")
			if tc.reason == events.ReasonSessionDeleted {
				// The log is gone with the session: the answer says why.
				res, err := h.respondPermission(ctx, "late", req.RequestID, "yes")
				if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != tc.reason {
					t.Errorf("answer after the deletion = %+v, %v, want not_pending/%s", res, err, tc.reason)
				}
				return
			}
			if err := testutil.Poll(ctx, "the late request to end", func() (bool, error) {
				return len(lateResponses(t, h, "late", req.RequestID)) > 0, nil
			}); err != nil {
				t.Fatal(err)
			}
			resps := lateResponses(t, h, "late", req.RequestID)
			if len(resps) != 1 || resps[0].Status != events.PermissionTerminal || resps[0].Reason == nil || *resps[0].Reason != tc.reason {
				t.Errorf("responses %+v, want one terminal, %s", resps, tc.reason)
			}
			res, err := h.respondPermission(ctx, "late", req.RequestID, "yes")
			if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != tc.reason {
				t.Errorf("answer after the end = %+v, %v, want not_pending/%s", res, err, tc.reason)
			}
			waitState(t, h, "late", func(st sessionState) bool { return st.Status != "waiting" && len(st.Requests) == 0 })
		})
	}
}

// Input requests after the turn: the same rules under the input policy.
func TestLateInput(t *testing.T) {
	const script = "say in turn\nlater\nelicit \"Name?\" " + `{"type":"object","properties":{"name":{"type":"string"}}}` + "\ntoolstep late_1 completed"
	t.Run("decline", func(t *testing.T) {
		h := startRig(t, session.Config{})
		if err := h.open(t, "late", events.AcpOpenSessionRequest{InputPolicy: new(events.InputPolicyDecline)}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.prompt(t.Context(), "late", "", script); err != nil {
			t.Fatal(err)
		}
		h.lateText(t, "late", "input: decline")
	})
	t.Run("ask", func(t *testing.T) {
		h := startRig(t, session.Config{})
		ctx := t.Context()
		if err := h.open(t, "late", events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.prompt(ctx, "late", "", script); err != nil {
			t.Fatal(err)
		}
		rec, req, err := h.waitInputRequest(ctx, "late", 0)
		if err != nil {
			t.Fatal(err)
		}
		if id := rec.Header.Get(events.HeaderTurnID); id != "" {
			t.Errorf("the late request is recorded in turn %s, want none", id)
		}
		waitState(t, h, "late", func(st sessionState) bool {
			return st.Status == "waiting" && len(st.Inputs) == 1 && st.Inputs[0].RequestID == req.RequestID
		})
		res, err := h.respondInput(ctx, "late", req.RequestID, "accept", `{"name":"skein"}`)
		if err != nil || res.Status != events.PermissionAccepted {
			t.Fatalf("answer = %+v, %v, want accepted", res, err)
		}
		h.lateText(t, "late", `input: accept {"name":"skein"}`)
		waitState(t, h, "late", func(st sessionState) bool { return st.Status == "idle" && len(st.Inputs) == 0 })
	})
}

// A late request an earlier owner of the session left waiting ends when
// the next owner loads the session: it hosts no adapter the request could
// be answered through. The earlier adapter hears cancelled.
func TestLatePermissionNewOwner(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "late", events.AcpOpenSessionRequest{PermissionPolicy: new(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "late", "", lateScript); err != nil {
		t.Fatal(err)
	}
	_, req := h.waitLatePermission(ctx, t, "late")
	waitState(t, h, "late", func(st sessionState) bool { return st.Status == "waiting" })
	h.stopSvc()
	h.startSession()
	res, err := h.respondPermission(ctx, "late", req.RequestID, "yes")
	if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonSessionUnloaded {
		t.Errorf("answer to the new owner = %+v, %v, want not_pending/%s", res, err, events.ReasonSessionUnloaded)
	}
	resps := lateResponses(t, h, "late", req.RequestID)
	if len(resps) != 1 || resps[0].Status != events.PermissionTerminal {
		t.Errorf("responses %+v, want one terminal", resps)
	}
	waitState(t, h, "late", func(st sessionState) bool { return st.Status == "idle" && len(st.Requests) == 0 })
	// The session works on, with a new adapter.
	if res, err := h.prompt(ctx, "late", "", "say after"); err != nil || !strings.Contains(string(res.Message), "after") {
		t.Fatalf("prompt after = %+v, %v", res, err)
	}
}

// A late request waits on across a takeover of a turn opened after it:
// the new owner hosts the same adapter, and answers it through it.
func TestLatePermissionTakeover(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "late", events.AcpOpenSessionRequest{PermissionPolicy: new(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "late", "", lateScript); err != nil {
		t.Fatal(err)
	}
	_, req := h.waitLatePermission(ctx, t, "late")
	waitState(t, h, "late", func(st sessionState) bool { return st.Status == "waiting" })
	turn := h.promptAsync(ctx, "late", "", "pause late-tk\nsay turn done")
	if err := testagent.WaitPaused(ctx, h.control, "late-tk"); err != nil {
		t.Fatal(err)
	}
	h.stopSvc()
	h.startSession() // adopts the session and takes the turn over
	waitState(t, h, "late", func(st sessionState) bool {
		return st.Status == "waiting" && st.TurnID != "" && len(st.Requests) == 1 && st.Requests[0].RequestID == req.RequestID
	})
	res, err := h.respondPermission(ctx, "late", req.RequestID, "yes")
	if err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("answer to the new owner = %+v, %v, want accepted", res, err)
	}
	if err := testagent.Release(ctx, h.control, "late-tk"); err != nil {
		t.Fatal(err)
	}
	if r := <-turn; r.err != nil || !strings.Contains(string(r.res.Message), "turn done") {
		t.Fatalf("the turn taken over = %+v, %v", r.res, r.err)
	}
	// The agent reports the answer in the turn, or after it.
	var text string
	if err := testutil.Poll(ctx, "the answer reported", func() (bool, error) {
		_, evs := h.readLog(t, "late")
		var all strings.Builder
		for _, e := range evs {
			if e.upd != nil && e.upd.SessionUpdate == "agent_message_chunk" {
				all.WriteString(e.upd.Content.Text)
			}
		}
		text = all.String()
		return strings.Contains(text, "permission: selected yes"), nil
	}); err != nil {
		t.Fatalf("%v; the agent's text is %q", err, text)
	}
	waitState(t, h, "late", func(st sessionState) bool { return st.Status == "idle" && len(st.Requests) == 0 })
}

// A late input request nobody answered ends, recorded, when the session
// unloads, as a permission request does.
func TestLateInputEnds(t *testing.T) {
	const script = "say in turn\nlater\nelicit \"Name?\" " + `{"type":"object","properties":{"name":{"type":"string"}}}`
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "late", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "late", "", script); err != nil {
		t.Fatal(err)
	}
	_, req, err := h.waitInputRequest(ctx, "late", 0)
	if err != nil {
		t.Fatal(err)
	}
	h.unload(t, "late")
	_, resps := inputEvents(t, h, "late")
	got := responsesTo(resps, req.RequestID)
	if len(got) != 1 || got[0].Status != events.PermissionTerminal || got[0].Reason == nil || *got[0].Reason != events.ReasonSessionUnloaded {
		t.Errorf("input responses %+v, want one terminal, %s", got, events.ReasonSessionUnloaded)
	}
	res, err := h.respondInput(ctx, "late", req.RequestID, "decline", "")
	if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason != events.ReasonSessionUnloaded {
		t.Errorf("answer after the unload = %+v, %v, want not_pending/%s", res, err, events.ReasonSessionUnloaded)
	}
	waitState(t, h, "late", func(st sessionState) bool { return st.Status == "idle" && len(st.Inputs) == 0 })
}
