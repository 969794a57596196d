package session_test

import (
	"context"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

func (h *harness) fork(ctx context.Context, src, fork string, at *uint64) (*events.ForkSessionResponse, error) {
	return rpc.Call[events.ForkSessionResponse](ctx, h.nc, events.APISubject("default", events.OpForkSession),
		&events.ForkSessionRequest{SessionID: &src, NewSessionID: fork, AtSequence: at}, nil)
}

// A fork at a sequence is a new session with the source's agent and
// options, whose log starts with SessionOpened and SessionForked naming the
// source and the sequence, and whose first prompt brings the agent the
// source's history up to that sequence, and nothing after it. The source
// is untouched.
func TestFork(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	instr := "be brief"
	if err := h.open(t, "src", events.AcpOpenSessionRequest{AdditionalInstructions: &instr}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "src", "", "say alpha answer"); err != nil {
		t.Fatal(err)
	}
	at, err := h.lastSeq(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "src", "", "say beta answer"); err != nil {
		t.Fatal(err)
	}
	srcBefore, _, err := eventlog.LoadPosition(ctx, h.js, "default", "src")
	if err != nil {
		t.Fatal(err)
	}

	resp, err := h.fork(ctx, "src", "branch", &at)
	if err != nil {
		t.Fatal(err)
	}
	if resp.SessionID != "branch" || resp.SourceSessionID != "src" || resp.AtSequence != at {
		t.Errorf("fork = %+v, want branch of src at %d", resp, at)
	}
	srcAfter, _, err := eventlog.LoadPosition(ctx, h.js, "default", "src")
	if err != nil {
		t.Fatal(err)
	}
	if srcAfter.LastSeq != srcBefore.LastSeq {
		t.Errorf("the fork wrote to its source: last sequence %d, was %d", srcAfter.LastSeq, srcBefore.LastSeq)
	}

	opened, err := eventlog.Last(ctx, h.js, events.StreamLog, events.OpenedSubject("default", "branch"))
	if err != nil || opened == nil {
		t.Fatalf("the fork's SessionOpened: %v, %v", opened, err)
	}
	o, err := events.Decode[events.SessionOpened](opened.Data)
	if err != nil {
		t.Fatal(err)
	}
	srcOpened, err := eventlog.Last(ctx, h.js, events.StreamLog, events.OpenedSubject("default", "src"))
	if err != nil {
		t.Fatal(err)
	}
	if string(opened.Data) != string(srcOpened.Data) || o.AdditionalInstructions == nil || *o.AdditionalInstructions != instr {
		t.Errorf("the fork was opened with %+v, want its source's options", o)
	}
	ctl, err := h.ctl(ctx, "branch")
	if err != nil {
		t.Fatal(err)
	}
	if len(ctl) != 2 {
		t.Fatalf("the fork's lifecycle records before its first prompt = %d, want SessionOpened and SessionForked", len(ctl))
	}
	f, ok := ctl[1].(*events.SessionForked)
	if _, opens := ctl[0].(*events.SessionOpened); !opens || !ok || f.SourceSessionID != "src" || f.AtSequence != at {
		t.Errorf("the fork's first records = %#v, %#v; want SessionOpened, SessionForked{src, %d}", ctl[0], ctl[1], at)
	}
	recs, err := lifecycle(ctx, h.js, "branch")
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Sequence != opened.Sequence || recs[1].Sequence != opened.Sequence+1 {
		t.Errorf("SessionOpened at %d, SessionForked at %d: not one append", recs[0].Sequence, recs[1].Sequence)
	}

	// The test agent echoes what it was given: the preamble holds the
	// source's first answer, not the one after the fork's sequence.
	res, err := h.prompt(ctx, "branch", "", "what came before?")
	if err != nil {
		t.Fatal(err)
	}
	msg := string(res.Message)
	if !strings.Contains(msg, "You are continuing a Skein session") || !strings.Contains(msg, "alpha answer") {
		t.Errorf("the fork's first reply = %s; want the preamble with the source's history", msg)
	}
	if strings.Contains(msg, "beta answer") {
		t.Errorf("the fork's first reply = %s; it holds history after the fork's sequence", msg)
	}
	attached, err := h.lastAttached(ctx, "branch")
	if err != nil {
		t.Fatal(err)
	}
	if attached.Tier != events.TierFallback || !strings.Contains(attached.TierReason, "fork of src") {
		t.Errorf("the fork's attach = tier %q, reason %q; want the fallback, naming the fork", attached.Tier, attached.TierReason)
	}
	again, err := h.prompt(ctx, "branch", "", "and now?")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(again.Message), "You are continuing") {
		t.Errorf("the preamble was given twice: %s", again.Message)
	}
	_, evs := h.readLog(t, "branch")
	for _, e := range evs {
		if e.upd != nil && e.upd.SessionUpdate == "user_message_chunk" && strings.Contains(e.upd.Content.Text, "You are continuing") {
			t.Errorf("the preamble is in the fork's log: %q", e.upd.Content.Text)
		}
	}
	if final, _, _ := eventlog.LoadPosition(ctx, h.js, "default", "src"); final.LastSeq != srcBefore.LastSeq {
		t.Errorf("the fork's prompts wrote to its source")
	}

	// Forking at the newest record, by default, sees both answers.
	if _, err := h.fork(ctx, "src", "branch-newest", nil); err != nil {
		t.Fatal(err)
	}
	res, err = h.prompt(ctx, "branch-newest", "", "what came before?")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Message), "beta answer") {
		t.Errorf("a fork at the newest record replied %s; want the whole history", res.Message)
	}
}

