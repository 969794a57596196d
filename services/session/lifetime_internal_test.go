package session

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A timer's work runs at its time with the lifetime's context; stop ends
// that context, waits for the work running, and lets no timer start more.
// On synctest's clock: the grace of a cancelled turn and the wait for
// missing ACP_IO records are timers of this kind.
func TestLifetimeTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLifetime(t.Context())
		start := time.Now()
		fired := make(chan time.Duration, 1)
		l.afterFunc(300*time.Millisecond, func(ctx context.Context) {
			if ctx.Err() != nil {
				t.Error("a timer's work got an ended context before stop")
			}
			fired <- time.Since(start)
		})
		if took := <-fired; took != 300*time.Millisecond {
			t.Errorf("the timer's work ran after %v, want 300ms", took)
		}

		// Work running when stop is called: stop waits for it, and its
		// context ends first so that it can.
		entered := make(chan struct{})
		l.afterFunc(time.Second, func(ctx context.Context) {
			close(entered)
			<-ctx.Done()
			time.Sleep(time.Second) // cleaning up after the end
		})
		late := l.afterFunc(time.Hour, func(context.Context) { t.Error("a timer's work ran after stop") })
		<-entered
		stopAt := time.Now()
		l.stop()
		if took := time.Since(stopAt); took != time.Second {
			t.Errorf("stop returned after %v, want 1s: when the running work ended", took)
		}
		if l.context().Err() == nil {
			t.Error("the lifetime's context outlived stop")
		}
		// The timer still fires; its work does not run.
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		late.Stop()
	})
}
