package session

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/storewatch"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// A full store. When JetStream's store is at its limit, every append is
// refused (events.CodeStorageFull, eventlog.StorageFull): the prompt or
// open that asked answers storage_full, and nothing is recorded. A turn
// already running cannot record its output, nor, in the end, the
// TurnFinished that closes it, and whoever waits for that record would
// wait as long as the store stays full. So the owner ends such a turn at
// once: outcome failed, error storage_full, the agent sent session/cancel
// (abortTurn). The TurnFinished it could not append is held (heldEnd):
// the session is in stateEndHeld, and the held record goes first of
// anything the session appends next, every storeRetry meanwhile, and
// before a prompt is considered. Until it is stored, the owner publishes
// TurnEndUnrecorded on events.EndNoticeSubject at each try, which a
// caller waiting for the turn's end takes as that end (package turnwait).
// When this replica loses the session meanwhile (its lease, a conflict),
// the held record goes with it, and the next owner closes the turn it
// finds open in the log, as it closes any other.

// storeQuiet is how long a running turn may hear nothing of its agent,
// since it was accepted, while the store refuses writes, before its owner
// ends it (the sweep, turn.starving). A turn waiting for a person's answer is not
// starved: it waits, and the answer, which the full store refuses, can be
// given again once it takes writes.
const storeQuiet = 5 * time.Second

// starving reports whether turn t, running on route r, has heard
// nothing of its agent for storeQuiet, since it was accepted, and waits
// for no person's answer. Such a turn, while the store refuses writes,
// most likely has its output held by its runner, which cannot store it in
// ACP_IO (the runner keeps what it could not store and sends it again
// until the store takes it, iowindow.go, so the agent's pipe fills and it
// blocks): nothing would end it before the store took writes again. Its
// owner ends it (the sweep) as a turn whose output it could not store:
// storage_full. The caller holds the session's lock.
func (t *turn) starving(r *route, now time.Time) bool {
	return t != nil && r != nil && t.waiting.empty() &&
		now.Sub(t.acceptedAt) >= storeQuiet && now.Sub(r.arrived) >= storeQuiet
}

// errStarved is the failure of a turn its owner ended as starving.
var errStarved = events.Errorf(events.CodeStorageFull,
	"the NATS store refuses writes: the agent's output cannot be stored; free space, or raise JetStream's store limit")

// storeRetry is how often an owner holding a turn's end tries to store
// it, and tells the turn's waiters that it ended.
const storeRetry = 2 * time.Second

// heldEnd is the TurnFinished of a turn that ended while the store
// refused writes, with what its storing completes (endTurn's bookkeeping).
type heldEnd struct {
	t          *turn
	entry      eventlog.Entry
	rec        *events.TurnFinished
	outcome    string
	stopReason string
	failure    *events.Error
	timer      *time.Timer
}

// isStorageFull reports whether err is an append or write the full store
// refused.
func isStorageFull(err error) bool {
	return err != nil && events.AsError(err).Code == events.CodeStorageFull
}

// hold keeps t's end, which the store refused: the turn is over on this
// replica, and its record waits for the store. The caller holds sess.mu.
func (sess *session) hold(ctx context.Context, t *turn, entry eventlog.Entry, rec *events.TurnFinished, outcome, stopReason string, failure *events.Error) {
	h := &heldEnd{t: t, entry: entry, rec: rec, outcome: outcome, stopReason: stopReason, failure: failure}
	sess.held = h
	t.setStalled(sess.svc.m, false)
	sess.turn = nil
	sess.pending = nil
	sess.moved(onHold)
	sess.svc.m.heldEnds.Inc()
	sess.lg.Warn("the store refuses writes: the turn ended, its end held until the store takes it",
		events.LogKeyTurn, t.id, "outcome", outcome)
	h.announce(sess)
	h.retry(sess)
}

// retry tries to store h after storeRetry, and again after each failure,
// while h is sess's held end.
func (h *heldEnd) retry(sess *session) {
	h.timer = sess.svc.life.afterFunc(storeRetry, func(ctx context.Context) {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		if sess.held != h {
			return
		}
		if err := sess.storeHeld(ctx); err != nil && sess.held == h {
			h.announce(sess)
			h.retry(sess)
		}
	})
}

// storeHeld appends the held end, if any, and completes the turn's end.
// It fails as the append does; a conflict releases the session (wrote),
// and the held end with it. The caller holds sess.mu.
func (sess *session) storeHeld(ctx context.Context) error {
	h := sess.held
	if h == nil {
		return nil
	}
	if _, err := sess.write(ctx, []eventlog.Entry{h.entry}); err != nil {
		return err
	}
	h.drop(sess)
	sess.finished(ctx, h.t, h.rec, h.outcome, h.stopReason, h.failure)
	sess.lg.Info("the store takes writes again: the held end of a turn is stored", events.LogKeyTurn, h.t.id)
	return nil
}

// drop forgets h, sess's held end (h may be nil: none): stored, or left
// to the next owner.
func (h *heldEnd) drop(sess *session) {
	if h != nil {
		h.timer.Stop()
		sess.held = nil
		sess.svc.m.heldEnds.Dec()
	}
}

// announce tells the waiters of h's turn, of sess, that it ended, and
// how.
func (h *heldEnd) announce(sess *session) {
	v := &events.TurnEndUnrecorded{SessionID: string(sess.sid), TurnID: h.t.id, Outcome: h.outcome}
	if h.failure != nil {
		v.Error = h.failure.Response()
	}
	data, err := events.Marshal(v)
	if err == nil {
		err = sess.svc.nc.PublishMsg(&nats.Msg{
			Subject: events.EndNoticeSubject(sess.ns, sess.sid),
			Header:  nats.Header{events.HeaderRecord: []string{v.VariantName()}},
			Data:    data,
		})
	}
	if err != nil {
		sess.svc.m.livePublishErrors.Inc()
		sess.lg.Warn("publish a turn's unrecorded end", events.LogKeyTurn, h.t.id, events.LogKeyErr, err)
	}
}

// refuseIfFull is storage_full while the store refuses writes
// (storewatch: a write refused in the last storewatch.RefusalFor, or the
// account at its limit), for what delivers something to the agent before
// it records it: an answer to a request.
func (s *Service) refuseIfFull(ctx context.Context) error {
	if _, full := s.store.FullNow(ctx, storewatch.Headroom); full {
		return events.Errorf(events.CodeStorageFull, "the NATS store refuses writes: the answer cannot be recorded; free space, or raise JetStream's store limit")
	}
	return nil
}

// storageFullFailure is the failure of a turn whose output the store
// refused.
func storageFullFailure(err error) *events.Error {
	return events.Errorf(events.CodeStorageFull, "the agent's output could not be stored: %s", events.AsError(err).Message)
}