// Forking what cannot be forked is a typed error, and records nothing.
func TestForkRefusals(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	// Opened before the source: their records are before its own.
	if err := h.open(t, "taken", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := h.open(t, "gone", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := h.delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := h.open(t, "src", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "src", "", "say one"); err != nil {
		t.Fatal(err)
	}
	last, err := h.lastSeq(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		src, fork string
		at        *uint64
		want      events.Code
	}{
		{"missing source", "nope", "f1", nil, events.CodeSessionNotFound},
		{"deleted source", "gone", "f2", nil, events.CodeSessionNotFound},
		{"beyond the newest", "src", "f3", new(last + 1000), events.CodeInvalidCursor},
		{"before the source", "src", "f4", new(uint64(1)), events.CodeInvalidCursor},
		{"zero", "src", "f5", new(uint64(0)), events.CodeInvalidRequest},
		{"onto itself", "src", "src", nil, events.CodeInvalidRequest},
		{"onto an existing session", "src", "taken", nil, events.CodeSessionConflict},
		{"bad new ID", "src", "no/slash", nil, events.CodeInvalidSessionID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := h.fork(ctx, tc.src, tc.fork, tc.at); code(err) != tc.want {
				t.Errorf("fork %s → %s at %v = %v, want %s", tc.src, tc.fork, tc.at, err, tc.want)
			}
			if tc.fork == "src" || tc.fork == "taken" {
				return
			}
			if rec, err := eventlog.Last(ctx, h.js, events.StreamLog, events.LogFilter("default", events.SessionID(tc.fork))); err != nil || rec != nil {
				t.Errorf("a refused fork left %v in the log of %s (%v)", rec, tc.fork, err)
			}
		})
	}
	if pos, _, _ := eventlog.LoadPosition(ctx, h.js, "default", "src"); pos.LastSeq != last {
		t.Errorf("refused forks wrote to the source")
	}
}

// A fork's history that was pruned is cursor_expired.
func TestForkPruned(t *testing.T) {
	h := startRig(t, session.Config{MaxEventsPerSession: 4})
	ctx := t.Context()
	if err := h.open(t, "src", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	first, err := h.lastSeq(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"say one", "say two", "say three", "say four"} {
		if _, err := h.prompt(ctx, "src", "", s); err != nil {
			t.Fatal(err)
		}
	}
	oldest, err := eventlog.Forward(ctx, h.js, events.StreamLog, events.LogSubject("default", "src", events.LogEvents), 0, 1)
	if err != nil || len(oldest) == 0 || eventlog.EventNo(oldest[0]) == 1 {
		t.Fatalf("the source's history was not pruned: %v, %v", oldest, err)
	}
	at := first + 1
	if at >= oldest[0].Sequence {
		t.Fatalf("sequence %d is not before the oldest retained %d", at, oldest[0].Sequence)
	}
	if _, err := h.fork(ctx, "src", "late", &at); code(err) != events.CodeCursorExpired {
		t.Errorf("fork at a pruned sequence = %v, want %s", err, events.CodeCursorExpired)
	}
}

// A fork offers, before its agent starts, the commands its source's
// agent had announced by the fork's sequence: the same agent, whose
// commands the fork's first prompt would otherwise have to wait for.
// Not the usage, which is of the source's context.
func TestForkOffersTheSourcesCommands(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "src", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, "src", "commands review=Review the code\nusage 30 40\nsay hi")
	at, err := h.lastSeq(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, "src", "commands later=Announced after the fork\nsay bye")

	if _, err := h.fork(ctx, "src", "branch", &at); err != nil {
		t.Fatal(err)
	}
	if got, want := h.commands(t, "branch"), `[{"name":"review","description":"Review the code","input":null}]`; got != want {
		t.Errorf("the fork's commands = %s, want the source's at the fork, %s", got, want)
	}
	if u := h.getSession(t, "branch").Usage; u != nil {
		t.Errorf("the fork's usage = %+v, want none until its agent reports", u)
	}

}
