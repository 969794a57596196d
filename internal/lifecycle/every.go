package lifecycle

import (
	"context"
	"time"
)

// Every calls f every d until ctx is done, in the caller's goroutine:
// periodic work (a sweep, a check) runs as part of its owner's lifetime.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}
