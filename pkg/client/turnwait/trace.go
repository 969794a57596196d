package turnwait

import "context"

// trace observes steps of a wait that its result does not show: that it
// has subscribed and read the log, and how it found its end. Tests use it
// to prove the path a wait took (export_test.go installs one). In the
// manner of net/http/httptrace it rides on the context of the call it
// observes, so that no package state is shared between calls, and a call
// without one pays a context lookup and nothing more.
type trace struct {
	awaitFirstRead func()           // a wait is subscribed and has read the log
	awaitFound     func(how string) // how a wait found its end: foundByRead, foundLive
}

type traceKey struct{}

// withTrace returns ctx carrying t.
func withTrace(ctx context.Context, t *trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// traceOf returns the trace ctx carries, or nil. Its methods accept nil.
func traceOf(ctx context.Context) *trace {
	t, _ := ctx.Value(traceKey{}).(*trace)
	return t
}

func (t *trace) onAwaitFirstRead() {
	if t != nil && t.awaitFirstRead != nil {
		t.awaitFirstRead()
	}
}

func (t *trace) onAwaitFound(how string) {
	if t != nil && t.awaitFound != nil {
		t.awaitFound(how)
	}
}
