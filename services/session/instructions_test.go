package session_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/session"
)

// instructions asks sid's agent which instructions it was given (the
// test agent's instructions command) and returns its answer.
func (h *rig) instructions(ctx context.Context, t *testing.T, sid string) string {
	t.Helper()
	res, err := h.prompt(ctx, sid, "", "instructions")
	if err != nil {
		t.Fatal(err)
	}
	var u update
	if err := json.Unmarshal(res.Message, &u); err != nil {
		t.Fatalf("message %s: %v", res.Message, err)
	}
	return u.Content.Text
}

// A session's instruction settings reach its agent when it is opened and
// again on every restore, whichever tier the restore ends on: the runner's
// OS instructions unless the session skips them, then its
// additionalInstructions.
func TestInstructionsReachTheAgent(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	h.osInstructionsFile = filepath.Join(t.TempDir(), "os-instructions.txt")
	if err := os.WriteFile(h.osInstructionsFile, []byte("Work only in the session's directory.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.stopRunner()
	h.startRunner("r2")

	brief := "Answer in one line."
	for _, tier := range []struct{ agent, tier string }{
		{"resumer", events.TierResume},
		{"loader", events.TierLoad},
		{"forgetful", events.TierFallback},
	} {
		for _, st := range []struct {
			name       string
			skip       *bool
			additional *string
			want       string
		}{
			{"os-and-additional", nil, &brief, "instructions: Work only in the session's directory.\n\nAnswer in one line."},
			{"os-only", ptr(false), nil, "instructions: Work only in the session's directory."},
			{"skip-os", ptr(true), &brief, "instructions: Answer in one line."},
		} {
			t.Run(tier.agent+"/"+st.name, func(t *testing.T) {
				sid := tier.agent + "-" + st.name
				if err := h.open(t, sid, events.AcpOpenSessionRequest{Agent: tier.agent, SkipOsInstructions: st.skip, AdditionalInstructions: st.additional}); err != nil {
					t.Fatal(err)
				}
				if got := h.instructions(ctx, t, sid); got != st.want {
					t.Errorf("after open the agent says %q, want %q", got, st.want)
				}
				h.unload(t, sid)
				// The first prompt restores; after a fallback it also
				// carries the continuation preamble, so ask on the next.
				if _, err := h.prompt(ctx, sid, "", "say back"); err != nil {
					t.Fatal(err)
				}
				if got := h.tiers(t, sid); strings.Join(got, ",") != events.TierNew+","+tier.tier {
					t.Fatalf("tiers = %v, want new then %s", got, tier.tier)
				}
				if got := h.instructions(ctx, t, sid); got != st.want {
					t.Errorf("after a %s restore the agent says %q, want %q", tier.tier, got, st.want)
				}
				h.readLog(t, sid)
			})
		}
	}
}
