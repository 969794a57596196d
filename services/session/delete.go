package session

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// delete removes the session: the runtime first (the running turn is
// cancelled and its pending permission requests end session_deleted, the
// adapter stops), then the tombstone, then history and metadata. The
// tombstone (SessionDeleted, appended with the usual compare-and-set) stays
// as the session's only record, so a stale writer's next append fails
// instead of resurrecting it; reopening the ID starts a new, empty session
// after it. Deleting a missing session does nothing.
func (sess *session) delete(ctx context.Context) error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.deleteLocked(ctx)
}

// deleteLocked is delete for a caller that holds sess.mu (discard, which
// decides under it).
func (sess *session) deleteLocked(ctx context.Context) error {
	if err := sess.load(ctx); err != nil {
		return err
	}
	if sess.opened == nil {
		return nil
	}
	if sess.turn != nil {
		sess.abortTurnWith(ctx, ioPos{}, events.OutcomeCancelled, nil, events.ReasonSessionDeleted)
	}
	if r := sess.adapter; r != nil {
		sess.stopAdapter(ctx, r)
	}
	sess.releaseUploads(ctx)
	out, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionDeleted{Reason: events.DeleteRequested}})
	if err != nil {
		return err
	}
	tombstone := out[0].Seq
	js := sess.svc.js
	log, err := js.Stream(ctx, events.StreamLog)
	if err != nil {
		return events.Errorf(events.CodeUnavailable, "delete %s: %v", sess.sid, err)
	}
	purges := []struct {
		stream  jetstream.Stream
		subject string
		keep    uint64
	}{
		{log, events.LogSubject(sess.ns, sess.sid, events.LogEvents), 0},
		{log, keySubjects(sess.ns, sess.sid), 0},
		{log, events.TitleSubject(sess.ns, sess.sid), 0},
		{log, events.OpenedSubject(sess.ns, sess.sid), 0},
		{log, events.LogSubject(sess.ns, sess.sid, events.LogControl), 1},
	}
	if io, err := js.Stream(ctx, events.StreamIO); err == nil {
		purges = append(purges, struct {
			stream  jetstream.Stream
			subject string
			keep    uint64
		}{io, events.IOSubject(sess.ns, sess.sid), 0})
	}
	for _, p := range purges {
		opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(p.subject)}
		if p.keep > 0 {
			opts = append(opts, jetstream.WithPurgeKeep(p.keep))
		}
		if err := p.stream.Purge(ctx, opts...); err != nil {
			return events.Errorf(events.CodeUnavailable, "delete %s: purge %s: %v", sess.sid, p.subject, err)
		}
	}
	if err := sess.svc.meta.Delete(ctx, events.SessionKey(sess.ns, sess.sid)); err != nil {
		return events.Errorf(events.CodeUnavailable, "delete %s: metadata: %v", sess.sid, err)
	}
	// Forget everything but where the log ends and how requests ended.
	sess.opened, sess.meta, sess.metaRev, sess.failure, sess.last, sess.preamble = nil, events.SessionMeta{}, 0, nil, nil, ""
	sess.title, sess.titleSource = "", ""
	sess.forked = nil
	sess.w = eventlog.NewWriter(js, sess.ns, sess.sid, eventlog.Position{LastSeq: tombstone}, sess.svc.token)
	sess.lg.Info("session deleted")
	return nil
}

// keySubjects returns the wildcard of a session's idempotency key subjects.
func keySubjects(ns events.Namespace, sid events.SessionID) string {
	f := events.LogFilter(ns, sid) // "acp.log.<ns>.<sid>.>"
	return f[:len(f)-1] + "key.>"
}
