package test

import (
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// TestGoClientRespondInput: pkg/client answers an agent's input request,
// which the session's state lists while it waits.
func TestGoClientRespondInput(t *testing.T) {
	cl := goClientOn(t, t.TempDir())
	ctx := t.Context()
	if err := cl.Open(ctx, "i1", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	asked := make(chan error, 1)
	var reply string
	go func() {
		res, err := cl.PromptText(ctx, "i1", `elicit {"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
		if err == nil {
			reply = string(res.Message)
		}
		asked <- err
	}()
	var requestID string
	if err := pollFor(ctx, "the input request", func() bool {
		s, err := cl.Session(ctx, "i1")
		if err != nil {
			return false
		}
		st, err := events.ParseSessionState(s.State)
		if err != nil || st.Status != events.StatusWaiting || len(st.Inputs) == 0 {
			return false
		}
		requestID = st.Inputs[0].RequestID
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RespondInput(ctx, "i1", requestID, events.InputAccept, events.JSON(`{"n":"x"}`)); events.AsError(err).Code != events.CodeInvalidRequest {
		t.Errorf("respond with a string for an integer = %v, want %s", err, events.CodeInvalidRequest)
	}
	if r, err := cl.RespondInput(ctx, "i1", requestID, events.InputAccept, events.JSON(`{"n":7}`)); err != nil || r.Status != events.PermissionAccepted {
		t.Fatalf("respond = %+v, %v", r, err)
	}
	if err := <-asked; err != nil || !strings.Contains(reply, `input: accept {\"n\":7}`) {
		t.Fatalf("the prompt that asked: %s, %v", reply, err)
	}
	if r, err := cl.RespondInput(ctx, "i1", requestID, events.InputDecline, nil); err != nil || r.Status != events.PermissionNotPending {
		t.Errorf("a late answer = %+v, %v", r, err)
	}
}
