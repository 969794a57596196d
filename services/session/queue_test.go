package session_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/sessionstate"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// queue sends script as a prompt with queue set, keyed key ("": none).
func (h *harness) queue(ctx context.Context, sid, key, script string) (*events.PromptAccepted, error) {
	req := promptRequest(sid, key, script)
	req.Queue = true
	return rpc.Call[events.PromptAccepted](ctx, h.nc, events.APISubject("default", events.OpPrompt), req, nil)
}

func (h *harness) withdraw(ctx context.Context, sid, qid string) error {
	_, err := rpc.Call[events.PromptWithdrawn](ctx, h.nc, events.APISubject("default", events.OpWithdrawPrompt),
		&events.WithdrawPromptRequest{SessionID: &sid, QueueID: qid}, nil)
	return err
}

// queuedTexts returns the texts of the prompts sid's info lists as queued.
func (h *harness) queuedTexts(t *testing.T, sid string) []string {
	t.Helper()
	var out []string
	for i, q := range h.getSession(t, sid).Queue {
		if q.Position != uint32(i+1) {
			t.Errorf("queue entry %d of %s has position %d", i, sid, q.Position)
		}
		var blocks []struct{ Text string }
		if err := json.Unmarshal(q.Content, &blocks); err != nil || len(blocks) != 1 {
			t.Fatalf("queue entry %s content %s: %v", q.ID, q.Content, err)
		}
		out = append(out, blocks[0].Text)
	}
	return out
}

// awaitTurns waits until sid's log holds n finished turns, and returns it,
// audited, with its public events.
func (h *harness) awaitTurns(t *testing.T, sid string, n int) (*eventlogtest.Log, []decoded) {
	t.Helper()
	if err := testutil.Poll(t.Context(), "the queued turns ran", func() (bool, error) {
		log, err := eventlogtest.Read(t.Context(), h.js, "default", events.SessionID(sid))
		if err != nil {
			return false, err
		}
		done := 0
		for _, turn := range log.Turns {
			if turn.Finish != nil {
				done++
			}
		}
		return done >= n, nil
	}); err != nil {
		t.Fatal(err)
	}
	return h.readLog(t, sid)
}

// turnTexts are the user messages of log's turns, in order.
func turnTexts(log *eventlogtest.Log, evs []decoded) []string {
	var out []string
	for _, turn := range log.Turns {
		out = append(out, userText(evs, turn.ID))
	}
	return out
}

// queueChanges are the queued and dequeued state changes of log, as
// "queued", "dequeued:<reason>".
func queueChanges(t *testing.T, log *eventlogtest.Log) []string {
	t.Helper()
	var out []string
	for _, r := range log.Records {
		c, err := sessionstate.ChangeOf(r.Header, r.Data, func() (bool, error) { return false, nil })
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c == nil:
		case c.Change == events.ChangeQueued:
			out = append(out, c.Change)
		case c.Change == events.ChangeDequeued:
			out = append(out, c.Change+":"+c.Queue.Reason)
		}
	}
	return out
}

