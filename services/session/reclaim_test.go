package session_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// unloadedFor waits until sid's log has a SessionUnloaded with reason.
func (h *rig) unloadedFor(ctx context.Context, sid, reason string) error {
	return testutil.Poll(ctx, "SessionUnloaded{"+reason+"} in "+sid, func() (bool, error) {
		ctl, err := h.ctl(ctx, sid)
		if err != nil {
			return false, err
		}
		for _, v := range ctl {
			if u, ok := v.(*events.SessionUnloaded); ok && u.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
}

// An adapter idle past the idle timeout is unloaded, never while its turn
// runs, and the next prompt restores the session.
func TestIdleReclaim(t *testing.T) {
	h := startRig(t, session.Config{IdleTimeout: 300 * time.Millisecond, SweepInterval: 20 * time.Millisecond})
	ctx := t.Context()
	if err := h.open(t, "idle", events.AcpOpenSessionRequest{Agent: "resumer"}); err != nil {
		t.Fatal(err)
	}
	// A turn longer than the idle timeout is not reclaimed: it is paused
	// (silent) until released after the sweep has had many chances.
	done := h.promptAsync(ctx, "idle", "", "pause long\nsay done")
	if err := testagent.WaitPaused(ctx, h.control, "long"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * 300 * time.Millisecond)
	if err := testutil.Poll(ctx, "three idle timeouts to pass", func() (bool, error) { return time.Now().After(deadline), nil }); err != nil {
		t.Fatal(err)
	}
	if err := testagent.Release(ctx, h.control, "long"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	// Not reclaimed during the turn: no SessionUnloaded between the turn's
	// adapter attaching and its TurnFinished. (A machine slow enough to let
	// the adapter idle out between the open and the prompt makes the turn
	// attach a new one, which is right: the log's order, not the clock,
	// is what is checked.)
	recs, err := h.ctl(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	var turn []string
	for _, r := range recs {
		switch r.(type) {
		case *events.AdapterAttached:
			turn = turn[:0]
		case *events.TurnFinished:
			if slices.Contains(turn, "SessionUnloaded") {
				t.Fatalf("reclaimed during a turn: control records %v before its TurnFinished", turn)
			}
		}
		turn = append(turn, r.VariantName())
	}
	// Idle now: reclaimed.
	if err := h.unloadedFor(ctx, "idle", "idle"); err != nil {
		t.Fatal(err)
	}
	if res, err := h.prompt(ctx, "idle", "", "say back"); err != nil || string(res.Message) == "" {
		t.Fatalf("prompt after reclaim = %v, %v", res, err)
	}
	if got := h.tiers(t, "idle"); len(got) < 2 || got[0] != events.TierNew || got[len(got)-1] != events.TierResume {
		t.Errorf("tiers = %v, want new, then resume after each reclaim", got)
	}
}

func TestMaxAdapterAge(t *testing.T) {
	h := startRig(t, session.Config{MaxAdapterAge: 200 * time.Millisecond, SweepInterval: 20 * time.Millisecond})
	ctx := t.Context()
	if err := h.open(t, "old", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := h.unloadedFor(ctx, "old", "max_age"); err != nil {
		t.Fatal(err)
	}
}

// A runner whose heartbeat disappears and that does not answer its ping
// takes its adapters with it: each session on it records an exit observed
// indirectly (no exit code), its turn fails adapter_exited, and the next
// prompt attaches elsewhere. (One that answers keeps them:
// TestRunnerWithoutHeartbeatButAnsweringKeepsAdapters.)
func TestRunnerGone(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "rg", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "rg", "", "pause hb\nsay late")
	if err := testagent.WaitPaused(ctx, h.control, "hb"); err != nil {
		t.Fatal(err)
	}
	kv, err := h.js.KeyValue(ctx, events.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	// The runner's process keeps running, as a partitioned one would; its
	// heartbeat is deleted, as a watcher may see its expiry.
	h.waitDispatched(1)
	h.partitionRunner()
	if err := kv.Delete(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; code(r.err) != events.CodeAdapterExited {
		t.Fatalf("prompt on a lost runner = %+v, %v, want %s", r.res, r.err, events.CodeAdapterExited)
	}
	ctl, err := h.ctl(ctx, "rg")
	if err != nil {
		t.Fatal(err)
	}
	var exit *events.AcpAgentExitedEvent
	for _, v := range ctl {
		if e, ok := v.(*events.AcpAgentExitedEvent); ok {
			exit = e
		}
	}
	if exit == nil || exit.ExitCode != nil || exit.Restart != events.RestartNotAttempted {
		t.Fatalf("exit record = %+v, want one without an exit code", exit)
	}
	if err := testagent.Release(ctx, h.control, "hb"); err != nil {
		t.Fatal(err)
	}
	h.startRunner("r2")
	if _, err := h.prompt(ctx, "rg", "", "say again"); err != nil {
		t.Fatalf("prompt after the runner was lost: %v", err)
	}
	h.readLog(t, "rg")
}
