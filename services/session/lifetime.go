package session

import (
	"context"
	"time"

	"skein.dev/internal/lifecycle"
)

// lifetime is one Run of the service, lent to the work that has no context
// of its own: the callbacks NATS calls (the live tail of a session's
// ACP_IO) and the timers the service sets (a cancelled turn's grace, the
// wait for missing ACP_IO records). Everything else gets its context passed
// down from Run or from the request it serves.
//
// STYLE R12 keeps contexts out of structs; this is the one place the
// service holds one, and the reason is the exception R12 names: the
// context is scoped to the lifetime of the work it is handed to. It ends
// when Run stops, after the requests in flight have returned, and the
// callbacks' and timers' work is counted so that Run waits for it.
type lifetime struct {
	ctx context.Context
	end context.CancelFunc

	// work is the callbacks' and timers' work running; stop closes it.
	work lifecycle.Group
}

// newLifetime returns the lifetime of a Run given ctx: its values, and a
// cancellation of its own (stop), since the service outlives ctx's end by
// its drain.
func newLifetime(ctx context.Context) *lifetime {
	lctx, end := context.WithCancel(context.WithoutCancel(ctx))
	return &lifetime{ctx: lctx, end: end}
}

// context returns the context of a callback that has none of its own. It
// ends when the service stops.
func (l *lifetime) context() context.Context { return l.ctx }

// do calls f with the lifetime's context, as work stop waits for, unless
// the service has stopped: a callback's work then has no one to do it for.
func (l *lifetime) do(f func(context.Context)) {
	l.work.Do(func() { f(l.ctx) })
}

// afterFunc calls f after d in its own goroutine, as do does. Stop the
// timer as usual when f is no longer due.
func (l *lifetime) afterFunc(d time.Duration, f func(context.Context)) *time.Timer {
	return time.AfterFunc(d, func() { l.do(f) })
}

// stop ends the lifetime's context, starts no more timer work and waits
// for the work running.
func (l *lifetime) stop() {
	l.end()
	l.work.Close()
}
