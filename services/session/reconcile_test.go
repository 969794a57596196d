package session_test

import (
	"encoding/json"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// A turn that the new owner closes at start-up, with no request touching
// the session (adopt and claim), is projected at once: the list, which
// reads ACP_SESSIONS, says failed, as reading the session does, and not
// the running the earlier owner projected when it accepted the turn.
func TestReconciledTurnIsProjected(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	inFlight := h.promptAsync(ctx, "s1", "", "pause owner\nsay never")
	if err := testagent.WaitPaused(ctx, h.control, "owner"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, "the projection to say running", func() (bool, error) {
		return projectedStatus(t, h, "s1") == "running", nil
	}); err != nil {
		t.Fatal(err)
	}
	h.stopSvc() // the turn stays open in the log, and running in the projection
	// The adapter is out of the new owner's reach: it closes the turn
	// (prompt_delivery_uncertain) rather than take it over.
	h.partitionRunner()
	h.startSession()
	// The prompt in flight waits on the log: it returns once the new
	// owner recorded the turn's end, which it did on its own at start.
	if r := <-inFlight; code(r.err) != events.CodePromptDeliveryUncertain {
		t.Fatalf("prompt in flight across the restart = %+v, %v, want %s", r.res, r.err, events.CodePromptDeliveryUncertain)
	}
	// The projection is written just after the record: wait for it, with
	// nothing else touching the session meanwhile.
	var last string
	if err := testutil.Poll(ctx, "the projection to say failed", func() (bool, error) {
		last = projectedStatus(t, h, "s1")
		return last == "failed", nil
	}); err != nil {
		t.Fatalf("%v: the projection says %q", err, last)
	}
	meta := projectedMeta(t, h, "s1")
	var st sessionState
	if err := json.Unmarshal(meta.Info.State, &st); err != nil {
		t.Fatal(err)
	}
	if st.Error == nil || st.Error.Code != string(events.CodePromptDeliveryUncertain) {
		t.Errorf("projected state %s, want the error %s", meta.Info.State, events.CodePromptDeliveryUncertain)
	}
	if got := projectedState(t, h, "s1"); got.Status != "failed" {
		t.Errorf("getSession status = %q, want failed, as the projection says", got.Status)
	}
}

// projectedStatus is the status sid's ACP_SESSIONS entry holds.
func projectedStatus(t testing.TB, h *rig, sid string) string {
	t.Helper()
	var st sessionState
	if err := json.Unmarshal(projectedMeta(t, h, sid).Info.State, &st); err != nil {
		t.Fatal(err)
	}
	return st.Status
}
