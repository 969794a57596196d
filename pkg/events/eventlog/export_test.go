package eventlog

import (
	"sync/atomic"
	"testing"
)

// AwaitObserver reports the steps of the AwaitTurn calls of one test.
type AwaitObserver struct {
	// FirstRead receives once a wait is subscribed and has read the log:
	// a record appended after that can only arrive live (or by a re-read).
	FirstRead chan struct{}
	// Found receives how each wait found its end: "read" or "live".
	Found chan string
}

// ObserveAwait installs an AwaitObserver until the test ends. Tests that
// use it must not run in parallel.
func ObserveAwait(tb testing.TB) *AwaitObserver {
	o := &AwaitObserver{FirstRead: make(chan struct{}, 64), Found: make(chan string, 64)}
	awaitFirstRead = func() { o.FirstRead <- struct{}{} }
	awaitFound = func(how string) { o.Found <- how }
	tb.Cleanup(func() { awaitFirstRead, awaitFound = nil, nil })
	return o
}

// StepBack is the backward read that steps one direct get per record, the
// baseline of BenchmarkHistoryDepth's backward pages.
var StepBack = stepBack

// StepBacks counts the backward reads of event-numbered records that fell
// back to stepping (the log changed under the search, or it failed).
var StepBacks atomic.Int64

// Probes counts locate's single-record probes.
var Probes atomic.Int64

func init() {
	stepBackHook = func() { StepBacks.Add(1) }
	probeHook = func() { Probes.Add(1) }
}

// ObserveAppendRetries receives once before each retry of an append,
// until the test ends. Tests that use it must not run in parallel.
func ObserveAppendRetries(tb testing.TB) <-chan struct{} {
	ch := make(chan struct{}, 64)
	appendRetryHook = func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	tb.Cleanup(func() { appendRetryHook = nil })
	return ch
}
