package session_test

import (
	"slices"
	"testing"

	"github.com/nats-io/nuid"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/session"
)

// The state machine at work (state.go): the moves a session makes from its
// first open to its delete, in order, each one its table lists (the
// package's tests panic on any other).
func TestSessionMovesThroughItsStates(t *testing.T) {
	h := startRig(t, session.Config{})
	sid := "moves-" + nuid.Next() // MovesOf keeps every run of the test binary
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatalf("open: %v", err)
	}
	if _, err := h.prompt(t.Context(), sid, "", "say hello"); err != nil {
		t.Fatalf("prompt: %v", err)
	}
	// The prompt returns once its TurnFinished is in the log; the unload
	// waits for the session, which the turn's end still holds.
	h.unload(t, sid)
	h.deleteSession(t, sid)
	want := []string{
		"unloaded -load-> absent",
		"absent -open-> detached",
		"detached -attach-> attaching",
		"attaching -attached-> idle",
		"idle -accept-> running",
		"running -finish-> idle",
		"idle -detach-> detached",
		"detached -delete-> absent",
	}
	if got := session.MovesOf("default", events.SessionID(sid)); !slices.Equal(got, want) {
		t.Errorf("moves\n got %q\nwant %q", got, want)
	}
}

// A cancelled turn ends before its adapter does: the session drains the
// adapter's answer, and the next prompt waits for it.
func TestCancelledTurnDrains(t *testing.T) {
	h := startRig(t, session.Config{})
	sid := "drains-" + nuid.Next()
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatalf("open: %v", err)
	}
	slow := h.promptAsync(t.Context(), sid, "", "sleep 60s\nsay too late")
	if err := testutil.Poll(t.Context(), "the turn to run", func() (bool, error) {
		return slices.Contains(session.MovesOf("default", events.SessionID(sid)), "idle -accept-> running"), nil
	}); err != nil {
		t.Fatal(err)
	}
	if res, err := h.cancelPrompt(t.Context(), sid); err != nil || res.Status != events.CancelCancelled {
		t.Fatalf("cancel = %+v, %v; want %s", res, err, events.CancelCancelled)
	}
	<-slow
	if _, err := h.prompt(t.Context(), sid, "", "say again"); err != nil {
		t.Fatalf("prompt after the cancel: %v", err)
	}
	// The prompt returns once its TurnFinished is in the log; the unload
	// waits for the session, which the turn's end still holds.
	h.unload(t, sid)
	want := []string{
		"unloaded -load-> absent",
		"absent -open-> detached",
		"detached -attach-> attaching",
		"attaching -attached-> idle",
		"idle -accept-> running",
		"running -finish-> idle",
		"idle -cancel-> draining",
		"draining -drained-> idle",
		"idle -accept-> running",
		"running -finish-> idle",
		"idle -detach-> detached",
	}
	if got := session.MovesOf("default", events.SessionID(sid)); !slices.Equal(got, want) {
		t.Errorf("moves\n got %q\nwant %q", got, want)
	}
}
