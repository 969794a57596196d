package session_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// promptBounded is promptAsync whose wait ends after testutil.PollTimeout: a turn
// that never ends fails the test instead of hanging it.
func (h *rig) promptBounded(sid, script string) <-chan promptResult {
	ctx, cancel := context.WithTimeout(h.t.Context(), testutil.PollTimeout)
	h.t.Cleanup(cancel)
	return h.promptAsync(ctx, sid, "", script)
}

// waitDispatched waits until n prompts' dispatches were acknowledged by
// their runner: a runner cut off before its acknowledgement reaches the
// session service leaves the delivery uncertain, another outcome.
func (h *rig) waitDispatched(n float64) {
	h.t.Helper()
	if err := testutil.Poll(h.t.Context(), "the prompt's dispatch", func() (bool, error) {
		return testutil.Metric(h.t, h.reg, "acp_session_turn_dispatch_seconds") >= n, nil
	}); err != nil {
		h.t.Fatal(err)
	}
}

// loseHeartbeat makes runner id's heartbeat vanish as a watcher sees it:
// deleted (a runner that said goodbye, or one starting again under its
// ID), or purged, the operation the marker of an expired heartbeat reads
// as.
type loseHeartbeat func(ctx context.Context, kv jetstream.KeyValue, id string) error

var heartbeatLosses = []struct {
	name string
	lose loseHeartbeat
}{
	{"deleted", func(ctx context.Context, kv jetstream.KeyValue, id string) error { return kv.Delete(ctx, id) }},
	{"expired", func(ctx context.Context, kv jetstream.KeyValue, id string) error { return kv.Purge(ctx, id) }},
}

// runnerChecks returns acp_session_runner_checks_total{verdict}.
func (r *rig) runnerChecks(verdict string) float64 {
	r.t.Helper()
	return testutil.Metric(r.t, r.reg, "acp_session_runner_checks_total", "verdict", verdict)
}