// A prompt sent with queue while a turn runs is answered at once with its
// place; it runs as its own turn, in order, when the turns before it end
// (issue 32 §1). A keyed one sent again is the same entry; a withdrawn one
// never runs, and withdrawing it again, or one that started, is
// prompt_dequeued. Without queue, a busy session is still session_busy.
func TestPromptQueue(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "q", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accept(ctx, "q", "", "pause q\nsay first"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.WaitPaused(ctx, h.control, "q"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, script := range []string{"say second", "say third", "say fourth"} {
		key := ""
		if i == 0 {
			key = "k2"
		}
		acc, err := h.queue(ctx, "q", key, script)
		if err != nil {
			t.Fatalf("queue %q: %v", script, err)
		}
		if acc.Queued == nil || acc.TurnID != "" || acc.Queued.Position != uint32(i+1) {
			t.Fatalf("queue %q answered %+v, want a place %d and no turn", script, acc, i+1)
		}
		ids = append(ids, acc.Queued.ID)
	}
	if acc, err := h.queue(ctx, "q", "k2", "say second"); err != nil || acc.Queued == nil || acc.Queued.ID != ids[0] {
		t.Errorf("the keyed queued prompt sent again = %+v, %v; want its entry %s", acc, err, ids[0])
	}
	if _, err := h.queue(ctx, "q", "k2", "say other"); code(err) != events.CodeIdempotencyConflict {
		t.Errorf("its key with other content = %v, want idempotency_conflict", err)
	}
	if _, err := h.accept(ctx, "q", "", "say now"); code(err) != events.CodeSessionBusy {
		t.Errorf("a prompt without queue while busy = %v, want session_busy", err)
	}
	if got, want := h.queuedTexts(t, "q"), []string{"say second", "say third", "say fourth"}; !slices.Equal(got, want) {
		t.Errorf("queue = %q, want %q", got, want)
	}
	if err := h.withdraw(ctx, "q", ids[1]); err != nil {
		t.Fatalf("withdraw %s: %v", ids[1], err)
	}
	if err := h.withdraw(ctx, "q", ids[1]); code(err) != events.CodePromptDequeued {
		t.Errorf("withdraw it again = %v, want prompt_dequeued", err)
	}
	if err := h.withdraw(ctx, "q", "q_0000000000000000000000"); code(err) != events.CodeNotQueued {
		t.Errorf("withdraw an entry never queued = %v, want not_queued", err)
	}
	if err := h.withdraw(ctx, "q", "../x"); code(err) != events.CodeInvalidRequest {
		t.Errorf("withdraw a malformed ID = %v, want invalid_request", err)
	}
	if err := h.withdraw(ctx, "nosuch", ids[0]); code(err) != events.CodeSessionNotFound {
		t.Errorf("withdraw from a missing session = %v, want session_not_found", err)
	}
	if got, want := h.queuedTexts(t, "q"), []string{"say second", "say fourth"}; !slices.Equal(got, want) {
		t.Errorf("queue after the withdrawal = %q, want %q", got, want)
	}

	if err := testagent.Release(ctx, h.control, "q"); err != nil {
		t.Fatal(err)
	}
	log, evs := h.awaitTurns(t, "q", 3)
	if got, want := turnTexts(log, evs), []string{"pause q\nsay first", "say second", "say fourth"}; !slices.Equal(got, want) {
		t.Errorf("turns ran %q, want %q", got, want)
	}
	if got, want := log.Outcomes(), []string{"completed", "completed", "completed"}; !slices.Equal(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	if k := log.Turns[1].Finish.IdempotencyKey; k == nil || *k != "k2" {
		t.Errorf("the keyed queued prompt's turn finished with key %v, want k2", k)
	}
	// Its key now finds the turn it ran as, finished.
	if acc, err := h.queue(ctx, "q", "k2", "say second"); err != nil || acc.Finished == nil || acc.TurnID != log.Turns[1].ID {
		t.Errorf("the keyed queued prompt after its turn = %+v, %v; want turn %s, finished", acc, err, log.Turns[1].ID)
	}
	if err := h.withdraw(ctx, "q", ids[0]); code(err) != events.CodePromptDequeued {
		t.Errorf("withdraw an entry that started = %v, want prompt_dequeued", err)
	}
	if got, want := queueChanges(t, log), []string{"queued", "queued", "queued", "dequeued:withdrawn", "dequeued:started", "dequeued:started"}; !slices.Equal(got, want) {
		t.Errorf("queue state changes %q, want %q", got, want)
	}
	if q := h.getSession(t, "q").Queue; len(q) != 0 {
		t.Errorf("queue after its turns ran = %v, want empty", q)
	}
	if n := testutil.Metric(t, h.reg, "acp_session_prompts_queued_total"); n != 3 {
		t.Errorf("prompts queued %v, want 3", n)
	}
	// Idle, with nothing waiting, a prompt sent with queue runs at once.
	acc, err := h.queue(ctx, "q", "", "say at once")
	if err != nil || acc.Queued != nil || acc.TurnID == "" {
		t.Errorf("a queued prompt to an idle session = %+v, %v; want a turn", acc, err)
	}
}

// The queue is in the log: a new session replica finds it, runs it in
// order after the turn it took over, and nothing is lost or run twice.
func TestPromptQueueSurvivesRestart(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "qr", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accept(ctx, "qr", "", "pause qr\nsay first"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.WaitPaused(ctx, h.control, "qr"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"say second", "say third"} {
		if _, err := h.queue(ctx, "qr", "", s); err != nil {
			t.Fatal(err)
		}
	}
	h.stopSvc()
	h.startSession()
	if err := testagent.Release(ctx, h.control, "qr"); err != nil {
		t.Fatal(err)
	}
	log, evs := h.awaitTurns(t, "qr", 3)
	if got, want := turnTexts(log, evs), []string{"pause qr\nsay first", "say second", "say third"}; !slices.Equal(got, want) {
		t.Errorf("turns ran %q, want %q", got, want)
	}
	if n := len(log.Turns); n != 3 {
		t.Errorf("%d turns, want 3: a queued prompt ran twice", n)
	}
	// Each end after which a queued prompt was to start says so, for a
	// claim should its owner die before starting it; the last does not.
	var next []bool
	for _, turn := range log.Turns {
		for _, r := range turn.Records {
			if r.Header.Get(events.HeaderRecord) == events.RecordTurnFinished {
				next = append(next, r.Header.Get(events.HeaderQueueNext) != "")
			}
		}
	}
	if !slices.Equal(next, []bool{true, true, false}) {
		t.Errorf("the turn ends carry %s %v, want [true true false]", events.HeaderQueueNext, next)
	}
}

// With session.queue-on-failure=hold, a cancelled turn holds the queue:
// what waits stays, and runs after the next prompt sent without queue. An
// unload holds it too. A deleted session's queue goes with it.
func TestPromptQueueHold(t *testing.T) {
	h := startRig(t, session.Config{QueueOnFailure: session.QueueHold})
	ctx := t.Context()
	if err := h.open(t, "qh", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accept(ctx, "qh", "", "pause qh\nsay first"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.WaitPaused(ctx, h.control, "qh"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.queue(ctx, "qh", "", "say queued"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.cancelPrompt(ctx, "qh"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, "the queue held", func() (bool, error) {
		info := h.getSession(t, "qh")
		return info.QueueHeld && len(info.Queue) == 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Another queued prompt waits behind it, held too.
	if acc, err := h.queue(ctx, "qh", "", "say queued too"); err != nil || acc.Queued == nil || acc.Queued.Position != 2 {
		t.Fatalf("a queued prompt to a held queue = %+v, %v; want place 2", acc, err)
	}
	if _, err := h.prompt(ctx, "qh", "", "say direct"); err != nil {
		t.Fatal(err)
	}
	log, evs := h.awaitTurns(t, "qh", 4)
	if got, want := turnTexts(log, evs), []string{"pause qh\nsay first", "say direct", "say queued", "say queued too"}; !slices.Equal(got, want) {
		t.Errorf("turns ran %q, want %q", got, want)
	}
	if info := h.getSession(t, "qh"); info.QueueHeld || len(info.Queue) != 0 {
		t.Errorf("after the queue ran: held %v, queue %v", info.QueueHeld, info.Queue)
	}

	// An unload holds what waits.
	if _, err := h.accept(ctx, "qh", "", "pause qh2\nsay never"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.WaitPaused(ctx, h.control, "qh2"); err != nil {
		t.Fatal(err)
	}
	acc, err := h.queue(ctx, "qh", "", "say after unload")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.Call[events.AcpUnloadSessionResponse](ctx, h.nc, events.APISubject("default", events.OpUnloadSession),
		&events.AcpUnloadSessionRequest{SessionID: new("qh")}, nil); err != nil {
		t.Fatal(err)
	}
	if info := h.getSession(t, "qh"); !info.QueueHeld || len(info.Queue) != 1 {
		t.Errorf("after an unload: held %v, queue %v; want held, one waiting", info.QueueHeld, info.Queue)
	}
	// Deleted, the session takes its queue with it.
	if err := h.delete(ctx, "qh"); err != nil {
		t.Fatal(err)
	}
	if err := h.withdraw(ctx, "qh", acc.Queued.ID); code(err) != events.CodeSessionNotFound {
		t.Errorf("withdraw from a deleted session = %v, want session_not_found", err)
	}
	if last, err := eventlog.Last(ctx, h.js, events.StreamLog, events.QueueSubjects("default", "qh")); err != nil || last != nil {
		t.Errorf("a deleted session's queue records: %v, %v; want none", last, err)
	}
	if err := h.open(t, "qh", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if q := h.getSession(t, "qh").Queue; len(q) != 0 {
		t.Errorf("the reopened session's queue = %v, want empty", q)
	}
}

// A Go client's Prompt sent with queue behind a running turn returns its
// own turn's result, read from the log: it waits for its entry to start
// (turnwait.AwaitStart), then for its turn to end. A withdrawn entry's
// Prompt is prompt_dequeued.
func TestPromptQueueWaiter(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "qw", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accept(ctx, "qw", "", "pause qw\nsay first"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.WaitPaused(ctx, h.control, "qw"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp *events.AcpPromptResponse
		err  error
	}
	wait := func(script string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			req := promptRequest("qw", "", script)
			req.Queue = true
			resp, err := turnwait.Prompt(ctx, h.js, "default", req)
			ch <- result{resp, err}
		}()
		return ch
	}
	second := wait("say second")
	if err := testutil.Poll(ctx, "the second queued", func() (bool, error) { return len(h.getSession(t, "qw").Queue) == 1, nil }); err != nil {
		t.Fatal(err)
	}
	third := wait("say third")
	if err := testutil.Poll(ctx, "the third queued", func() (bool, error) { return len(h.getSession(t, "qw").Queue) == 2, nil }); err != nil {
		t.Fatal(err)
	}
	if err := h.withdraw(ctx, "qw", h.getSession(t, "qw").Queue[1].ID); err != nil {
		t.Fatal(err)
	}
	if r := <-third; code(r.err) != events.CodePromptDequeued {
		t.Errorf("the withdrawn prompt's wait = %+v, %v; want prompt_dequeued", r.resp, r.err)
	}
	if err := testagent.Release(ctx, h.control, "qw"); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil || r.resp.StopReason != "end_turn" || !strings.Contains(string(r.resp.Message), "second") {
		t.Errorf("the queued prompt's wait = %+v, %v; want its own turn's reply", r.resp, r.err)
	}
}

// A queued prompt does not start past the session's spending cap: the turn
// that crosses it ends budget_exhausted, and the entry behind it leaves the
// queue failed, with that error; while the session is at its cap, a
// prompt is not queued at all.
func TestPromptQueueAtBudget(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "qb", events.AcpOpenSessionRequest{Budget: &events.Budget{MaxCost: &events.Money{Amount: 1, Currency: "USD"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accept(ctx, "qb", "", "pause qb\ncost 1 2 1.5 USD\nsay never"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.WaitPaused(ctx, h.control, "qb"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.queue(ctx, "qb", "", "say after"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.Release(ctx, h.control, "qb"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, "the queue emptied", func() (bool, error) { return len(h.getSession(t, "qb").Queue) == 0, nil }); err != nil {
		t.Fatal(err)
	}
	log, _ := h.readLog(t, "qb")
	if got := log.Outcomes(); !slices.Equal(got, []string{events.OutcomeBudgetExhausted}) {
		t.Errorf("turns %v, want the one that crossed the cap only", got)
	}
	var failed *events.PromptDequeued
	for _, r := range log.Records {
		if d, err := events.Decode[events.PromptDequeued](r.Data); err == nil && r.Header.Get(events.HeaderRecord) == events.RecordPromptDequeued {
			failed = d
		}
	}
	if failed == nil || failed.Reason != events.DequeueFailed || failed.Error == nil || failed.Error.Code != string(events.CodeBudgetExhausted) {
		t.Errorf("the queued prompt left the queue as %+v, want failed, budget_exhausted", failed)
	}
	if _, err := h.queue(ctx, "qb", "", "say more"); code(err) != events.CodeBudgetExhausted {
		t.Errorf("a prompt queued at the cap = %v, want budget_exhausted", err)
	}
}
