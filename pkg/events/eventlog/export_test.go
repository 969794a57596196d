package eventlog

import "testing"

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
