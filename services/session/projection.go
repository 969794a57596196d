package session

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"skein.dev/pkg/events"
)

// project writes the ACP_SESSIONS projection. It is best effort: the log is
// the truth and the projection is rebuilt from it. The write is
// conditional on the revision this replica last read or wrote (metaRev), so
// that a write landing after the session's deletion, or from an owner that
// was replaced, never brings a deleted session back or overwrites a newer
// projection: on a conflict the entry is read again, and written only when
// it still exists and reflects an older log position than this one.
func (sess *session) project(ctx context.Context) {
	if sess.opened == nil {
		return
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
		var rev uint64
		if sess.metaRev == 0 {
			rev, err = kv.Create(ctx, key, data)
		} else {
			rev, err = kv.Update(ctx, key, data, sess.metaRev)
		}
		if err == nil {
			sess.metaRev = rev
			return
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			break
		}
		// Someone else wrote it since: read what is there now.
		e, gerr := kv.Get(ctx, key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound), errors.Is(gerr, jetstream.ErrKeyDeleted):
			// Deleted after this replica read it: the session is gone, or
			// going; only a new SessionOpened (metaRev 0) projects it anew.
			sess.svc.m.projectionSkips.WithLabelValues("deleted").Inc()
			sess.lg.Info("session projection was deleted; not writing it back")
			return
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
}

// projection is the session's ACP_SESSIONS entry now.
func (sess *session) projection() events.SessionMeta {
	state := events.SessionState{Status: sess.status()}
	if sess.turn != nil {
		state.TurnID = sess.turn.id
		for _, p := range sess.turn.perms {
			state.Requests = append(state.Requests, events.PendingPermission{RequestID: p.id, Request: p.request})
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
	m.Info = events.AcpDurableSessionInfo{
		SessionID:             string(sess.sid),
		Agent:                 sess.opened.Agent,
		Cwd:                   sess.opened.Cwd,
		AdditionalDirectories: dirs,
		State:                 stateJSON,
		LatestSequence:        m.LogPosition,
		CreatedAt:             sess.createdAt.UTC().Format(events.TimestampFormat),
		UpdatedAt:             sess.updatedAt.UTC().Format(events.TimestampFormat),
	}
	return m
}

// status is the session state derived from the log: waiting while a turn
// waits for permission answers, running while a turn is open, failed after
// a failed turn, idle otherwise.
func (sess *session) status() events.SessionStatus {
	switch {
	case sess.turn != nil && len(sess.turn.perms) > 0:
		return events.StatusWaiting
	case sess.turn != nil:
		return events.StatusRunning
	case sess.failure != nil:
		return events.StatusFailed
	default:
		return events.StatusIdle
	}
}
