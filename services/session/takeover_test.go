package session_test

import (
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// The session service stops mid-turn while the adapter keeps working: the
// next service takes the turn over at start-up, reads what the adapter said
// meanwhile from ACP_IO, and the turn completes normally; a keyed retry gets
// its result; nothing is lost or appended twice, and nothing is dispatched
// again.
func TestTakeoverContinuesTurn(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "tk", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	script := "chunks 3 early\nthink hmm\nplan read | write\npause tk\nchunks 2 late\nsay done"
	first := h.promptAsync(ctx, "tk", "key-1", script)
	if err := testagent.WaitPaused(ctx, h.control, "tk"); err != nil {
		t.Fatal(err)
	}
	h.stopSvc()
	h.startSession() // adopts the session and takes the turn over
	if err := testagent.Release(ctx, h.control, "tk"); err != nil {
		t.Fatal(err)
	}
	// The prompt in flight across the stop waits on the log, not on the
	// service: it gets the turn's end from the new owner.
	if r := <-first; r.err != nil || r.res.StopReason != "end_turn" || !strings.Contains(string(r.res.Message), "done") {
		t.Fatalf("prompt in flight across the stop = %+v, %v, want the turn's own end", r.res, r.err)
	}
	res, err := h.prompt(ctx, "tk", "key-1", script)
	if err != nil {
		t.Fatalf("keyed retry after takeover: %v", err)
	}
	if res.StopReason != "end_turn" || !strings.Contains(string(res.Message), "done") {
		t.Errorf("result = %+v, want the turn's own end", res)
	}
	if d := h.dispatches(); d != 0 {
		t.Errorf("the new owner dispatched %v prompts, want 0", d)
	}
	log, evs := h.readLog(t, "tk") // audits: one finish, no duplicate
	if got := log.Outcomes(); len(got) != 1 || got[0] != events.OutcomeCompleted {
		t.Fatalf("outcomes = %v, want one completed turn", got)
	}
	var texts []string
	for _, e := range evs {
		if e.upd != nil && e.upd.SessionUpdate != "user_message_chunk" {
			texts = append(texts, e.upd.SessionUpdate+":"+e.upd.Content.Text)
		}
	}
	want := "agent_message_chunk:early 1 early 2 early 3 ,agent_thought_chunk:hmm,plan:,agent_message_chunk:late 1 late 2 done"
	if got := strings.Join(texts, ","); got != want {
		t.Errorf("durable updates\n got %s\nwant %s", got, want)
	}
}
