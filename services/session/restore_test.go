package session_test

import (
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// tiers returns the restore tier of every AdapterAttached of sid, in order.
func (h *rig) tiers(t *testing.T, sid string) []string {
	t.Helper()
	ctl, err := h.ctl(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range ctl {
		if a, ok := v.(*events.AdapterAttached); ok {
			out = append(out, a.Tier)
		}
	}
	return out
}

func (h *rig) unload(t *testing.T, sid string) {
	t.Helper()
	if _, err := rpc.Call[events.AcpUnloadSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpUnloadSession),
		&events.AcpUnloadSessionRequest{SessionID: &sid}, nil); err != nil {
		t.Fatalf("unload %s: %v", sid, err)
	}
}

// Each tier of the restore ladder, forced by what the agent can do: a
// session unloaded (or whose adapter crashed) comes back by session/resume,
// else session/load (its replay kept out of the log), else, when the agent
// says the session is unknown, session/new with the continuation preamble
// for the next prompt only.
func TestRestoreTiers(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	for _, tc := range []struct {
		agent string
		tier  string
	}{
		{"resumer", events.TierResume},
		{"loader", events.TierLoad},
		{"forgetful", events.TierFallback},
		{"test", events.TierFallback},     // advertises neither
		{"amnesiac", events.TierFallback}, // its load fails: never unpromptable
	} {
		t.Run(tc.agent, func(t *testing.T) {
			sid := "restore-" + tc.agent
			if err := h.open(t, sid, events.AcpOpenSessionRequest{Agent: tc.agent}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.prompt(ctx, sid, "", "say first answer"); err != nil {
				t.Fatal(err)
			}
			h.unload(t, sid)
			h.unload(t, sid) // idempotent
			restores := testutil.Metric(t, h.reg, "acp_session_restores_total", "tier", tc.tier)
			res, err := h.prompt(ctx, sid, "", "what came before?")
			if err != nil {
				t.Fatal(err)
			}
			// The attach is counted before the prompt is accepted.
			if n := testutil.Metric(t, h.reg, "acp_session_restores_total", "tier", tc.tier); n != restores+1 {
				t.Errorf("restores{tier=%s} went from %v to %v, want one more", tc.tier, restores, n)
			}
			if got := h.tiers(t, sid); strings.Join(got, ",") != events.TierNew+","+tc.tier {
				t.Errorf("tiers = %v, want new then %s", got, tc.tier)
			}
			if tc.agent == "amnesiac" {
				// The reason is recorded: the agent's error, tried twice.
				attached, err := h.lastAttached(ctx, sid)
				if err != nil || !strings.Contains(attached.TierReason, "-32603") {
					t.Errorf("the fallback's reason = %+v, %v; want the agent's -32603", attached, err)
				}
			}
			// The test agent echoes the text it was given: after a fallback
			// it was given the preamble first, with the history in it.
			withPreamble := strings.Contains(string(res.Message), "You are continuing a Skein session") &&
				strings.Contains(string(res.Message), "first answer")
			if withPreamble != (tc.tier == events.TierFallback) {
				t.Errorf("reply after a %s restore = %s; preamble given: %v", tc.tier, res.Message, withPreamble)
			}
			again, err := h.prompt(ctx, sid, "", "and now?")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(again.Message), "You are continuing") {
				t.Errorf("the preamble was given twice: %s", again.Message)
			}
			log, evs := h.readLog(t, sid)
			if len(log.Turns) != 3 {
				t.Errorf("%d turns, want 3", len(log.Turns))
			}
			// The log holds what the users and the agent said, once: a
			// load's replay is not in it, nor the preamble.
			var users, firsts int
			for _, e := range evs {
				if e.upd == nil {
					continue
				}
				switch text := e.upd.Content.Text; e.upd.SessionUpdate {
				case "user_message_chunk":
					users++
					if strings.Contains(text, "You are continuing") {
						t.Errorf("the preamble is in the user's message: %q", text)
					}
				case "agent_message_chunk":
					if text == "first answer" {
						firsts++
					}
				}
			}
			if users != 3 || firsts != 1 {
				t.Errorf("log has %d user messages and %d copies of the first answer, want 3 and 1", users, firsts)
			}
		})
	}
}

// An adapter that crashes mid-turn fails the turn; the next prompt restores
// the session by the ladder.
func TestCrashThenRestore(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "c1", events.AcpOpenSessionRequest{Agent: "resumer"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "c1", "", "say before"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "c1", "", "crash 9"); code(err) != events.CodeAdapterExited {
		t.Fatalf("crashing prompt = %v, want %s", err, events.CodeAdapterExited)
	}
	if _, err := h.prompt(ctx, "c1", "", "say after"); err != nil {
		t.Fatal(err)
	}
	if got := h.tiers(t, "c1"); strings.Join(got, ",") != "new,resume" {
		t.Errorf("tiers = %v, want new,resume", got)
	}
	h.readLog(t, "c1")
}

// Unloading cancels a running turn as cancelPrompt does.
func TestUnloadCancelsTheTurn(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "u1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "u1", "", "pause up\nsay late")
	if err := testagent.WaitPaused(ctx, h.control, "up"); err != nil {
		t.Fatal(err)
	}
	h.unload(t, "u1")
	r := <-done
	if r.err != nil || r.res.StopReason != "cancelled" {
		t.Errorf("prompt during unload = %+v, %v, want stopReason cancelled", r.res, r.err)
	}
	if _, err := rpc.Call[events.AcpUnloadSessionResponse](ctx, h.nc, events.APISubject("default", events.OpUnloadSession),
		&events.AcpUnloadSessionRequest{SessionID: ptr("nope")}, nil); code(err) != events.CodeSessionNotFound {
		t.Errorf("unload of a missing session = %v, want %s", err, events.CodeSessionNotFound)
	}
	log, _ := h.readLog(t, "u1")
	if got := log.Outcomes(); len(got) != 1 || got[0] != events.OutcomeCancelled {
		t.Errorf("outcomes = %v, want cancelled", got)
	}
}
