package session

import (
	"context"
	"encoding/json"
	"errors"

	"skein.dev/pkg/events"
)

// runnerGone handles a runner whose heartbeat was deleted or expired: its
// adapters are gone with it, an exit observed only indirectly.
func (s *Service) runnerGone(id events.RunnerID) {
	for _, sess := range s.loaded() {
		sess.mu.Lock()
		if r := sess.adapter; r != nil && r.runner == id {
			sess.lg.Warn("the adapter's runner is gone", events.LogKeyRunner, string(id))
			sess.onExit(s.runCtx, 0, r, &events.AcpAgentExitedEvent{
				SessionID: string(sess.sid), AgentType: sess.opened.Agent, ProcessID: r.processID,
				Restart: events.RestartNotAttempted, // ExitCode absent: observed indirectly
			})
		}
		sess.mu.Unlock()
	}
}

// adopt queues, at start-up, every session for a claim: those whose
// projection says a turn is open and whose lease is free (or whose holder is
// gone) are taken. Without this, such a turn would wait for the next
// request to touch its session.
func (s *Service) adopt(ctx context.Context) {
	keys, err := s.meta.ListKeys(ctx)
	if err != nil {
		s.lg.Warn("list sessions to adopt", events.LogKeyErr, err)
		return
	}
	for key := range keys.Keys() {
		select {
		case s.claimQueue <- key:
		case <-ctx.Done():
			return
		}
	}
}

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

// claim loads the session of key when its projection says a turn is open:
// a turn whose adapter still works on it is taken over and completes; any
// other open turn is closed. A lease held by a replica that no longer
// answers is evicted first.
func (s *Service) claim(ctx context.Context, key string) {
	e, err := s.meta.Get(ctx, key)
	if err != nil {
		return
	}
	m, err := events.Decode[events.SessionMeta](e.Value())
	if err != nil {
		return
	}
	var state struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(m.Info.State, &state) != nil || (state.Status != "running" && state.Status != "waiting") {
		return
	}
	ns, err := events.ParseNamespace(m.Namespace)
	if err != nil {
		return
	}
	sid, err := events.ParseSessionID(m.Info.SessionID)
	if err != nil {
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
			return // a live replica has it
		default:
			sess.lg.Warn("claim session", events.LogKeyErr, err)
			return
		}
	}
}
