package session_test

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// Prompts racing prompts, forced many times over on several sessions at
// once. Every contender pauses the agent at a point of its own, so a turn
// that was accepted is still running when the others are answered: the
// race is for acceptance alone. The log names the winner; every answer must
// agree with it.

// Two different prompts at once on an idle session: exactly one is
// accepted and runs, the other is session_busy and never runs.
func TestPromptRacesPrompt(t *testing.T) {
	h := startRig(t, session.Config{})
	sids := []string{"b0", "b1", "b2", "b3"}
	for _, sid := range sids {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	n := iterations(200)
	var firstWon, secondWon atomic.Int64
	ctx := t.Context()
	parallelLoops(t, sids, n, func(sid string, i int) error {
		after, err := h.lastSeq(ctx, sid)
		if err != nil {
			return err
		}
		var names, scripts [2]string
		var accs [2]*events.PromptAccepted
		var errs [2]error
		for k := range 2 {
			names[k] = fmt.Sprintf("%s_%d_%c", sid, i, 'a'+k)
			scripts[k] = "pause " + names[k] + "\nsay " + names[k]
		}
		race(i,
			func() { accs[0], errs[0] = h.accept(ctx, sid, "", scripts[0]) },
			func() { accs[1], errs[1] = h.accept(ctx, sid, "", scripts[1]) })

		// The log says who won: the one turn accepted, still running.
		log, evs, err := h.audit(ctx, sid)
		if err != nil {
			return err
		}
		turns := turnsAfter(log, after)
		if len(turns) != 1 {
			return fmt.Errorf("%d turns accepted for two prompts at once, want 1 (answers %v, %v)", len(turns), errs[0], errs[1])
		}
		turn := turns[0]
		w := -1
		for k := range 2 {
			if userText(evs, turn.ID) == scripts[k] {
				w = k
			}
		}
		if w < 0 {
			return fmt.Errorf("the accepted turn's message is %q, neither prompt's", userText(evs, turn.ID))
		}
		l := 1 - w
		if errs[w] != nil || accs[w].TurnID != turn.ID || accs[w].Sequence != turn.Accepted || accs[w].Finished != nil {
			return fmt.Errorf("the log accepted %s at %d; its prompt was answered %+v, %v", turn.ID, turn.Accepted, accs[w], errs[w])
		}
		if code(errs[l]) != events.CodeSessionBusy {
			return fmt.Errorf("the losing prompt = %+v, %v, want %s", accs[l], errs[l], events.CodeSessionBusy)
		}
		if (w == 0) == (i%2 == 0) { // race starts its first function first on even i
			firstWon.Add(1)
		} else {
			secondWon.Add(1)
		}

		if err := testagent.Release(ctx, h.control, names[w]); err != nil {
			return err
		}
		f, err := turnwait.Await(ctx, h.js, "default", events.SessionID(sid), accs[w])
		if err != nil {
			return fmt.Errorf("await the winner's turn: %w", err)
		}
		log, evs, err = h.audit(ctx, sid)
		if err != nil {
			return err
		}
		turns = turnsAfter(log, after)
		if len(turns) != 1 || turns[0].Finish == nil || finishes(turns[0]) != 1 {
			return fmt.Errorf("after the winner's end, %d turns since %d, want 1 finished once", len(turns), after)
		}
		turn = turns[0]
		if turn.Finish.Outcome != events.OutcomeCompleted || f.TurnID != turn.ID || string(f.Message) != string(turn.Finish.Message) {
			return fmt.Errorf("the winner's wait got %+v, the log finished %+v", f, turn.Finish)
		}
		if text := agentText(evs, turn.ID); text != names[w] {
			return fmt.Errorf("the winner's durable output is %q, want %q", text, names[w])
		}
		// The loser never reached the agent.
		if _, err := os.Stat(testagent.PausedFile(h.control, names[l])); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the losing prompt ran (stat %s: %v)", names[l], err)
		}
		return nil
	})
	if t.Failed() {
		return
	}
	if d := h.dispatches(); d != float64(n) {
		t.Errorf("%v dispatches for %d races, want %d", d, n, n)
	}
	for _, sid := range sids {
		if log, _ := h.readLog(t, sid); len(log.Turns) != n/len(sids) {
			t.Errorf("%s: %d turns, want %d", sid, len(log.Turns), n/len(sids))
		}
	}
	t.Logf("%d races: the first launched won %d, the second %d", n, firstWon.Load(), secondWon.Load())
}

