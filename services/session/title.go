package session

import (
	"context"
	"encoding/json"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Titles (the rules are pkg/events' title.go, the policy titlepolicy.go). The session holds its title
// and where it came from in memory; every change is a TitleChanged record
// on the session's TitleSubject, whose last message a new owner reads back
// (logReader.title): one direct get, however long the session, and nothing of
// the ACP_SESSIONS projection, which only shows the title.

// setTitle records title, from source (events.Title*), as the session's
// title. at is the place in ACP_IO it came from, if any. Setting the title
// the session has, from the same source, writes nothing.
func (sess *session) setTitle(ctx context.Context, at ioPos, title, source string) error {
	if title == sess.title && source == sess.titleSource {
		return nil
	}
	if _, err := sess.append(ctx, at, eventlog.Entry{
		Kind:    events.LogControl,
		Subject: events.TitleSubject(sess.ns, sess.sid),
		Value:   &events.TitleChanged{Title: title, Source: source},
	}); err != nil {
		return err
	}
	sess.title, sess.titleSource = title, source
	return nil
}

// deriveTitle gives a session without a title one derived from the user
// message blocks about to be accepted (promptTitle); a message
// without text leaves it without. The caller projects it with the
// acceptance. An error is the append's: the log cannot be written (or is
// another replica's now), so the prompt fails before anything is accepted,
// and its retry derives the title again (or finds it in the log).
func (sess *session) deriveTitle(ctx context.Context, blocks []json.RawMessage) error {
	if sess.title != "" {
		return nil
	}
	title := promptTitle(blocks)
	if title == "" {
		return nil
	}
	return sess.setTitle(ctx, ioPos{}, title, events.TitleFromMessage)
}

// onSessionInfo applies the title of the agent's session_info_update,
// when it has a string one and the session was not renamed: a rename is
// the user's word, which the agent does not override.
func (r *route) onSessionInfo(ctx context.Context, at ioPos, update json.RawMessage) {
	sess := r.sess
	raw, ok := acp.SessionInfoTitle(update)
	if !ok || sess.titleSource == events.TitleRenamed {
		return
	}
	title := agentTitle(raw)
	if title == "" || title == sess.title {
		return
	}
	if err := sess.setTitle(ctx, at, title, events.TitleFromAgent); err != nil {
		sess.svc.m.lostRecords.WithLabelValues(events.RecordTitleChanged).Inc()
		sess.lg.Warn("record the agent's title", events.LogKeyErr, err)
		return
	}
	sess.project(ctx)
}

// rename sets the session's title (already normalized by the request's
// Validate; "" leaves it) and its cap, when budget is set (budget.go), in
// one append, and answers with the session as getSession shows it. It never
// starts an adapter: an unloaded session stays unloaded. From now on the
// agent's titles no longer change it.
func (sess *session) rename(ctx context.Context, title string, budget *events.Budget) (*events.RenameSessionResponse, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.loadExisting(ctx); err != nil {
		return nil, err
	}
	var entries []eventlog.Entry
	if title != "" && (title != sess.title || sess.titleSource != events.TitleRenamed) {
		entries = append(entries, eventlog.Entry{Kind: events.LogControl, Subject: events.TitleSubject(sess.ns, sess.sid),
			Value: &events.TitleChanged{Title: title, Source: events.TitleRenamed}})
	}
	b := sess.budget
	if budget != nil {
		var err error
		if b, err = withCap(b, budget.MaxCost); err != nil {
			return nil, err
		}
		entries = append(entries, budgetEntry(sess.ns, sess.sid, b))
	}
	if len(entries) > 0 {
		if _, err := sess.append(ctx, ioPos{}, entries...); err != nil {
			return nil, err
		}
	}
	if title != "" {
		sess.title, sess.titleSource = title, events.TitleRenamed
	}
	sess.budget = b
	sess.project(ctx)
	info := sess.projection().Info
	// getSession's latestSequence is the newest public event's, not the
	// newest record's (this rename's).
	last, err := eventlog.Last(ctx, sess.svc.js, events.StreamLog, events.LogSubject(sess.ns, sess.sid, events.LogEvents))
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "read the log of %s: %v", sess.sid, err)
	}
	info.LatestSequence = 0
	if last != nil {
		info.LatestSequence = last.Sequence
	}
	return &events.RenameSessionResponse{Session: info}, nil
}
