package session

import (
	"context"
	"time"

	"skein.dev/pkg/events"
)

// Answers owed to an edge runner's adapter. A permission request of an
// adapter on an edge runner (skein runner --join) stays answerable while
// the runner's link to the cluster is down: the answer cannot reach the
// adapter now, but the request is still pending there, the adapter still
// waiting. So an answer whose delivery to an edge runner fails is
// recorded as given (the log is the truth: the request is answered) and
// owed: it is sent again every owedRetry, and at once when the runner's
// heartbeat is back (edgeBack), until the runner takes it or the adapter
// is gone (the route ends; its turn ends with it). The runner answers the
// adapter's request once, whatever the copies.

// owedRetry is how often an owed answer is sent again.
const owedRetry = 2 * time.Second

// owedAnswer is a permission request's answer not yet delivered.
type owedAnswer struct {
	requestID string
	optionID  *string
}

// owe keeps the answer to requestID for r's adapter, to send again. The
// caller holds the session's lock.
func (r *route) owe(requestID string, optionID *string) {
	r.owed = append(r.owed, owedAnswer{requestID: requestID, optionID: optionID})
	r.sess.lg.Warn("the answer to a permission request could not reach the edge runner: it is recorded, and sent again until the runner takes it",
		events.LogKeyRunner, string(r.runner), "request_id", requestID)
	if len(r.owed) == 1 {
		r.retryOwed()
	}
}

// retryOwed sends r's owed answers again after owedRetry, and again after
// that while some are still owed and r is its session's route.
func (r *route) retryOwed() {
	sess := r.sess
	sess.svc.life.afterFunc(owedRetry, func(ctx context.Context) {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		if sess.adapter != r || len(r.owed) == 0 {
			return
		}
		if r.payOwed(ctx) {
			r.retryOwed()
		}
	})
}

// payOwed sends r's owed answers, in order, and reports whether some are
// still owed. An answer the runner refuses is paid too: it had an
// earlier copy (held in the link while it was down), or the adapter's
// request is gone. The caller holds the session's lock.
func (r *route) payOwed(ctx context.Context) bool {
	for len(r.owed) > 0 {
		a := r.owed[0]
		if err := r.sess.answer(ctx, r, a.requestID, a.optionID); err != nil {
			if code := events.AsError(err).Code; code == events.CodeUnavailable || code == events.CodeTimeout {
				return true // the link is still down
			}
		}
		r.sess.lg.Info("an owed answer reached the edge runner", events.LogKeyRunner, string(r.runner), "request_id", a.requestID)
		r.owed = r.owed[1:]
	}
	return false
}

// edgeBack sends, at once, the answers owed to the adapters of edge
// runner id, whose heartbeat is back.
func (s *Service) edgeBack(ctx context.Context, id events.RunnerID) {
	for _, sess := range s.loaded() {
		sess.mu.Lock()
		if r := sess.adapter; r != nil && r.runner == id && len(r.owed) > 0 {
			r.payOwed(ctx)
		}
		sess.mu.Unlock()
	}
}
