package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Owner leases. A session is served by the replica holding its lease in
// ACP_OWNERS (key SessionKey(ns, sid), value the replica's ID). The lease
// lives the bucket's max age (Config.OwnerTTL) past its last renewal; its
// holder renews every lease it holds every third of that, each renewal a
// compare-and-set on the revision it last wrote. A replica that gets a
// request for a session another replica holds forwards it there
// (acp.owner.<replica>.<ns>.<op>). A lease that expires, or that its holder
// gives up, leaves a marker every replica watches: a session with a turn
// open is then claimed by one of them, which takes the turn over.
//
// The lease is routing, not safety. Safety is the log's compare-and-set: a
// replica that takes a session over first appends OwnerChanged conditioned
// on the last sequence it read, so a paused or partitioned earlier owner's
// next append fails and it steps down; so does one whose renewal fails.

// ownedElsewhere is load's error when another replica holds the session's
// lease: the request belongs there.
type ownedElsewhere struct {
	key   string
	owner string
	rev   uint64
}

func (e *ownedElsewhere) Error() string {
	return fmt.Sprintf("session %s is owned by replica %s", e.key, e.owner)
}

// Unwrap makes it, to anyone who does not forward, a retryable error.
func (e *ownedElsewhere) Unwrap() error {
	return events.Errorf(events.CodeUnavailable, "session %s is moving between session replicas; retry", e.key)
}

// errLeaseLost is why a replica that stepped down released a session.
func errLeaseLost(key string) error {
	return events.Errorf(events.CodeWriteConflict, "this session replica lost the owner lease of %s; retry (with the same idempotency key to join the turn)", key)
}

// acquireLease takes the session's lease for this replica, and returns its
// revision. When another replica holds it, the error is *ownedElsewhere.
// It reads the lease first: a request for a session another replica owns
// (half of them, with two replicas) then costs one read before it is
// forwarded, and only a free lease costs the create.
func (s *Service) acquireLease(ctx context.Context, key string) (uint64, error) {
	self := []byte(s.token)
	for range 3 {
		e, err := s.owners.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err := s.owners.Create(ctx, key, self)
			if err == nil {
				s.m.leases.WithLabelValues("acquired").Inc()
				return rev, nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return 0, leaseError(key, err)
			}
			continue // taken meanwhile: read who holds it
		case err != nil:
			return 0, events.Errorf(events.CodeUnavailable, "owner lease of %s: %v", key, err)
		}
		if owner := string(e.Value()); owner != s.token {
			s.m.leases.WithLabelValues("held_elsewhere").Inc()
			return 0, &ownedElsewhere{key: key, owner: owner, rev: e.Revision()}
		}
		// Ours, from a holder this replica has forgotten: take it as new.
		rev, err := s.owners.Update(ctx, key, self, e.Revision())
		if err == nil {
			s.m.leases.WithLabelValues("acquired").Inc()
			return rev, nil
		}
		if eventlog.StorageFull(err) {
			return 0, leaseError(key, err)
		}
	}
	return 0, events.Errorf(events.CodeUnavailable, "owner lease of %s is contended; retry", key)
}

// leaseError is the typed error of a lease write that failed: storage_full
// when the store refused it (a full store is no contention, and no retry
// helps until space is freed), else unavailable.
func leaseError(key string, err error) error {
	if eventlog.StorageFull(err) {
		return events.Errorf(events.CodeStorageFull, "owner lease of %s: the NATS store refuses writes (%v): free space, or raise JetStream's store limit", key, err)
	}
	return events.Errorf(events.CodeUnavailable, "owner lease of %s: %v", key, err)
}

// evictLease deletes a lease whose holder no longer answers (nobody serves
// its forwarding subject: its connection is gone), if it is still at rev.
func (s *Service) evictLease(ctx context.Context, e *ownedElsewhere) {
	if err := s.owners.Delete(ctx, e.key, jetstream.LastRevision(e.rev)); err == nil {
		s.m.leases.WithLabelValues("evicted").Inc()
		s.lg.Warn("evicted the lease of an owner that does not answer", "key", e.key, "owner", e.owner)
	}
}

// liveness remembers, for a third of the lease TTL, whether each replica
// that holds leases answered its ping, so that a thousand claims against
// one holder cost one ping, and a paused holder (whose ping times out)
// holds up the claims for one timeout, not one each.
type liveness struct {
	mu     sync.Mutex
	probes map[string]*probe
}

type probe struct {
	done  chan struct{} // closed once alive and at are set
	alive bool
	at    time.Time
}

// answers reports whether the session service replica id is alive: it
// answers the nats micro ping of its instance within a third of the lease
// TTL. A replica whose connection is gone (kill -9, a partition the server
// noticed) has no subscription: the ping fails at once.
func (s *Service) answers(ctx context.Context, id string) bool {
	l := &s.live
	l.mu.Lock()
	p := l.probes[id]
	fresh := p != nil && (p.at.IsZero() || time.Since(p.at) < s.cfg.OwnerTTL/3)
	if !fresh {
		if l.probes == nil {
			l.probes = map[string]*probe{}
		}
		for other, q := range l.probes {
			if !q.at.IsZero() && time.Since(q.at) > time.Minute {
				delete(l.probes, other)
			}
		}
		p = &probe{done: make(chan struct{})}
		l.probes[id] = p
	}
	l.mu.Unlock()
	if fresh {
		select {
		case <-p.done:
			return p.alive
		case <-ctx.Done():
			return true // no verdict: do not evict
		}
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.OwnerTTL/3)
	defer cancel()
	subject, err := micro.ControlSubject(micro.PingVerb, events.APIServiceSession, id)
	if err == nil {
		_, err = s.nc.RequestWithContext(pctx, subject, nil)
	}
	l.mu.Lock()
	p.alive, p.at = !errors.Is(err, nats.ErrNoResponders), time.Now()
	l.mu.Unlock()
	close(p.done)
	return p.alive
}

