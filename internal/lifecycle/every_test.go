package lifecycle_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"skein.dev/internal/lifecycle"
)

// Every calls f once a period, from the first period on, and returns when
// its context ends. On synctest's clock: the calls are counted exactly.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		calls := 0
		done := make(chan struct{})
		go func() {
			lifecycle.Every(ctx, time.Second, func() { calls++ })
			close(done)
		}()
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		if calls != 3 {
			t.Errorf("calls after 3.5 periods = %d, want 3", calls)
		}
		cancel()
		<-done
	})
}
