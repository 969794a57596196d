package session

import (
	"context"

	"skein.dev/pkg/events"
)

// handleDiscard serves OpDiscardSession.
func (s *Service) handleDiscard(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	_, sess, err := requestFor[events.DiscardSessionRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	if err := sess.discard(ctx); err != nil {
		return nil, err
	}
	return &events.DiscardSessionResponse{}, nil
}

// discard deletes the session as delete does, but only while it is idle
// and holds no user message: for a client that opens a session eagerly and
// drops it unused. Anything else is session_not_empty, and nothing
// changes. A fork counts as holding its source's messages.
//
// It is atomic against a prompt: both run under the session's lock on the
// replica that owns it, so a prompt is either accepted before the check
// (which then sees its user message, or its running turn) or after the
// tombstone (and finds no session). The check reads the log, and the
// tombstone is appended with the compare-and-set every append carries,
// conditioned on the newest record this replica knows: had anything been
// appended since (by an owner this replica no longer is), the tombstone
// fails with write_conflict instead of deleting what the check did not
// see.
func (sess *session) discard(ctx context.Context) error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.load(ctx); err != nil {
		return err
	}
	if sess.opened == nil {
		return nil // never opened, or deleted: as delete, nothing to do
	}
	if t := sess.turn; t != nil {
		return events.Errorf(events.CodeSessionNotEmpty, "session %s is running turn %s", sess.sid, t.id)
	}
	if sess.forked != nil {
		return events.Errorf(events.CodeSessionNotEmpty, "session %s is a fork of %s and holds its history", sess.sid, sess.forked.SourceSessionID)
	}
	used, err := sess.svc.logOf(sess.ns, sess.sid).holdsUserMessage(ctx)
	if err != nil {
		return err
	}
	if used {
		return events.Errorf(events.CodeSessionNotEmpty, "session %s holds user messages; delete it instead", sess.sid)
	}
	return sess.delete(ctx)
}

// maxDiscardScan bounds the public events discard reads looking for a user
// message. A session that was never prompted holds only what its agent
// said unasked (its commands, its config), a handful; one with more than
// this is treated as used.
const maxDiscardScan = 4096