// A runner whose heartbeat vanishes but which answers its ping is alive (a
// heartbeat refused during an election of the bucket's leader is no exit):
// its adapters are kept, and the running turn completes end_turn.
func TestRunnerWithoutHeartbeatButAnsweringKeepsAdapters(t *testing.T) {
	for _, loss := range heartbeatLosses {
		t.Run(loss.name, func(t *testing.T) {
			h := startRig(t, session.Config{})
			ctx := t.Context()
			if err := h.open(t, "alive", events.AcpOpenSessionRequest{}); err != nil {
				t.Fatal(err)
			}
			done := h.promptBounded("alive", "pause hb\nsay still here")
			if err := testagent.WaitPaused(ctx, h.control, "hb"); err != nil {
				t.Fatal(err)
			}
			kv, err := h.js.KeyValue(ctx, events.BucketRunners)
			if err != nil {
				t.Fatal(err)
			}
			if err := loss.lose(ctx, kv, "r1"); err != nil {
				t.Fatal(err)
			}
			// The turn is held until the session service has checked the
			// runner, so that a verdict of gone would end it first.
			if err := testutil.Poll(ctx, "the runner's check", func() (bool, error) {
				return h.runnerChecks("alive") > 0 || h.runnerChecks("gone") > 0, nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := testagent.Release(ctx, h.control, "hb"); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.res.StopReason != "end_turn" || !strings.Contains(string(r.res.Message), "still here") {
				t.Fatalf("prompt on a runner that lost its heartbeat = %+v, %v, want end_turn with its message", r.res, r.err)
			}
			if n, err := h.countCtl(ctx, "alive", events.RecordAgentExited); err != nil || n != 0 {
				t.Errorf("%d exit records (%v), want none", n, err)
			}
			if alive, gone := h.runnerChecks("alive"), h.runnerChecks("gone"); alive < 1 || gone != 0 {
				t.Errorf("runner checks: %v alive, %v gone; want at least 1 alive, none gone", alive, gone)
			}
			// The runner serves the next turn as before.
			if _, err := h.prompt(ctx, "alive", "", "say again"); err != nil {
				t.Fatalf("the next prompt: %v", err)
			}
			h.readLog(t, "alive")
		})
	}
}

// A runner whose connection is gone does not answer its ping: once its
// heartbeat vanishes, its adapters count as exited and the running turn
// ends adapter_exited.
func TestRunnerWithoutConnectionIsGone(t *testing.T) {
	for _, loss := range heartbeatLosses {
		t.Run(loss.name, func(t *testing.T) {
			h := startRig(t, session.Config{})
			ctx := t.Context()
			if err := h.open(t, "gone", events.AcpOpenSessionRequest{}); err != nil {
				t.Fatal(err)
			}
			done := h.promptBounded("gone", "pause hb\nsay late")
			if err := testagent.WaitPaused(ctx, h.control, "hb"); err != nil {
				t.Fatal(err)
			}
			// The process runs on; its connection does not.
			h.waitDispatched(1)
			h.partitionRunner()
			kv, err := h.js.KeyValue(ctx, events.BucketRunners)
			if err != nil {
				t.Fatal(err)
			}
			if err := loss.lose(ctx, kv, "r1"); err != nil {
				t.Fatal(err)
			}
			if r := <-done; code(r.err) != events.CodeAdapterExited {
				t.Fatalf("prompt on a runner without a connection = %+v, %v, want %s", r.res, r.err, events.CodeAdapterExited)
			}
			if alive, gone := h.runnerChecks("alive"), h.runnerChecks("gone"); alive != 0 || gone != 1 {
				t.Errorf("runner checks: %v alive, %v gone; want none alive, 1 gone", alive, gone)
			}
			if err := testagent.Release(ctx, h.control, "hb"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A runner that starts again under the ID of one that lost its connection
// deletes the heartbeat that one left, and answers pings at once: it must
// not vouch for its predecessor's adapters. The running turn ends
// adapter_exited, and the next prompt is served by the new runner.
func TestRunnerStartedAgainDoesNotVouchForOldAdapters(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "again", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	done := h.promptBounded("again", "pause hb\nsay late")
	if err := testagent.WaitPaused(ctx, h.control, "hb"); err != nil {
		t.Fatal(err)
	}
	h.waitDispatched(1)
	h.partitionRunner()
	h.startRunner("r1")
	if r := <-done; code(r.err) != events.CodeAdapterExited {
		t.Fatalf("prompt on the runner that started again = %+v, %v, want %s", r.res, r.err, events.CodeAdapterExited)
	}
	if err := testagent.Release(ctx, h.control, "hb"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "again", "", "say back"); err != nil {
		t.Fatalf("prompt on the new runner: %v", err)
	}
}

// A runner cut off NATS whose heartbeat then expires on its own is gone
// once the marker of the expiry comes and its ping goes unanswered: the
// running turn ends adapter_exited. How long that took (the heartbeat's
// lifetime plus the check's two pings of 1.5 s, on an idle machine) is
// logged, not asserted: the bound on the wait is the test's, a turn that
// never ends.
func TestRunnerGoneWhenHeartbeatExpires(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a heartbeat's lifetime")
	}
	h := startRig(t, session.Config{})
	if err := h.open(t, "expires", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(t.Context(), "expires", "", "pause hb\nsay late")
	if err := testagent.WaitPaused(t.Context(), h.control, "hb"); err != nil {
		t.Fatal(err)
	}
	h.waitDispatched(1)
	cut := time.Now()
	h.partitionRunner()
	select {
	case r := <-done:
		if code(r.err) != events.CodeAdapterExited {
			t.Fatalf("prompt on a runner whose heartbeat expired = %+v, %v, want %s", r.res, r.err, events.CodeAdapterExited)
		}
		t.Logf("the turn ended adapter_exited %.1fs after the runner was cut off (heartbeat TTL %v)", time.Since(cut).Seconds(), streams.DefaultRunnerTTL)
	case <-time.After(4 * streams.DefaultRunnerTTL):
		t.Fatalf("the turn on a runner whose heartbeat expired never ended (waited %s)", 4*streams.DefaultRunnerTTL)
	}
	if gone := h.runnerChecks("gone"); gone != 1 {
		t.Errorf("runner checks gone = %v, want 1", gone)
	}
	if err := testagent.Release(t.Context(), h.control, "hb"); err != nil {
		t.Fatal(err)
	}
}