// releaseLease gives up the session's lease, if held, so that another
// replica may take the session at once.
func (sess *session) releaseLease() {
	rev := sess.lease.Swap(0)
	if rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(sess.svc.life.context()), sess.svc.cfg.CallTimeout)
	defer cancel()
	if err := sess.svc.owners.Delete(ctx, sess.key(), jetstream.LastRevision(rev)); err != nil {
		sess.lg.Debug("give up owner lease", events.LogKeyErr, err)
	}
}

// renewLeases renews every lease this replica holds, every third of the
// TTL, pipelined: a publish per lease, all in flight at once. A renewal the
// server refuses (the lease expired or moved) makes the replica step down
// from that session. A renewal that fails otherwise (the bucket's stream
// electing a leader, a node's death losing the publish or its
// acknowledgement) is tried again within renewRetry, not a third of the TTL
// later: an election of 6 to 8 s would otherwise see a lease renewed last
// just before it go unrenewed for two periods, close to its expiry.
func (s *Service) renewLeases(ctx context.Context) {
	period := s.cfg.OwnerTTL / 3
	t := time.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := period
		if failed := s.renewAll(ctx, period); failed > 0 {
			next = min(renewRetry, period)
		}
		t.Reset(next)
	}
}

// renewRetry is how soon renewals are tried again after some failed for a
// reason that passes.
const renewRetry = time.Second

// renewAll renews every lease held, waiting at most wait for the
// acknowledgements, and returns how many renewals failed for a reason that
// passes. They are logged once, together: during an election every lease
// fails alike.
func (s *Service) renewAll(ctx context.Context, wait time.Duration) (failed int) {
	type renewal struct {
		sess *session
		rev  uint64
		ack  jetstream.PubAckFuture
	}
	var firstErr error
	fail := func(err error) {
		if failed == 0 {
			firstErr = err
		}
		failed++
		s.m.leases.WithLabelValues(leaseRenewFailed).Inc()
	}
	defer func() {
		if failed > 0 {
			s.lg.Warn("renew owner leases", "failed", failed, events.LogKeyErr, firstErr)
		}
	}()
	var inflight []renewal
	for _, sess := range s.loaded() {
		rev := sess.lease.Load()
		if rev == 0 {
			continue
		}
		ack, err := s.js.PublishAsync(events.KVSubject(events.BucketOwners, sess.key()), []byte(s.token), jetstream.WithExpectLastSequencePerSubject(rev))
		if err != nil {
			fail(err)
			continue
		}
		inflight = append(inflight, renewal{sess, rev, ack})
	}
	// No acknowledgement may come at all (a publish lost with a node):
	// the wait is bounded, and what has not come counts as failed.
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for i, r := range inflight {
		select {
		case ack := <-r.ack.Ok():
			s.renewedAt.Store(time.Now().UnixNano())
			if !r.sess.lease.CompareAndSwap(r.rev, ack.Sequence) {
				// Given up while the renewal flew: give it up again.
				_ = s.owners.Delete(ctx, r.sess.key(), jetstream.LastRevision(ack.Sequence))
			}
			s.m.leases.WithLabelValues("renewed").Inc()
		case err := <-r.ack.Err():
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
				s.bg.Go(func() { r.sess.stepDown(r.rev) })
			} else {
				fail(err)
			}
		case <-timeout.C:
			for range inflight[i:] {
				fail(errors.New("no acknowledgement within a renewal period"))
			}
			return failed
		case <-ctx.Done():
			return failed
		}
	}
	return failed
}

// judges reports whether this replica may find another process gone on
// the strength of its own observations (a runner that does not answer its
// pings, runnerliveness.go): it holds no lease, so it would end nothing,
// or one of its lease renewals was acknowledged within a renewal period
// (and a retry) before since. A replica cut off from the majority (a
// partition of its node, or of its connection) sees every runner fall
// silent; ending their turns adapter_exited would fail turns whose
// adapters are working, for a fault of its own.
func (s *Service) judges(since time.Time) bool {
	held := false
	for _, sess := range s.loaded() {
		if sess.lease.Load() != 0 {
			held = true
			break
		}
	}
	if !held {
		return true
	}
	return s.renewedAt.Load() >= since.Add(-s.cfg.OwnerTTL/3-renewRetry).UnixNano()
}

// stepDown drops the session from this replica after its lease at rev was
// lost: nothing more is written, waiters are told to retry, the adapter is
// left to the next owner.
func (sess *session) stepDown(rev uint64) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if !sess.lease.CompareAndSwap(rev, 0) {
		return // released or renewed meanwhile
	}
	sess.svc.m.leases.WithLabelValues("lost").Inc()
	sess.lg.Warn("lost the owner lease; stepping down")
	sess.release(errLeaseLost(sess.key()))
}

// watchLeases claims, for every lease that expires or is given up, the
// session if its projection says a turn is open: its owner is gone, and the
// turn's adapter may be working on it still.
func (s *Service) watchLeases(ctx context.Context) error {
	w, err := s.owners.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("watch owner leases: %w", err)
	}
	s.bg.Go(func() {
		follow(ctx, w, func(e jetstream.KeyValueEntry) {
			if e.Operation() != jetstream.KeyValuePut {
				select {
				case s.claimQueue <- e.Key():
				case <-ctx.Done():
				}
			}
		})
	})
	return nil
}
