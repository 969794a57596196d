package gateway

import "testing"

// OnStreamSubscribed makes every event stream call fn once it is
// subscribed and before it reads history, until the test ends. Tests that
// use it must not run in parallel.
func OnStreamSubscribed(tb testing.TB, fn func()) {
	streamSubscribed = fn
	tb.Cleanup(func() { streamSubscribed = nil })
}
