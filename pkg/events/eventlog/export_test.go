package eventlog

import (
	"context"
	"sync/atomic"
)

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
