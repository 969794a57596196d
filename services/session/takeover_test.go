package session_test

import (
	"slices"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
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

// A message that begins right before its owner stops is not lost: the
// chunk that ended the previous message (and so made it durable) was held
// in memory only, and the next owner must apply it again. Each script
// pauses right after the first chunk of a new message.
func TestTakeoverKeepsTheMessageInProgress(t *testing.T) {
	for name, tc := range map[string]struct{ script, durable, want string }{
		"thought after text": {"chunks 2 early\nthink hmm\npause tk\nsay done", "agent_message_chunk:early 1 early 2 ",
			"agent_message_chunk:early 1 early 2 ,agent_thought_chunk:hmm,agent_message_chunk:done"},
		"text after a plan": {"plan read | write\nchunks 1 first\npause tk\nchunks 1 second", "plan:",
			"plan:,agent_message_chunk:first 1 second 1 "},
		// One ACP_IO record of four updates: the owner stored the first
		// two (the thought at "seq.2"), and holds the last two; the next
		// owner applies the record again from its third update.
		"within a burst": {"burst\nplan read | write\nthink hmm\nchunks 2 first\npause tk\nchunks 1 second", "agent_thought_chunk:hmm",
			"plan:,agent_thought_chunk:hmm,agent_message_chunk:first 1 first 2 second 1 "},
	} {
		t.Run(name, func(t *testing.T) {
			h := startRig(t, session.Config{})
			ctx := t.Context()
			if err := h.open(t, "tk", events.AcpOpenSessionRequest{}); err != nil {
				t.Fatal(err)
			}
			first := h.promptAsync(ctx, "tk", "key-1", tc.script)
			if err := testagent.WaitPaused(ctx, h.control, "tk"); err != nil {
				t.Fatal(err)
			}
			// The owner applied the new message's first chunk: the update
			// it ended is durable.
			if err := testutil.Poll(ctx, "the update before the pause to be durable", func() (bool, error) {
				return slices.Contains(durableTexts(t, h, "tk"), tc.durable), nil
			}); err != nil {
				t.Fatal(err)
			}
			h.stopSvc()
			h.startSession() // adopts the session and takes the turn over
			if err := testagent.Release(ctx, h.control, "tk"); err != nil {
				t.Fatal(err)
			}
			if r := <-first; r.err != nil {
				t.Fatalf("prompt in flight across the stop = %v", r.err)
			}
			h.readLog(t, "tk") // audits
			if got := strings.Join(durableTexts(t, h, "tk"), ","); got != tc.want {
				t.Errorf("durable updates\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// The same for a permission request: the chunks before it are held in
// memory while the request waits, and survive the owner's stop. In a
// burst, the chunks are held from the middle of its record.
func TestTakeoverKeepsChunksBeforeAPermission(t *testing.T) {
	for name, tc := range map[string]struct{ before, want string }{
		"alone": {"chunks 2 before", "before 1 before 2 \npermission: selected yes\nafter"},
		// The early chunk is in the record, before the ones held.
		"in a burst": {"burst\nchunks 1 early\nplan a | b\nchunks 2 before", "early 1 before 1 before 2 \npermission: selected yes\nafter"},
	} {
		t.Run(name, func(t *testing.T) { testTakeoverKeepsChunksBeforeAPermission(t, tc.before, tc.want) })
	}
}

func testTakeoverKeepsChunksBeforeAPermission(t *testing.T, before, want string) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "tp", events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	first := h.promptAsync(ctx, "tp", "key-1", before+"\npermission call_1 allow_once=yes,reject_once=no\nsay after")
	_, req, err := h.waitPermissionRequest(ctx, "tp", 0)
	if err != nil {
		t.Fatal(err)
	}
	h.stopSvc()
	h.startSession() // takes the turn over, its request pending
	if res, err := h.respondPermission(ctx, "tp", req.RequestID, "yes"); err != nil || res.Status != events.PermissionAccepted {
		t.Fatalf("respond after the takeover = %+v, %v", res, err)
	}
	if r := <-first; r.err != nil {
		t.Fatalf("prompt in flight across the stop = %v", r.err)
	}
	_, evs := h.readLog(t, "tp")
	var text strings.Builder
	for _, e := range evs {
		if e.upd != nil && e.upd.SessionUpdate == "agent_message_chunk" {
			text.WriteString(e.upd.Content.Text)
		}
	}
	if got := text.String(); got != want {
		t.Errorf("the agent's durable text = %q, want %q", got, want)
	}
}

// durableTexts returns the session's durable agent updates, each as
// "kind:text".
func durableTexts(t *testing.T, h *rig, sid string) []string {
	t.Helper()
	recs, err := eventlog.Forward(t.Context(), h.js, events.StreamLog, events.LogSubject("default", events.SessionID(sid), events.LogEvents), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := decodeEvents(recs)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range evs {
		if e.upd != nil && e.upd.SessionUpdate != "user_message_chunk" {
			texts = append(texts, e.upd.SessionUpdate+":"+e.upd.Content.Text)
		}
	}
	return texts
}

// A prompt of several content blocks is accepted as one atomic append of
// one event per block; when the owner stops right after it, the log ends
// with the last block's event, and the next owner still finds the open
// turn (its start is the batch's first record) and takes it over.
func TestTakeoverAfterAMultiBlockAcceptance(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "tm", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	sid := "tm"
	content := events.JSON(`[{"type":"text","text":"pause tm\nsay done"},{"type":"text","text":"a second block"},{"type":"text","text":"a third"}]`)
	first := make(chan promptResult, 1)
	go func() {
		res, err := turnwait.Prompt(ctx, h.js, "default", &events.AcpPromptRequest{SessionID: &sid, Content: content})
		first <- promptResult{res, err}
	}()
	if err := testagent.WaitPaused(ctx, h.control, "tm"); err != nil {
		t.Fatal(err)
	}
	last, err := eventlog.Last(ctx, h.js, events.StreamLog, events.LogFilter("default", "tm"))
	if err != nil {
		t.Fatal(err)
	}
	if last.Header.Get(events.HeaderTurnID) == "" || last.Header.Get(events.HeaderTurnAccepted) != "" {
		t.Fatalf("the log ends with %s %v, want the acceptance's last block", last.Header.Get(events.HeaderRecord), last.Header)
	}
	h.stopSvc()
	h.startSession() // adopts the session and takes the turn over
	if err := testagent.Release(ctx, h.control, "tm"); err != nil {
		t.Fatal(err)
	}
	if r := <-first; r.err != nil || r.res.StopReason != "end_turn" || !strings.Contains(string(r.res.Message), "done") {
		t.Fatalf("prompt in flight across the stop = %+v, %v, want the turn's own end", r.res, r.err)
	}
	log, _ := h.readLog(t, "tm") // audits
	if got := log.Outcomes(); len(got) != 1 || got[0] != events.OutcomeCompleted {
		t.Errorf("outcomes = %v, want one completed turn", got)
	}
}

// An owner that made a turn's last message durable and died before the
// turn's TurnFinished was stored leaves the turn open in the log, its
// answer already read from ACP_IO. The next owner reads that answer again
// and ends the turn. (The message was once stamped with the answer's place
// in ACP_IO, which told the next owner the answer was applied: the turn
// stayed open for ever, as two turns of the fault soak did.)
func TestTakeoverEndsATurnWhoseEndWasLost(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "tk", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "tk", "", "chunks 3 last"); err != nil {
		t.Fatal(err)
	}
	h.stopSvc()
	// The log then ends as the dead owner left it: without the
	// TurnFinished, its newest record.
	last, err := eventlog.Last(ctx, h.js, events.StreamLog, events.LogFilter("default", "tk"))
	if err != nil || last == nil || last.Header.Get(events.HeaderRecord) != events.RecordTurnFinished {
		t.Fatalf("the log's newest record = %+v, %v; want the TurnFinished", last, err)
	}
	stream, err := h.js.Stream(ctx, events.StreamLog)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, last.Sequence); err != nil {
		t.Fatal(err)
	}
	h.startSession()
	// A request loads the session; its new owner finds the turn open and
	// takes it over.
	if err := h.open(t, "tk", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, "the open turn to end", func() (bool, error) {
		rec, err := eventlog.Last(ctx, h.js, events.StreamLog, events.LogFilter("default", "tk"))
		return err == nil && rec != nil && rec.Header.Get(events.HeaderRecord) == events.RecordTurnFinished, nil
	}); err != nil {
		t.Fatal(err)
	}
	log, _ := h.readLog(t, "tk") // audits: one finish, no duplicate
	if got := log.Outcomes(); len(got) != 1 || got[0] != events.OutcomeCompleted {
		t.Fatalf("outcomes = %v, want one completed turn", got)
	}
	if got := strings.Join(durableTexts(t, h, "tk"), ","); got != "agent_message_chunk:last 1 last 2 last 3 " {
		t.Errorf("durable updates = %s, want the one message", got)
	}
	if f := log.Turns[0].Finish; f == nil || !strings.Contains(string(f.Message), "last 3") {
		t.Errorf("the turn's end = %+v, want it to carry the message", f)
	}
}
