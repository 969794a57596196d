package session

import (
	"context"
	"fmt"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Forking a session. A fork is a new session with its source's agent and
// options and a log of its own: its first records, one atomic append, are
// its SessionOpened and a SessionForked that names the source and the
// source's log sequence the fork continues from. Nothing of the source's
// history is copied, and the source is never written: the fork is served
// by the owner of the new session, which only reads the source's log.
//
// The agent of a fork starts with a new ACP session (the source's agent
// session is the source's), and its first prompt carries the bounded
// continuation preamble of a fallback restore, built from the source's
// session updates up to the fork's sequence. So the fork's first
// AdapterAttached records the fallback tier, its reason naming the fork.
// Until the fork holds a user message of its own, every attach arms that
// preamble again: an agent that came and went before the first prompt
// never had it.
//
// The source's history is read when the fork's first prompt is
// dispatched, not copied when it is forked, so history the source loses
// meanwhile (deleted, pruned) is history the preamble lacks. A fork of a
// fork continues from its source's own log only.

// handleFork serves OpForkSession: it checks the source and the sequence,
// then creates the fork on the replica that owns the new session.
func (s *Service) handleFork(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.ForkSessionRequest](data)
	if err != nil {
		return nil, err
	}
	src, fork, err := req.Validate()
	if err != nil {
		return nil, err
	}
	opened, at, err := s.forkPoint(ctx, ns, src, req.AtSequence)
	if err != nil {
		return nil, err
	}
	maxCost, err := s.forkCap(ctx, ns, src)
	if err != nil {
		return nil, err
	}
	if err := s.session(ns, fork).fork(ctx, opened, &events.SessionForked{SourceSessionID: string(src), AtSequence: at}, maxCost); err != nil {
		return nil, err
	}
	return &events.ForkSessionResponse{SessionID: string(fork), SourceSessionID: string(src), AtSequence: at}, nil
}

// forkPoint reads the source session src from its log and returns the
// options it was opened with and the sequence to fork at: at, or the
// source's newest record. A source that does not exist or was deleted is
// session_not_found; a sequence before the source was opened or after its
// newest record is invalid_cursor, and one before its oldest retained
// event, when its history was pruned, cursor_expired.
func (s *Service) forkPoint(ctx context.Context, ns events.Namespace, src events.SessionID, at *uint64) (*events.SessionOpened, uint64, error) {
	notFound := events.Errorf(events.CodeSessionNotFound, "session %s does not exist", src)
	last, err := eventlog.Last(ctx, s.js, events.StreamLog, events.LogFilter(ns, src))
	if err != nil {
		return nil, 0, events.Errorf(events.CodeUnavailable, "read log of %s: %v", src, err)
	}
	if last == nil || last.Header.Get(events.HeaderRecord) == events.RecordSessionDeleted {
		return nil, 0, notFound
	}
	rec, err := s.logOf(ns, src).opened(ctx)
	if err != nil {
		return nil, 0, events.Errorf(events.CodeUnavailable, "read log of %s: %v", src, err)
	}
	if rec == nil {
		return nil, 0, notFound
	}
	opened, err := events.Decode[events.SessionOpened](rec.Data)
	if err != nil {
		return nil, 0, events.Errorf(events.CodeUnavailable, "session %s: its opening record does not decode: %v", src, err)
	}
	if at == nil {
		return opened, last.Sequence, nil
	}
	n := *at
	if n < rec.Sequence || n > last.Sequence {
		return nil, 0, events.Errorf(events.CodeInvalidCursor, "atSequence %d is not in session %s's log, %d to %d", n, src, rec.Sequence, last.Sequence)
	}
	oldest, err := eventlog.Forward(ctx, s.js, events.StreamLog, events.LogSubject(ns, src, events.LogEvents), 0, 1)
	if err != nil {
		return nil, 0, events.Errorf(events.CodeUnavailable, "read log of %s: %v", src, err)
	}
	if len(oldest) == 1 && eventlog.EventNo(oldest[0]) > 1 && n < oldest[0].Sequence {
		return nil, 0, events.Errorf(events.CodeCursorExpired, "session %s's events up to %d are no longer retained; the oldest retained is %d", src, n, oldest[0].Sequence)
	}
	return opened, n, nil
}

