package session

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/sessionstate"
)

// project writes the ACP_SESSIONS projection. It is best effort: the log is
// the truth and the projection is rebuilt from it. Only the owner writes
// it, and only while its appends succeed (a failed append releases the
// session: nothing more is projected). The write is conditional on the
// revision this replica last read or wrote (metaRev; 0 means nothing may be
// there, not even a delete marker), so that a write landing after the
// session's deletion, or from an owner that was replaced, never brings a
// deleted session back or overwrites a newer projection. On a conflict the
// entry is read again:
//
//   - it exists: written over only when it reflects an older log position;
//   - it was deleted after this replica read it: left deleted;
//   - a delete marker was there before this replica ever projected: left
//     deleted, unless the log still ends with this replica's own last
//     append (then the marker is an earlier deletion's, before this
//     session was reopened here; a later deletion's tombstone would have
//     moved the log past it).
func (sess *session) project(ctx context.Context) {
	if sess.opened == nil {
		return
	}
	if sess.lease.Load() == 0 {
		sess.svc.m.projectionSkips.WithLabelValues("not_owner").Inc()
		return // released (an append failed, or the lease went)
	}
	m := sess.projection()
	data, err := events.Marshal(&m)
	if err != nil {
		sess.svc.m.projectionSkips.WithLabelValues("failed").Inc()
		sess.lg.Warn("encode session projection", events.LogKeyErr, err)
		return
	}
	kv, key := sess.svc.meta, sess.key()
	for range 3 {
		rev, uerr := kv.Update(ctx, key, data, sess.metaRev)
		if uerr == nil {
			sess.metaRev, sess.projectionStale = rev, false
			return
		}
		if err = uerr; !errors.Is(err, jetstream.ErrKeyExists) {
			break
		}
		e, gerr := kv.Get(ctx, key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound), errors.Is(gerr, jetstream.ErrKeyDeleted):
			marker, ok := sess.overwritableMarker(ctx)
			if !ok {
				sess.svc.m.projectionSkips.WithLabelValues("deleted").Inc()
				sess.lg.Info("session projection was deleted; not writing it back")
				return
			}
			sess.metaRev = marker
			continue
		case gerr != nil:
			err = gerr
		default:
			if have, derr := events.Decode[events.SessionMeta](e.Value()); derr == nil && have.LogPosition >= m.LogPosition {
				sess.metaRev = e.Revision()
				sess.svc.m.projectionSkips.WithLabelValues("newer").Inc()
				return // as new as this one, or newer
			}
			sess.metaRev = e.Revision()
			continue
		}
		break
	}
	sess.svc.m.projectionSkips.WithLabelValues("failed").Inc()
	sess.lg.Warn("write session projection", events.LogKeyErr, err)
	// Written again by the sweep, not only at the session's next change:
	// a turn waiting on a person changes nothing until someone answers,
	// and who answers learns of the request from the projection.
	sess.projectionStale = true
}

// overwritableMarker returns the revision of the delete marker on the
// session's projection when this replica may write over it: it never
// projected over the marker's deletion (metaRev 0), and the log still ends
// with this replica's own last append, so no deletion came after its writes.
func (sess *session) overwritableMarker(ctx context.Context) (uint64, bool) {
	if sess.metaRev != 0 {
		return 0, false // deleted after this replica read or wrote it
	}
	js := sess.svc.js
	last, err := eventlog.Last(ctx, js, events.StreamLog, events.LogFilter(sess.ns, sess.sid))
	if err != nil || last == nil || last.Sequence != sess.w.Position().LastSeq {
		return 0, false
	}
	marker, err := eventlog.Last(ctx, js, events.KVStream(events.BucketSessions), events.KVSubject(events.BucketSessions, sess.key()))
	if err != nil || marker == nil {
		return 0, false
	}
	return marker.Sequence, true
}

// projection is the session's ACP_SESSIONS entry now.
func (sess *session) projection() events.SessionMeta {
	state := events.SessionState{Status: sess.status()}
	lists := []*waiting{&sess.late}
	if sess.turn != nil {
		state.TurnID = sess.turn.id
		lists = append(lists, &sess.turn.waiting)
	}
	for _, w := range lists {
		for _, p := range w.perms {
			state.Requests = append(state.Requests, events.PendingPermission{RequestID: p.id, Request: p.request})
		}
		for _, in := range w.inputs {
			state.Inputs = append(state.Inputs, events.PendingInput{RequestID: in.id, Request: in.request})
		}
	}
	if sess.failure != nil && sess.turn == nil {
		state.Error = &events.StateError{Code: sess.failure.Code, Message: sess.failure.Message}
	}
	stateJSON, err := state.Encode()
	if err != nil {
		// A pending request's JSON is what the runner checked as ACP: only
		// a bug gets here. The status alone still says what matters.
		sess.lg.Error("encode session state", events.LogKeyErr, err)
		stateJSON, _ = (&events.SessionState{Status: state.Status, TurnID: state.TurnID}).Encode()
	}
	dirs := sess.opened.AdditionalDirectories
	if len(dirs) == 0 {
		dirs = events.JSON("[]")
	}
	m := sess.meta
	m.Namespace = string(sess.ns)
	m.PermissionPolicy = sess.opened.PermissionPolicy
	m.LogPosition = sess.w.Position().LastSeq
	m.Hosted = sess.adapter != nil
	m.Info = events.AcpDurableSessionInfo{
		SessionID:             string(sess.sid),
		Agent:                 sess.opened.Agent,
		Cwd:                   sess.opened.Cwd,
		AdditionalDirectories: dirs,
		State:                 stateJSON,
		LatestSequence:        sess.w.Position().LastEventSeq,
		CreatedAt:             sess.createdAt.UTC().Format(events.TimestampFormat),
		UpdatedAt:             sess.updatedAt.UTC().Format(events.TimestampFormat),
		Runner:                sess.opened.Runner,
		CreatedBy:             sess.opened.CreatedBy,
	}
	if sess.title != "" {
		m.Info.Title = new(sess.title)
	}
	// The cached usage and last turn's timing are kept in sess.meta's
	// info (offers.go), as the projection last read or written had them.
	m.Info.Usage, m.Info.LastTurnTiming = sess.meta.Info.Usage, sess.meta.Info.LastTurnTiming
	m.Info.Queue, m.Info.QueueHeld = sess.prompts.list(), sess.prompts.held
	m.Info.Budget = sess.budget.Info()
	return m
}

// status is the session state derived from the log: waiting while a
// request of the agent waits for a person's answer (a turn's, or one
// raised outside any turn), stalled while the open turn's agent is silent
// (stall.go), running while a turn is open, failed after a failed turn,
// idle otherwise.
func (sess *session) status() events.SessionStatus {
	return sessionstate.Facts{
		TurnOpen:   sess.turn != nil,
		Waiting:    !sess.late.empty() || sess.turn != nil && !sess.turn.waiting.empty(),
		LastFailed: sess.failure != nil,
		Stalled:    sess.turn != nil && sess.turn.stalled,
	}.Status()
}
