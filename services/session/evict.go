package session

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// Causes of an eviction (HeaderEvict, acp_session_evictions_total), and
// the quotas of acp_session_quota_refusals_total.
const (
	causeCapacity       = "capacity"
	causeNamespaceQuota = "namespace_quota"
	causePrincipalQuota = "principal_quota"

	quotaNamespace = "namespace"
	quotaPrincipal = "principal"
)

var (
	evictionCauses = []string{causeCapacity, causeNamespaceQuota, causePrincipalQuota}
	quotaNames     = []string{quotaNamespace, quotaPrincipal}
)

// evictTries bounds the candidates one eviction asks before giving up:
// each that refuses has just become busy, which a burst of prompts can do
// to a few at once, not to many.
const evictTries = 4

// placeAdapter places the adapter sess is about to attach, within the quotas of
// its namespace and of the request's principal (HeaderPrincipal; a caller
// that names none has no principal quota, its namespace's still holds).
// Over a quota, the namespace's or principal's own least recently used
// idle adapter is evicted first; with none idle, the attach is refused
// rate_limited. When the runners with the agent are full, the least
// recently used idle adapter on them is evicted, whoever's it is, and
// only when none is idle is the attach refused as before. A pinned
// session's adapter goes to its runner or nowhere (placement.go). The caller
// holds sess.mu; the principal is recorded for the projection.
func (s *Service) placeAdapter(ctx context.Context, sess *session) (events.RunnerID, error) {
	if err := s.ledger.catchUp(ctx); err != nil {
		return "", err
	}
	principal := rpc.RequestHeaders(ctx).Get(events.HeaderPrincipal)
	key, alive := sess.key(), s.runners.aliveSet()
	capacity := s.runners.capacity()
	type quota struct {
		name, cause, flag, who string
		limit                  int
		match                  func(*hostedAdapter) bool
	}
	quotas := []quota{{quotaNamespace, causeNamespaceQuota, "session.max-adapters-per-namespace", string(sess.ns),
		s.cfg.MaxAdaptersPerNamespace.limit(capacity), func(h *hostedAdapter) bool { return h.ns == sess.ns }}}
	if principal != "" {
		quotas = append(quotas, quota{quotaPrincipal, causePrincipalQuota, "session.max-adapters-per-principal", principal,
			s.cfg.MaxAdaptersPerPrincipal.limit(capacity), func(h *hostedAdapter) bool { return h.principal == principal }})
	}
	for _, q := range quotas {
		if q.limit == 0 {
			continue
		}
		// Each pass evicts one adapter, which the ledger stops counting
		// at once, or returns: the loop ends.
		for s.ledger.count(q.match, alive, key) >= q.limit {
			if !s.evictOne(ctx, q.cause, q.match, key) {
				s.m.quotaRefusals.WithLabelValues(q.name).Inc()
				return "", events.Errorf(events.CodeRateLimited,
					"%s %q is at its quota of %d live adapters (%s), and none of them is idle to make room: retry once a turn ends, or unload a session",
					q.name, q.who, q.limit, q.flag)
			}
		}
	}
	var pos uint64
	if sess.w != nil {
		pos = sess.w.Position().LastSeq
	}
	s.ledger.reserve(key, reservation{ns: sess.ns, principal: principal, pos: pos, until: time.Now().Add(s.cfg.AttachTimeout)})
	agent, pin := sess.opened.Agent, sess.opened.Runner
	runner, err := s.runners.place(ctx, agent, pin)
	for range evictTries {
		on := s.runners.full(agent, pin, err)
		if on == nil || !s.evictOne(ctx, causeCapacity, func(h *hostedAdapter) bool { return on[h.runner] }, key) {
			break
		}
		runner, err = s.runners.place(ctx, agent, pin)
	}
	if err != nil {
		s.ledger.unreserve(key)
		if pin != "" {
			err = pinned(err, sess.sid)
		}
		return "", err
	}
	sess.meta.Principal = principal
	return runner, nil
}