// forkCap is the spending cap of a fork of src: src's cap now, else the
// namespace's default (budget.go). Nothing the source spent comes with it.
func (s *Service) forkCap(ctx context.Context, ns events.Namespace, src events.SessionID) (*events.Money, error) {
	rec, err := s.logOf(ns, src).opened(ctx)
	if err != nil || rec == nil {
		return nil, events.Errorf(events.CodeUnavailable, "read log of %s: %v", src, err)
	}
	b, err := s.logOf(ns, src).budget(ctx, rec.Sequence)
	if err != nil {
		return nil, err
	}
	if b.MaxCost != nil {
		return b.MaxCost, nil
	}
	return s.cfg.BudgetDefault.For(ns), nil
}

// fork records the session as a fork: opened with the source's options o
// and followed by f, and by its cap maxCost if any, in one append. The session must not exist yet: an
// existing one is session_conflict, and nothing changes. No adapter starts
// until the fork's first prompt.
func (sess *session) fork(ctx context.Context, o *events.SessionOpened, f *events.SessionForked, maxCost *events.Money) error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.load(ctx); err != nil {
		return err
	}
	if sess.opened != nil {
		return events.Errorf(events.CodeSessionConflict, "session %s exists; a fork makes a new session", sess.sid)
	}
	// A fork of a pinned session is pinned to the same runner, which
	// its first prompt finds or names (placement.go).
	if o.Runner == "" {
		if err := sess.svc.runners.refusal(ctx, o.Agent); err != nil {
			return err
		}
	}
	entries := []eventlog.Entry{
		{Kind: events.LogControl, Value: o, Subject: events.OpenedSubject(sess.ns, sess.sid)},
		{Kind: events.LogControl, Value: f},
	}
	var b events.BudgetChanged
	if maxCost != nil {
		b, _ = withCap(b, maxCost) // nothing spent: no currency to refuse
		entries = append(entries, budgetEntry(sess.ns, sess.sid, b))
	}
	if _, err := sess.append(ctx, ioPos{}, entries...); err != nil {
		return err
	}
	sess.opened, sess.forked, sess.createdAt, sess.budget = o, f, time.Now(), b
	sess.moved(onOpen)
	// The fork's agent is its source's, and starts only at the fork's
	// first prompt: until it announces its own, the fork offers the
	// commands the source's agent had announced by the fork's sequence.
	// Not its usage: the fork's context is the preamble, not the source's.
	src := events.LogSubject(sess.ns, events.SessionID(f.SourceSessionID), events.LogEvents)
	if commands, _, err := newestOffers(ctx, sess.svc.js, src, f.AtSequence+1); err != nil {
		sess.lg.Warn("read the source's commands for a fork", events.LogKeyErr, err)
	} else if commands != nil {
		sess.meta.AvailableCommands = commands
	}
	sess.project(ctx)
	sess.lg.Info("session forked", "source", f.SourceSessionID, events.LogKeySeq, f.AtSequence)
	return nil
}

// forkContinuation returns, for a fork that holds no user message yet, the
// preamble its next prompt brings the agent (the source's history up to
// the fork's sequence), and the tier and reason to record for the attach
// at hand: a new ACP session given that history is the fallback tier. For
// any other session it returns "" and tier and reason unchanged. A
// preamble that cannot be read is logged and left out: the fork still
// works, without its history.
func (sess *session) forkContinuation(ctx context.Context, tier, reason string) (string, string, string) {
	f := sess.forked
	if f == nil {
		return "", tier, reason
	}
	used, err := sess.svc.logOf(sess.ns, sess.sid).holdsUserMessage(ctx)
	if err != nil {
		sess.lg.Warn("read the fork's log", events.LogKeyErr, err)
		return "", tier, reason
	}
	if used {
		return "", tier, reason
	}
	preamble, err := sess.svc.logOf(sess.ns, events.SessionID(f.SourceSessionID)).preamble(ctx, f.AtSequence+1, sess.svc.cfg.MaxPreambleBytes)
	if err != nil {
		sess.lg.Warn("build the fork's continuation preamble", events.LogKeyErr, err)
	}
	if tier == events.TierNew {
		tier, reason = events.TierFallback, fmt.Sprintf("fork of %s at %d", f.SourceSessionID, f.AtSequence)
	}
	return preamble, tier, reason
}
