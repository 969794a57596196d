package session

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"skein.dev/pkg/events"
)

// unanswered is a runner that never answers a ping: nobody subscribes to
// its instance's subject.
type unanswered struct{}

func (unanswered) ping(context.Context, string, string) (string, error) {
	return "", nats.ErrNoResponders
}
func (unanswered) connected() bool { return true }

// A runner that lost its heartbeat and answers no ping, but whose output
// keeps arriving, is not gone: on a machine whose cores are all busy a
// runner moving to another node answers late while its adapters stream.
// Once its output stops too, the next check finds it gone. The runner
// here is only a name that never answers, and its output only what onTail
// would note. The check runs on synctest's clock, so that a loaded machine
// cannot stretch the output's pauses past a check.
func TestRunnerHeardFromIsNotGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checks := newRunnerChecks(prometheus.NewRegistry())
		gone := make(chan events.RunnerID, 1)
		var bg sync.WaitGroup
		var heard heardFrom
		d := &runnerDirectory{pinger: unanswered{}, lg: slog.New(slog.DiscardHandler), bg: &bg,
			runners: map[string]*events.RunnerInfo{}, instances: map[string]string{"r9": "no-such-instance"},
			learning: map[string]bool{}, checking: map[string]bool{"r9": true},
			gone: func(_ context.Context, id events.RunnerID) { gone <- id }, heard: &heard, checks: checks}
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
		start := time.Now()
		bg.Go(func() { d.checkRunner(ctx, "r9") })

		// Three checks of unanswered pings pass: the runner is alive each
		// time. A check is two pings and the wait before the next one.
		check := runnerPingAttempts * runnerPingWait
		time.Sleep(3*check + 2*runnerRecheck)
		synctest.Wait()
		if got := testutil.ToFloat64(checks.WithLabelValues(verdictAlive)); got != 3 {
			t.Errorf("checks that found the runner alive = %v, want 3", got)
		}
		select {
		case id := <-gone:
			t.Fatalf("runner %s counted gone while its output arrived", id)
		default:
		}

		// The output stops during the next recheck wait: the check after
		// it finds the runner gone, at its end.
		stop()
		if id := <-gone; id != "r9" {
			t.Errorf("gone: %s, want r9", id)
		}
		if took, want := time.Since(start), 4*check+3*runnerRecheck; took != want {
			t.Errorf("the runner was found gone after %v, want %v: at the end of the first check after its output stopped", took, want)
		}
		if got := testutil.ToFloat64(checks.WithLabelValues(verdictGone)); got != 1 {
			t.Errorf("checks that found the runner gone = %v, want 1", got)
		}
	})
}

// A replica whose own writes go unacknowledged (cut off from the majority)
// gives no verdict on a runner that does not answer: from behind a
// partition, every runner falls silent. Once its writes are acknowledged
// again, the next check finds the runner gone. Found by
// TestClusterPartitions: a session service on a partitioned node ended a
// working adapter's turn adapter_exited.
func TestRunnerNotJudgedFromBehindAPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checks := newRunnerChecks(prometheus.NewRegistry())
		gone := make(chan events.RunnerID, 1)
		var bg sync.WaitGroup
		var quorate atomic.Bool
		d := &runnerDirectory{pinger: unanswered{}, lg: slog.New(slog.DiscardHandler), bg: &bg,
			runners: map[string]*events.RunnerInfo{}, instances: map[string]string{"r9": "no-such-instance"},
			learning: map[string]bool{}, checking: map[string]bool{"r9": true},
			gone:   func(_ context.Context, id events.RunnerID) { gone <- id },
			judges: func(time.Time) bool { return quorate.Load() }, checks: checks}
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			bg.Wait()
		}()
		bg.Go(func() { d.checkRunner(ctx, "r9") })

		check := runnerPingAttempts * runnerPingWait
		time.Sleep(3 * (check + runnerRecheck))
		synctest.Wait()
		select {
		case id := <-gone:
			t.Fatalf("runner %s counted gone by a replica whose writes are not acknowledged", id)
		default:
		}
		if got := testutil.ToFloat64(checks.WithLabelValues(verdictGone)); got != 0 {
			t.Errorf("checks that found the runner gone = %v, want 0", got)
		}

		quorate.Store(true)
		if id := <-gone; id != "r9" {
			t.Errorf("gone: %s, want r9", id)
		}
	})
}