// The same keyed prompt sent by several callers at once: one turn is
// accepted and dispatched once, every caller is answered that turn, and
// every caller's wait on the log gets its outcome. A retry after the end
// is answered the stored outcome, without a new turn.
func TestKeyedPromptRacesItself(t *testing.T) {
	const callers = 5
	h := startRig(t, session.Config{})
	sids := []string{"j0", "j1", "j2", "j3"}
	for _, sid := range sids {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	n := iterations(200)
	ctx := t.Context()
	parallelLoops(t, sids, n, func(sid string, i int) error {
		after, err := h.lastSeq(ctx, sid)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%s_%d", sid, i)
		key, script := "key_"+name, "pause "+name+"\nsay "+name
		var accs [callers]*events.PromptAccepted
		var errs [callers]error
		var wg sync.WaitGroup
		for j := range callers { // each iteration another caller leads
			k := (i + j) % callers
			wg.Go(func() { accs[k], errs[k] = h.accept(ctx, sid, key, script) })
		}
		wg.Wait()

		log, evs, err := h.audit(ctx, sid)
		if err != nil {
			return err
		}
		turns := turnsAfter(log, after)
		if len(turns) != 1 {
			return fmt.Errorf("%d turns accepted for %d callers of one keyed prompt, want 1", len(turns), callers)
		}
		turn := turns[0]
		if got := turn.Records[0].Header.Get(events.HeaderIdempotencyKey); got != key || userText(evs, turn.ID) != script {
			return fmt.Errorf("the accepted turn has key %q and message %q, want %q and %q", got, userText(evs, turn.ID), key, script)
		}
		for k := range callers {
			if errs[k] != nil || accs[k].TurnID != turn.ID || accs[k].Sequence != turn.Accepted || accs[k].Finished != nil {
				return fmt.Errorf("caller %d was answered %+v, %v; the log accepted %s at %d", k, accs[k], errs[k], turn.ID, turn.Accepted)
			}
		}

		if err := testagent.Release(ctx, h.control, name); err != nil {
			return err
		}
		var results [callers]*events.AcpPromptResponse
		for k := range callers {
			wg.Go(func() {
				var f *events.TurnFinished
				if f, errs[k] = turnwait.Await(ctx, h.js, "default", events.SessionID(sid), accs[k]); errs[k] == nil {
					results[k], errs[k] = turnwait.Result(ctx, h.js, "default", events.SessionID(sid), f)
				}
			})
		}
		wg.Wait()
		log, evs, err = h.audit(ctx, sid)
		if err != nil {
			return err
		}
		turns = turnsAfter(log, after)
		if len(turns) != 1 || turns[0].Finish == nil || turns[0].Finish.Outcome != events.OutcomeCompleted {
			return fmt.Errorf("after the turn, %d turns since %d, want 1 completed", len(turns), after)
		}
		turn = turns[0]
		if text := agentText(evs, turn.ID); text != name {
			return fmt.Errorf("the turn's durable output is %q, want %q (run once)", text, name)
		}
		for k := range callers {
			if errs[k] != nil || results[k].StopReason != turn.Finish.StopReason || string(results[k].Message) != h.publicMessage(t, sid, turn.Finish) {
				return fmt.Errorf("caller %d got %+v, %v; the log finished %+v", k, results[k], errs[k], turn.Finish)
			}
		}

		// Finished: a retry is answered from the log.
		acc, err := h.accept(ctx, sid, key, script)
		if err != nil || acc.TurnID != turn.ID || acc.Finished == nil || acc.Finished.Outcome != events.OutcomeCompleted {
			return fmt.Errorf("retry after the end = %+v, %v, want turn %s's stored outcome", acc, err, turn.ID)
		}
		return nil
	})
	if t.Failed() {
		return
	}
	if d := h.dispatches(); d != float64(n) {
		t.Errorf("%v dispatches for %d keyed prompts sent %d times each, want %d", d, n, callers, n)
	}
	for _, sid := range sids {
		if log, _ := h.readLog(t, sid); len(log.Turns) != n/len(sids) {
			t.Errorf("%s: %d turns, want %d", sid, len(log.Turns), n/len(sids))
		}
	}
}
