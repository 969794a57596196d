package session

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// runnerGone handles a runner whose heartbeat was deleted or expired and
// that then did not answer its ping (runnerliveness.go): its adapters are
// gone with it, an exit observed only indirectly.
func (s *Service) runnerGone(ctx context.Context, id events.RunnerID) {
	s.adaptersGone(ctx, id, nil)
}

// edgeLinkLost handles an edge runner whose heartbeat has been lost for
// Config.EdgeLinkTimeout (runnerliveness.go): its adapters may still run,
// their output waiting in its outbox, but the turns on it end
// edge_link_lost; the next prompt restores the session once it is back.
func (s *Service) edgeLinkLost(ctx context.Context, id events.RunnerID) {
	s.adaptersGone(ctx, id, events.Errorf(events.CodeEdgeLinkLost,
		"the link to runner %s has been down for %v (session.edge-link-timeout); the next prompt restores the session once the runner is back", id, s.cfg.EdgeLinkTimeout))
}

// adaptersGone ends the adapters of runner id as exited, their turns
// failing with failure (nil: adapter_exited).
func (s *Service) adaptersGone(ctx context.Context, id events.RunnerID, failure *events.Error) {
	s.adaptersGoneBefore(ctx, id, failure, time.Time{})
}

// runnerRestarted handles a runner whose heartbeat comes from another
// process than before (RunnerInfo.Instance), first written at since: the
// last process's adapters are gone with it, though the heartbeat never
// lapsed (a supervisor restarted it at once). The adapters this replica
// attached before since are its; later ones are the new process's.
func (s *Service) runnerRestarted(ctx context.Context, id events.RunnerID, since time.Time) {
	s.adaptersGoneBefore(ctx, id, nil, since)
}

// adaptersGoneBefore is adaptersGone for the adapters attached before
// before (zero: all of them).
func (s *Service) adaptersGoneBefore(ctx context.Context, id events.RunnerID, failure *events.Error, before time.Time) {
	for _, sess := range s.loaded() {
		sess.mu.Lock()
		if r := sess.adapter; r != nil && r.runner == id && (before.IsZero() || r.attachedAt.Before(before)) {
			sess.lg.Warn("the adapter's runner is gone", events.LogKeyRunner, string(id))
			r.onExitBecause(ctx, ioPos{}, &events.AcpAgentExitedEvent{
				SessionID: string(sess.sid), AgentType: sess.opened.Agent, ProcessID: r.processID,
				Restart: events.RestartNotAttempted, // ExitCode absent: observed indirectly
			}, failure)
		}
		sess.mu.Unlock()
	}
}

// adopt queues, at start-up, every session for a claim: those whose log
// has a turn open and whose lease is free (or whose holder is gone) are
// taken. Without this, such a turn would wait for the next request to touch
// its session. Listing the sessions is retried until it succeeds: the
// server may still be coming up with this process.
func (s *Service) adopt(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		keys, err := s.meta.ListKeys(ctx)
		if err == nil {
			for key := range keys.Keys() {
				select {
				case s.claimQueue <- key:
				case <-ctx.Done():
					return
				}
			}
			return
		}
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return
		}
		s.lg.Warn("list sessions to adopt", "attempt", attempt, events.LogKeyErr, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(adoptRetry):
		}
	}
}

// adoptRetry spaces the attempts to list the sessions at start-up.
const adoptRetry = time.Second

func (s *Service) claimer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-s.claimQueue:
			s.claim(ctx, key)
		}
	}
}

// claim loads the session of key when its log has a turn open: a turn
// whose adapter still works on it is taken over and completes; any other
// open turn is closed. The log decides, in one read, not the projection:
// an owner that died between accepting a turn and projecting it left the
// projection saying idle. A lease held by a replica that no longer answers
// is evicted first. Every claim that loads nothing says why, in the log at
// debug level and in acp_session_claims_skipped_total.
func (s *Service) claim(ctx context.Context, key string) {
	skip := func(reason string, err error) {
		s.m.claimsSkipped.WithLabelValues(reason).Inc()
		lg := s.lg.With(events.LogKeySessionKey, key)
		if err != nil {
			lg.Warn("claim session", "reason", reason, events.LogKeyErr, err)
			return
		}
		lg.Debug("claim session", "reason", reason)
	}
	ns, sid, err := events.ParseSessionKey(key)
	if err != nil {
		skip("unreadable", err)
		return
	}
	last, err := eventlog.Last(ctx, s.js, events.StreamLog, events.LogFilter(ns, sid))
	if err != nil {
		skip("unreadable", err)
		return
	}
	if last == nil {
		skip("idle", nil)
		return
	}
	if _, _, open, err := eventlog.OpenTurn(last); err != nil || !open && last.Header.Get(events.HeaderQueueNext) == "" {
		skip("idle", err)
		return
	}
	for attempt := 0; ; attempt++ {
		sess := s.session(ns, sid)
		sess.mu.Lock()
		err := sess.load(ctx)
		sess.mu.Unlock()
		moved, ok := errors.AsType[*ownedElsewhere](err)
		switch {
		case err == nil:
			return
		case ok && attempt == 0 && !s.answers(ctx, moved.owner):
			s.evictLease(ctx, moved)
		case ok:
			skip("owned", nil) // a live replica has it
			return
		default:
			skip("failed", err)
			return
		}
	}
}
