package eventlog

import (
	"context"
	"sync/atomic"
)

// AwaitObserver reports the steps of the AwaitTurn calls made with the
// context ObserveAwait returned.
type AwaitObserver struct {
	// FirstRead receives once a wait is subscribed and has read the log:
	// a record appended after that can only arrive live (or by a re-read).
	FirstRead chan struct{}
	// Found receives how each wait found its end: "read" or "live".
	Found chan string
}

// ObserveAwait returns ctx carrying an AwaitObserver for the waits made
// with it.
func ObserveAwait(ctx context.Context) (context.Context, *AwaitObserver) {
	o := &AwaitObserver{FirstRead: make(chan struct{}, 64), Found: make(chan string, 64)}
	return withTrace(ctx, &trace{
		awaitFirstRead: func() { o.FirstRead <- struct{}{} },
		awaitFound:     func(how string) { o.Found <- how },
	}), o
}

// StepBack is the backward read that steps one direct get per record, the
// baseline of BenchmarkHistoryDepth's backward pages.
var StepBack = stepBack

// CountReads returns ctx counting, for the reads made with it, the
// backward reads of event-numbered records that fell back to stepping
// (the log changed under the search, or it failed) and locate's
// single-record probes. Either counter may be nil.
func CountReads(ctx context.Context, stepBacks, probes *atomic.Int64) context.Context {
	t := &trace{}
	if stepBacks != nil {
		t.stepBack = func() { stepBacks.Add(1) }
	}
	if probes != nil {
		t.probe = func() { probes.Add(1) }
	}
	return withTrace(ctx, t)
}

// ObserveAppendRetries returns ctx whose appends send on the channel once
// before each retry.
func ObserveAppendRetries(ctx context.Context) (context.Context, <-chan struct{}) {
	ch := make(chan struct{}, 64)
	return withTrace(ctx, &trace{appendRetry: func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}}), ch
}