// evictOne evicts the least recently used idle adapter that matches, other
// than self's, and reports whether one went. The session's owner does the
// unload (unloadHosted), and only while the session is still idle: one that
// became busy since its projection refuses, and the next is tried.
func (s *Service) evictOne(ctx context.Context, cause string, match func(*hostedAdapter) bool, self string) bool {
	skip := map[string]bool{}
	for range evictTries {
		h, ok := s.ledger.pickLRU(match, s.runners.aliveSet(), self, skip)
		if !ok {
			return false
		}
		err := s.unloadHosted(ctx, h, cause)
		s.ledger.evicted(h, err == nil)
		if err == nil {
			s.runners.freed(events.RunnerID(h.runner))
			s.m.evictions.WithLabelValues(cause).Inc()
			s.lg.Info("adapter evicted", events.LogKeyNamespace, string(h.ns), events.LogKeySession, string(h.sid),
				events.LogKeyRunner, h.runner, "cause", cause)
			return true
		}
		s.m.evictFailures.Inc()
		s.lg.Info("eviction not done", events.LogKeyNamespace, string(h.ns), events.LogKeySession, string(h.sid),
			"cause", cause, events.LogKeyErr, err)
		skip[h.key] = true
		if ctx.Err() != nil {
			return false
		}
	}
	return false
}

// unloadHosted has h's session's owner unload it for cause, if idle. The wait
// covers the owner stopping the adapter and recording the unload.
//
// The evictor is an attach that holds its own session's lock, inside a
// request this replica serves. So the unload is done here, in-process,
// when this replica owns the session (or takes it, as any request would),
// and goes over NATS only to another replica that owns it, on that
// owner's own subject (OwnerSubject). It never goes to the API's queue
// group: that would ask this very service for what it can do itself, and
// the session service's NATS user may not publish there anyway (it
// serves the API; it is no client of it), so such a request is dropped
// and the attach waits out its timeout.
func (s *Service) unloadHosted(ctx context.Context, h hostedAdapter, cause string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.CallTimeout)
	defer cancel()
	err := s.session(h.ns, h.sid).evictIfIdle(ctx, cause)
	moved, ok := errors.AsType[*ownedElsewhere](err)
	if !ok {
		return err
	}
	data, err := events.Marshal(&events.AcpUnloadSessionRequest{SessionID: new(string(h.sid))})
	if err != nil {
		return err
	}
	_, err = rpc.RequestMsg(ctx, s.nc, &nats.Msg{Subject: events.OwnerSubject(moved.owner, h.ns, events.OpUnloadSession),
		Data: data, Header: nats.Header{events.HeaderEvict: []string{cause}}})
	return err
}

// evictIfIdle serves an unloadSession that carries HeaderEvict, on the
// session's owner: the adapter is unloaded (SessionUnloaded evicted) only
// when no turn runs and no adapter drains a cancelled one; a busy session
// is session_busy, and the evictor tries another. A session without an
// adapter has nothing to evict: its projection is written again, so that
// every replica stops counting an adapter it does not have.
//
// A session whose lock is held is not idle now, and is session_busy too,
// at once: its holder may be an attach of its own that is evicting to
// make room, and two attaches each waiting for the other's lock would
// never end (a mutex has no deadline), where the evictor that is refused
// tries the next candidate.
func (sess *session) evictIfIdle(ctx context.Context, cause string) error {
	if !sess.mu.TryLock() {
		return events.Errorf(events.CodeSessionBusy, "session %s is in use: not evicted", sess.sid)
	}
	defer sess.mu.Unlock()
	if err := sess.loadExisting(ctx); err != nil {
		return err
	}
	r := sess.adapter
	if r == nil {
		sess.project(ctx)
		return nil
	}
	if sess.turn != nil || r.drain != nil || !sess.late.empty() {
		return events.Errorf(events.CodeSessionBusy, "session %s is not idle: not evicted", sess.sid)
	}
	if err := sess.unload(ctx, events.UnloadEvicted); err != nil {
		return err
	}
	sess.lg.Info("adapter unloaded to make room", "cause", cause)
	return nil
}
