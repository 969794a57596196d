package session_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// The turn rules under forced races. Each race parks the test agent at a
// point the test controls (a pause, or a permission request), then lets the
// contenders go at once, many times over; the log must name exactly one
// winner each time, and every answer must agree with it.

// promptResult is what a prompt call returned.
type promptResult struct {
	res *events.AcpPromptResponse
	err error
}

func (h *harness) promptAsync(ctx context.Context, sid, key, script string) <-chan promptResult {
	ch := make(chan promptResult, 1)
	go func() {
		res, err := h.prompt(ctx, sid, key, script)
		ch <- promptResult{res, err}
	}()
	return ch
}

// cancelRace is one iteration of TestCancelRacesCompletion.
type cancelRace struct {
	mode   int
	cancel *events.AcpCancelPromptResponse
	prompt promptResult
}

// cancelPrompt against the turn's completion: first writer wins. The agent
// is parked at a pause right before its last words; the test releases it
// and cancels at once (in three launch orders), and the log's TurnFinished
// decides who won. Every answer must agree with the log.
func TestCancelRacesCompletion(t *testing.T) {
	h := startRig(t, session.Config{})
	sids := []string{"c0", "c1", "c2", "c3"}
	for _, sid := range sids {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	n := iterations(240)
	races := make([]cancelRace, n)
	ctx := t.Context()
	parallelLoops(t, sids, n, func(sid string, i int) error {
		name := fmt.Sprintf("%s_%d", sid, i)
		done := h.promptAsync(ctx, sid, "", "pause "+name+"\nsay done")
		if err := testagent.WaitPaused(ctx, h.control, name); err != nil {
			return err
		}
		release := func() error { return os.WriteFile(testagent.ReleaseFile(h.control, name), nil, 0o644) }
		var cancelErr, releaseErr error
		r := &races[i]
		r.mode = i % 3
		switch r.mode {
		case 0: // cancel first, release at once
			var wg sync.WaitGroup
			wg.Go(func() { r.cancel, cancelErr = h.cancelPrompt(ctx, sid) })
			wg.Go(func() { releaseErr = release() })
			wg.Wait()
		case 1: // release first, cancel at once
			var wg sync.WaitGroup
			wg.Go(func() { releaseErr = release() })
			wg.Go(func() { r.cancel, cancelErr = h.cancelPrompt(ctx, sid) })
			wg.Wait()
		case 2: // the agent has left the pause: its answer is on the way
			if releaseErr = release(); releaseErr == nil {
				releaseErr = testutil.Poll(ctx, "the agent to leave "+name, func() (bool, error) {
					_, err := os.Stat(testagent.PausedFile(h.control, name))
					return errors.Is(err, os.ErrNotExist), nil
				})
			}
			r.cancel, cancelErr = h.cancelPrompt(ctx, sid)
		}
		if err := errors.Join(cancelErr, releaseErr); err != nil {
			return err
		}
		r.prompt = <-done
		return nil
	})
	if t.Failed() {
		return
	}

	counts := map[string]int{}
	for k, sid := range sids {
		log, evs := h.readLog(t, sid)
		var mine []int
		for i := k; i < n; i += len(sids) {
			mine = append(mine, i)
		}
		if len(log.Turns) != len(mine) {
			t.Fatalf("%s: %d accepted turns, want %d", sid, len(log.Turns), len(mine))
		}
		for j, i := range mine {
			r, turn := races[i], log.Turns[j]
			if f := finishes(turn); f != 1 || turn.Finish == nil {
				t.Errorf("%s #%d: %d TurnFinished records, want 1", sid, i, f)
				continue
			}
			outcome := turn.Finish.Outcome
			counts[fmt.Sprintf("mode %d %s/%s", r.mode, outcome, r.cancel.Status)]++
			text := agentText(evs, turn.ID)
			switch outcome {
			case events.OutcomeCancelled:
				if r.cancel.Status != events.CancelCancelled {
					t.Errorf("%s #%d: the log says cancelled, cancel answered %q", sid, i, r.cancel.Status)
				}
				if r.prompt.err != nil || r.prompt.res.StopReason != "cancelled" {
					t.Errorf("%s #%d: the log says cancelled, prompt = %+v, %v", sid, i, r.prompt.res, r.prompt.err)
				}
				if text != "" {
					t.Errorf("%s #%d: a cancelled turn has durable agent output %q", sid, i, text)
				}
			case events.OutcomeCompleted:
				if s := r.cancel.Status; s != events.OutcomeCompleted && s != events.CancelNoActivePrompt {
					t.Errorf("%s #%d: the log says completed, cancel answered %q", sid, i, s)
				}
				if r.prompt.err != nil || r.prompt.res.StopReason != "end_turn" || !strings.Contains(string(r.prompt.res.Message), "done") {
					t.Errorf("%s #%d: the log says completed, prompt = %+v, %v", sid, i, r.prompt.res, r.prompt.err)
				} else if want := h.publicMessage(t, sid, turn.Finish); string(r.prompt.res.Message) != want {
					t.Errorf("%s #%d: prompt message %s, the log's %s", sid, i, r.prompt.res.Message, want)
				}
				if text != "done" {
					t.Errorf("%s #%d: a completed turn's durable output is %q, want %q", sid, i, text, "done")
				}
			default:
				t.Errorf("%s #%d: outcome %q (%+v), want completed or cancelled", sid, i, outcome, turn.Finish.Error)
			}
		}
	}
	t.Logf("%d races (outcome/cancel status by launch order): %v", n, counts)
}

// A cancelled turn's buffered chunks never become durable, though they were
// shown live; the user message stays; the adapter is sent session/cancel
// (it answers its prompt "cancelled"). A cancel with no turn is
// no_active_prompt and is not remembered.
func TestCancelDropsBufferedChunks(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if res, err := h.cancelPrompt(ctx, "s1"); err != nil || res.Status != events.CancelNoActivePrompt {
		t.Fatalf("cancel before any turn = %+v, %v, want %s", res, err, events.CancelNoActivePrompt)
	}
	// The idle cancel is not remembered: the next prompt runs to its end.
	if res, err := h.prompt(ctx, "s1", "", "say first"); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("prompt after an idle cancel = %+v, %v", res, err)
	}

	live, err := h.nc.SubscribeSync(events.LiveSubject("default", "s1"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Unsubscribe()
	done := h.promptAsync(ctx, "s1", "", "chunks 5\npause p\nsay more")
	if err := testagent.WaitPaused(ctx, h.control, "p"); err != nil {
		t.Fatal(err)
	}
	// The five chunks are buffered once the owner has published them live
	// (the ones the runner read at once in one message).
	for n := 0; n < 5; {
		m, err := live.NextMsg(testutil.PollTimeout)
		if err != nil {
			t.Fatalf("live delta: %v", err)
		}
		v, err := events.Unmarshal(m.Data)
		if err != nil {
			t.Fatalf("live message: %v", err)
		}
		for _, d := range events.Deltas(v) {
			if !strings.Contains(string(d.Update), "chunk") {
				t.Fatalf("live delta %q, want a chunk", d.Update)
			}
			n++
		}
	}
	res, err := h.cancelPrompt(ctx, "s1")
	if err != nil || res.Status != events.CancelCancelled {
		t.Fatalf("cancel = %+v, %v, want %s", res, err, events.CancelCancelled)
	}
	pr := <-done
	if pr.err != nil || pr.res.StopReason != "cancelled" {
		t.Fatalf("cancelled prompt = %+v, %v, want stopReason cancelled", pr.res, pr.err)
	}
	// The agent heard session/cancel: it leaves the pause unreleased and
	// answers its prompt "cancelled".
	if err := testutil.Poll(ctx, "the agent's cancelled answer", func() (bool, error) {
		recs, err := eventlog.Forward(ctx, h.js, events.StreamIO, events.IOSessionSubjects("default", "s1"), 0, 1000)
		if err != nil {
			return false, err
		}
		for _, r := range recs {
			if r.Header.Get(events.HeaderRecord) != events.RecordAdapterPromptResult {
				continue
			}
			if res, err := events.Decode[events.AdapterPromptResult](r.Data); err == nil && res.StopReason == "cancelled" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(testagent.PausedFile(h.control, "p")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the agent is still paused after the cancel (stat: %v)", err)
	}

	// A cancel with no turn, after a cancelled one, is not remembered either.
	if res, err := h.cancelPrompt(ctx, "s1"); err != nil || res.Status != events.CancelNoActivePrompt {
		t.Errorf("idle cancel = %+v, %v, want %s", res, err, events.CancelNoActivePrompt)
	}
	if res, err := h.prompt(ctx, "s1", "", "say after"); err != nil || res.StopReason != "end_turn" || !strings.Contains(string(res.Message), "after") {
		t.Fatalf("prompt after the cancelled turn = %+v, %v", res, err)
	}

	log, evs := h.readLog(t, "s1")
	if got := log.Outcomes(); !slices.Equal(got, []string{"completed", "cancelled", "completed"}) {
		t.Fatalf("outcomes = %v, want completed, cancelled, completed", got)
	}
	cancelled := log.Turns[1]
	var user bool
	for _, e := range evs {
		if e.turnID != cancelled.ID || e.upd == nil {
			continue
		}
		switch e.upd.SessionUpdate {
		case "user_message_chunk":
			user = strings.Contains(e.upd.Content.Text, "chunks 5")
		case "agent_message_chunk":
			t.Errorf("the cancelled turn's chunk is durable: %+v", e.upd)
		}
	}
	if !user {
		t.Errorf("the cancelled turn's user message is not in the log")
	}
	if cancelled.Finish.StopReason != "cancelled" {
		t.Errorf("cancelled turn's stopReason = %q", cancelled.Finish.StopReason)
	}
}

// An adapter that ignores session/cancel: the turn ends cancelled at once,
// the adapter is evicted after CancelGrace (SessionUnloaded cancel_ignored),
// and the next prompt attaches a new adapter.
func TestCancelIgnoredEvictsAdapter(t *testing.T) {
	const grace = 300 * time.Millisecond
	h := startRig(t, session.Config{CancelGrace: grace})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{Agent: "stubborn"}); err != nil {
		t.Fatal(err)
	}
	first, err := h.lastAttached(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "s1", "", "pause stub\nsay never")
	if err := testagent.WaitPaused(ctx, h.control, "stub"); err != nil {
		t.Fatal(err)
	}
	res, err := h.cancelPrompt(ctx, "s1")
	if err != nil || res.Status != events.CancelCancelled {
		t.Fatalf("cancel = %+v, %v, want %s", res, err, events.CancelCancelled)
	}
	pr := <-done
	if pr.err != nil || pr.res.StopReason != "cancelled" {
		t.Fatalf("cancelled prompt = %+v, %v", pr.res, pr.err)
	}
	// Ended at once, not after the grace: the log orders the turn's
	// TurnFinished before the SessionUnloaded of the eviction (checked
	// below), which holds however slow the machine is.
	if _, err := os.Stat(testagent.PausedFile(h.control, "stub")); err != nil {
		t.Fatalf("the stubborn agent heard the cancel: %v", err)
	}

	// The next prompt waits out the grace, then runs on a new adapter.
	res2, err := h.prompt(ctx, "s1", "", "say again")
	if err != nil || !strings.Contains(string(res2.Message), "again") {
		t.Fatalf("prompt after eviction = %+v, %v", res2, err)
	}
	recs, err := h.ctl(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var unloaded *events.SessionUnloaded
	for _, r := range recs {
		names = append(names, r.VariantName())
		if u, ok := r.(*events.SessionUnloaded); ok {
			unloaded = u
		}
	}
	want := "SessionOpened,AdapterAttached,TurnFinished,SessionUnloaded,AdapterAttached,TurnFinished"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("control records = %s, want %s", got, want)
	}
	if unloaded == nil || unloaded.Reason != "cancel_ignored" {
		t.Errorf("SessionUnloaded = %+v, want reason cancel_ignored", unloaded)
	}
	second, err := h.lastAttached(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if second.ProcessID == first.ProcessID {
		t.Errorf("the next prompt ran on the evicted adapter %s", first.ProcessID)
	}
	// The evicted process is gone.
	if err := testutil.Poll(ctx, "the evicted adapter to exit", func() (bool, error) {
		return syscall.Kill(int(*first.Pid), 0) != nil, nil
	}); err != nil {
		t.Error(err)
	}
	log, _ := h.readLog(t, "s1")
	if got := log.Outcomes(); !slices.Equal(got, []string{"cancelled", "completed"}) {
		t.Errorf("outcomes = %v, want cancelled, completed", got)
	}
}

// race runs f and g at once and waits for both; iteration i decides which
// starts first, so each side gets its turn at leading.
func race(i int, f, g func()) {
	if i%2 == 1 {
		f, g = g, f
	}
	var wg sync.WaitGroup
	wg.Go(f)
	wg.Go(g)
	wg.Wait()
}
