package session

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// A runner that lost its heartbeat and answers no ping, but whose output
// keeps arriving, is not gone: on a machine whose cores are all busy a
// runner moving to another node answers late while its adapters stream.
// Once its output stops too, the next check finds it gone. The runner
// here is only a name whose instance nobody serves, and its output only
// what onTail would note.
func TestRunnerHeardFromIsNotGone(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	reg := prometheus.NewRegistry()
	gone := make(chan events.RunnerID, 1)
	var bg sync.WaitGroup
	var heard heardFrom
	d := &runnerDirectory{nc: nc, lg: slog.New(slog.DiscardHandler), bg: &bg,
		runners: map[string]*events.RunnerInfo{}, instances: map[string]string{"r9": "no-such-instance"},
		learning: map[string]bool{}, checking: map[string]bool{"r9": true},
		gone: func(_ context.Context, id events.RunnerID) { gone <- id }, heard: &heard, checks: newRunnerChecks(reg)}
	ctx, cancel := context.WithCancel(t.Context())
	defer func() {
		cancel()
		bg.Wait()
	}()

	// Its output arrives, a record every 100 ms, until stopped.
	streaming, stop := context.WithCancel(ctx)
	bg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			heard.note("r9", time.Now())
			select {
			case <-streaming.Done():
				return
			case <-tick.C:
			}
		}
	})
	bg.Go(func() { d.checkRunner(ctx, "r9") })

	// A whole check of unanswered pings passes: the runner is alive.
	if err := testutil.Poll(ctx, "a check that finds the runner alive", func() (bool, error) {
		return testutil.Metric(t, reg, "acp_session_runner_checks_total", "verdict", verdictAlive) >= 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-gone:
		t.Fatalf("runner %s counted gone while its output arrived", id)
	default:
	}
	stop()
	select {
	case id := <-gone:
		if id != "r9" {
			t.Errorf("gone: %s, want r9", id)
		}
	case <-time.After(testutil.PollTimeout):
		t.Fatal("a runner silent and unanswering was never counted gone")
	}
}
