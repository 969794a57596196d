package eventlog

import "context"

// trace observes steps of this package's reads and appends that their
// results do not show: a backward read that fell back to stepping, a
// retried append. Tests use it to prove the
// path a call took (export_test.go installs one). In the manner of
// net/http/httptrace it rides on the context of the call it observes, so
// that no package state is shared between calls, and a call without one
// pays a context lookup and nothing more.
type trace struct {
	stepBack    func() // Backward fell back to stepping record by record
	probe       func() // locate made one probe
	appendRetry func() // an append is about to be sent again
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

func (t *trace) onStepBack() {
	if t != nil && t.stepBack != nil {
		t.stepBack()
	}
}

func (t *trace) onProbe() {
	if t != nil && t.probe != nil {
		t.probe()
	}
}

func (t *trace) onAppendRetry() {
	if t != nil && t.appendRetry != nil {
		t.appendRetry()
	}
}
