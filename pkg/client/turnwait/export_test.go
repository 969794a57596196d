package turnwait

import "context"

// AwaitObserver reports the steps of the Await calls made with the
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
