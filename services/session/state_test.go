package session_test

import (
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/session"
)

// Any read after a prompt returns sees the turn finished. The prompt's
// caller returns once the TurnFinished is in the log, and the projection
// is written after it: getSession reads the log's newest record too, so it
// never says running for a turn whose prompt returned. Many turns in a
// row, each read at once, give the race every chance.
func TestStateAfterPromptReturns(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	for i := range iterations(100) {
		script := "say hello"
		want := "idle"
		if i%3 == 2 {
			script, want = "error -32603 oops", "failed" // a turn the agent fails
		}
		if _, err := h.prompt(ctx, "s1", "", script); err != nil && want == "idle" {
			t.Fatalf("prompt %d: %v", i, err)
		}
		if st := projectedState(t, h, "s1"); st.Status != want || st.TurnID != "" {
			t.Fatalf("getSession right after prompt %d returned = %+v, want %s with no turn", i, st, want)
		}
	}
}
