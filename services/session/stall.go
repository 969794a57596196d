package session

import (
	"context"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// A stall watchdog (issue 32 §5): a running turn whose agent has said
// nothing for Config.StallAfter, while no request of the session waits on
// a person, is stalled. The owner records it (TurnStall) where every
// viewer reads it: a stalled state change on the event stream, watch and
// history?include=state, status stalled in the session's state. The
// agent's next record, of any kind, resumes it: TurnStall again, not
// stalled, and status running. Nothing is done to the agent: a person, or
// a client that watches, decides.

// watchStall records the turn stalled once its agent has been silent for
// StallAfter. The sweep calls it while the turn runs; the caller holds
// sess.mu.
func (r *route) watchStall(ctx context.Context, now time.Time) {
	sess := r.sess
	t, after := sess.turn, sess.svc.cfg.StallAfter
	if t == nil || t.stalled || after <= 0 || !t.waiting.empty() || !sess.late.empty() {
		return
	}
	// Silent since its last record, the turn's acceptance, or (a turn
	// taken over) this owner's attachment, whichever came last.
	last := r.attachedAt
	for _, at := range []time.Time{r.arrived, t.acceptedAt} {
		if at.After(last) {
			last = at
		}
	}
	quiet := now.Sub(last)
	if quiet < after {
		return
	}
	if !r.recordStall(ctx, true, quiet) {
		return
	}
	sess.svc.m.stalls.Inc()
	sess.lg.Info("the turn's agent has been silent: stalled", events.LogKeyTurn, t.id, "quiet", quiet.Round(time.Second))
}

// resumeStalled records that a stalled turn's agent spoke again. The
// caller holds sess.mu.
func (r *route) resumeStalled(ctx context.Context) {
	if t := r.sess.turn; t != nil && t.stalled && r.sess.adapter == r {
		r.recordStall(ctx, false, time.Since(t.stalledAt))
	}
}

// recordStall appends the turn's TurnStall, stalled or resumed after
// quiet, and projects the state it gives. It reports whether the record
// was stored; one that was not is tried again by the next sweep or record.
func (r *route) recordStall(ctx context.Context, stalled bool, quiet time.Duration) bool {
	sess := r.sess
	t := sess.turn
	_, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogControl, Value: &events.TurnStall{Stalled: stalled, QuietMs: quiet.Milliseconds()}})
	if err != nil {
		sess.lg.Warn("record the turn's stall", "stalled", stalled, events.LogKeyErr, err)
		return false
	}
	if sess.turn != t {
		return false // the append failed the turn, or released the session
	}
	t.setStalled(sess.svc.m, stalled)
	sess.project(ctx)
	return true
}

// setStalled marks t stalled or not, keeping the gauge of stalled turns.
func (t *turn) setStalled(m *metrics, stalled bool) {
	if t.stalled == stalled {
		return
	}
	t.stalled = stalled
	if stalled {
		t.stalledAt = time.Now()
		m.stalledTurns.Inc()
	} else {
		m.stalledTurns.Dec()
	}
}
