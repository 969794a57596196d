package session

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
)

// delete removes the session: the runtime first (the running turn is
// cancelled and its pending permission requests end session_deleted, the
// adapter stops), then its files on the runners (removeFiles), then the
// tombstone, then history and metadata. The
// tombstone (SessionDeleted, appended with the usual compare-and-set) stays
// as the session's only record, so a stale writer's next append fails
// instead of resurrecting it; reopening the ID starts a new, empty session
// after it. Deleting a missing session does nothing. The caller holds
// sess.mu.
func (sess *session) delete(ctx context.Context) error {
	if err := sess.load(ctx); err != nil {
		return err
	}
	if sess.opened == nil {
		return nil
	}
	sess.prompts = promptQueue{} // deleted with the session
	if sess.turn != nil {
		sess.turn.endReason = events.ReasonSessionDeleted
		sess.abortTurn(ctx, ioPos{}, events.OutcomeCancelled, nil)
	}
	sess.endLate(ctx, events.ReasonSessionDeleted)
	if r := sess.adapter; r != nil {
		r.stopAdapter(ctx)
	}
	sess.removeFiles(ctx)
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
		{log, events.BudgetSubject(sess.ns, sess.sid), 0},
		{log, events.OpenedSubject(sess.ns, sess.sid), 0},
		{log, events.QueueSubjects(sess.ns, sess.sid), 0},
		{log, events.LogSubject(sess.ns, sess.sid, events.LogControl), 1},
	}
	if io, err := js.Stream(ctx, events.StreamIO); err == nil {
		purges = append(purges, struct {
			stream  jetstream.Stream
			subject string
			keep    uint64
		}{io, events.IOSessionSubjects(sess.ns, sess.sid), 0})
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
	sess.budget = events.BudgetChanged{}
	sess.moved(onDelete)
	sess.w = eventlog.NewWriter(js, sess.ns, sess.sid, eventlog.Position{LastSeq: tombstone}, sess.svc.token)
	sess.lg.Info("session deleted")
	return nil
}

// keySubjects returns the wildcard of a session's idempotency key subjects.
func keySubjects(ns events.Namespace, sid events.SessionID) string {
	f := events.LogFilter(ns, sid) // "acp.log.<ns>.<sid>.>"
	return f[:len(f)-1] + "key.>"
}

// workspaceShared reports whether another session of namespace ns works
// in session sid's default workspace or below it, as its cwd or an
// additional directory: a fork works where its source did, and a user may
// have opened one there. Sessions are read from their projections
// (ACP_SESSIONS); one deleted meanwhile is left out. The roots may be the
// runners' alone (the service knows none): then any path through
// <namespace>/<session ID> counts.
func (s *Service) workspaceShared(ctx context.Context, ns events.Namespace, sid events.SessionID) (bool, error) {
	def := s.cfg.WorkspaceRoots.Default(ns, sid)
	tail := string(filepath.Separator) + filepath.Join(string(ns), string(sid))
	inside := func(p string) bool {
		p = filepath.Clean(p)
		if def != "" {
			return workspace.Under(p, def)
		}
		return strings.HasSuffix(p, tail) || strings.Contains(p, tail+string(filepath.Separator))
	}
	keys, err := s.meta.ListKeysFiltered(ctx, string(ns)+".*")
	if err != nil {
		return false, err
	}
	defer keys.Stop()
	own := events.SessionKey(ns, sid)
	for key := range keys.Keys() {
		if key == own {
			continue
		}
		e, err := s.meta.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		m, err := events.Decode[events.SessionMeta](e.Value())
		if err != nil {
			return false, err
		}
		var dirs []string
		_ = json.Unmarshal(m.Info.AdditionalDirectories, &dirs) // none, if it holds none
		for _, d := range append(dirs, m.Info.Cwd) {
			if d != "" && inside(d) {
				return true, nil
			}
		}
	}
	return false, nil
}

// removeFiles asks every runner alive to remove what the session left on
// it (events.RunnerRemove): its HOME and TMPDIR, and its default
// workspace unless it was opened with a cwd of its own. A session may
// have run on any of them, and a runner that never hosted it has nothing
// to remove. Each runner stops the session's adapter first, if it still
// hosts one. It is best effort: a runner that does not answer within
// CallTimeout keeps the files, logged, and the delete goes on, as it does
// when a stop goes unanswered.
func (sess *session) removeFiles(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sess.svc.cfg.CallTimeout)
	defer cancel()
	hdr := nats.Header{
		events.HeaderNamespace: []string{string(sess.ns)},
		events.HeaderSessionID: []string{string(sess.sid)},
	}
	req := &events.RunnerRemoveRequest{Cwd: sess.opened.Cwd}
	if def := sess.svc.cfg.WorkspaceRoots.Default(sess.ns, sess.sid); req.Cwd == "" || req.Cwd == def {
		shared, err := sess.svc.workspaceShared(ctx, sess.ns, sess.sid)
		if err != nil {
			sess.lg.Warn("cannot tell whether another session works in the deleted session's workspace: it stays", events.LogKeyErr, err)
		}
		req.KeepWorkspace = shared || err != nil
	}
	var wg sync.WaitGroup
	for id := range sess.svc.runners.aliveSet() {
		wg.Go(func() {
			if _, err := rpc.Call[events.RunnerAck](ctx, sess.svc.nc, events.RunnerSubject(events.RunnerID(id), events.RunnerRemove), req, hdr); err != nil {
				sess.lg.Warn("a runner did not remove the deleted session's files", "runner", id, events.LogKeyErr, err)
			}
		})
	}
	wg.Wait()
}
