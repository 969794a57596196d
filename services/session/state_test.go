package session_test

import (
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
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

// The session service owns the prompt limits (the gateway only bounds the
// HTTP body): a prompt past them is payload_too_large, and nothing of it
// is accepted.
func TestPromptLimits(t *testing.T) {
	h := startRig(t, session.Config{MaxPromptBlocks: 2, MaxPromptBytes: 200})
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	sid := "s1"
	for name, content := range map[string]string{
		"too many blocks": `[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"}]`,
		"too many bytes":  `[{"type":"text","text":"` + strings.Repeat("x", 200) + `"}]`,
	} {
		req := &events.AcpPromptRequest{SessionID: &sid, Content: events.JSON(content)}
		if _, err := rpc.Call[events.PromptAccepted](t.Context(), h.nc, events.APISubject("default", events.OpPrompt), req, nil); code(err) != events.CodePayloadTooLarge {
			t.Errorf("%s: prompt = %v, want %s", name, err, events.CodePayloadTooLarge)
		}
	}
	if n, err := h.lastSeq(t.Context(), sid); err != nil || n == 0 {
		t.Fatalf("log of s1: %d, %v", n, err)
	}
	log, _ := h.readLog(t, sid)
	if len(log.Turns) != 0 {
		t.Errorf("%d turns accepted past the limits, want 0", len(log.Turns))
	}
}
