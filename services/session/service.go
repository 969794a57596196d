// Package session owns session policy and the per-session state machine. It
// is the only writer of a session's log (ACP_LOG): it opens sessions, accepts
// prompts, attaches adapters through the adapter-runners, applies what the
// adapters said (ACP_IO) to the log, and publishes live deltas.
//
// A session's state lives in memory only as a projection of its log; any
// replica can rebuild it by reading the log. The state machine is in
// state.go: the states a session is in on its owner, and the table of
// the records and events that move it from which state to which. The
// owner orders each adapter process's ACP_IO records with
// internal/applier before it applies them (ioorder.go, io.go).
package session

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/lifecycle"
	"skein.dev/internal/storewatch"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
)

// Service is the session service.
type Service struct {
	cfg Config
	lg  *slog.Logger
	nc  *nats.Conn
	m   *metrics
	// runnerChecks counts the verdicts of runner liveness checks
	// (runnerliveness.go).
	runnerChecks *prometheus.CounterVec
	// token is this replica's identity, set by Run: its nats micro
	// instance ID (so `nats micro ls` names the holders of ACP_OWNERS
	// leases), its owner lease value, and part of every Nats-Msg-Id it
	// writes.
	token string
	ready chan struct{}

	// Set by Run.
	js      jetstream.JetStream
	store   *storewatch.Watch // whether the store refuses writes (storagefull.go)
	meta    jetstream.KeyValue
	owners  jetstream.KeyValue
	budgets jetstream.KeyValue // namespaces' daily spend (daily.go)
	runners *runnerDirectory
	// ledger counts the cluster's live adapters for the quotas (quota.go).
	ledger *ledger
	// claimQueue takes the keys of sessions this replica should try to
	// claim: at start-up, and whenever a lease ends.
	claimQueue chan string
	live       liveness
	heard      heardFrom // when each runner's output last arrived
	// renewedAt is when a lease renewal of this replica's was last
	// acknowledged (Unix nanoseconds): proof that it reaches the majority.
	renewedAt atomic.Int64
	// life is lent to NATS callbacks and timers, which have no context of
	// their own (lifetime.go).
	life *lifetime
	// maxRecord is the largest log record (Config.MaxRecordBytes, or the
	// server's max payload less room for the envelope and headers).
	maxRecord int

	mu       sync.Mutex
	sessions map[string]*session
	// bg tracks the goroutines Run starts besides the requests: the sweep,
	// lease renewal, claims, the KV watches. Run returns after them.
	bg sync.WaitGroup
}

// New returns a Service; it does no I/O. Call Run to start it.
func New(cfg Config, lg *slog.Logger, nc *nats.Conn, reg prometheus.Registerer) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{
		cfg:      cfg,
		lg:       lg.With("svc", "session"),
		nc:       nc,
		m:        newMetrics(reg, nc),
		ready:    make(chan struct{}),
		sessions: map[string]*session{},

		claimQueue:   make(chan string, claimQueueLen),
		runnerChecks: newRunnerChecks(reg),
	}, nil
}

// Ready is closed once Run serves requests.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves the session API until ctx is done. Then it stops taking
// requests, waits up to DrainWait for requests in flight, cancels those
// still running and waits for them to return, releases every session it
// holds, and returns nil: nothing it started outlives it.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	if err := streams.Provision(ctx, js, streams.Options{Replicas: s.cfg.Replicas, OwnerTTL: s.cfg.OwnerTTL,
		MaxEventsPerSession: s.cfg.MaxEventsPerSession, MaxBytesPerSession: s.cfg.MaxBytesPerSession}, true); err != nil {
		return err
	}
	s.js = js
	s.store = storewatch.New(js)
	if s.meta, err = js.KeyValue(ctx, events.BucketSessions); err != nil {
		return fmt.Errorf("sessions bucket: %w", err)
	}
	if s.owners, err = js.KeyValue(ctx, events.BucketOwners); err != nil {
		return fmt.Errorf("owners bucket: %w", err)
	}
	if s.budgets, err = js.KeyValue(ctx, events.BucketBudgets); err != nil {
		return fmt.Errorf("budgets bucket: %w", err)
	}
	runnersKV, err := js.KeyValue(ctx, events.BucketRunners)
	if err != nil {
		return fmt.Errorf("runners bucket: %w", err)
	}
	s.maxRecord = s.cfg.MaxRecordBytes
	if s.maxRecord <= 0 {
		s.maxRecord = int(s.nc.MaxPayload()) - recordHeadroom
	}
	// The service outlives ctx by its drain: what it runs ends with its
	// lifetime, which Run stops once the requests in flight are done.
	s.life = newLifetime(ctx)
	defer s.bg.Wait()
	defer s.life.stop()
	runCtx := s.life.context()
	if s.runners, err = watchRunners(runCtx, &s.bg, runnersKV, s.nc, s.lg, s.m, s.runnerChecks, s.runnerGone, &s.heard, s.judges, s.edgeLinkLost, s.edgeBack, s.cfg.EdgeLinkTimeout); err != nil {
		return err
	}
	s.runners.mu.Lock()
	s.runners.restarted = s.runnerRestarted
	s.runners.mu.Unlock()

	if s.ledger, err = watchAdapters(runCtx, &s.bg, s.meta); err != nil {
		return err
	}
	s.runners.hosted = s.ledger.on

	eps, err := rpc.StartEndpoints(ctx, s.nc, s.lg, rpc.ServiceConfig{
		Config: micro.Config{
			Name:        events.APIServiceSession,
			Description: "Skein session service: the single writer of session logs",
			QueueGroup:  events.APIServiceSession,
		},
		Stopping: errShuttingDown,
	})
	if err != nil {
		return fmt.Errorf("session service: %w", err)
	}
	s.token = eps.ID()
	handlers := map[events.Op]rpc.OpHandler{
		events.OpOpenSession:            s.handleOpen,
		events.OpPrompt:                 s.handlePrompt,
		events.OpCancelPrompt:           s.handleCancel,
		events.OpUnloadSession:          s.handleUnload,
		events.OpDeleteSession:          s.handleDelete,
		events.OpSetSessionConfigOption: s.handleSetConfig,
		events.OpRenameSession:          s.handleRename,
		events.OpDiscardSession:         s.handleDiscard,
		events.OpForkSession:            s.handleFork,

		events.OpRespondPermission: s.handleRespond,
		events.OpRespondInput:      s.handleRespondInput,
		events.OpWithdrawPrompt:    s.handleWithdraw,

		events.OpFileBegin:  s.handleFileBegin,
		events.OpFileWrite:  s.handleFileWrite,
		events.OpFileCommit: s.handleFileCommit,
		events.OpFileCancel: s.handleFileCancel,
		events.OpFileList:   s.handleFileList,
		events.OpFileRead:   s.handleFileRead,
	}
	for op, h := range handlers {
		// Requests to the API reach any replica (a queue group), which
		// forwards those for sessions another replica owns to that one's
		// own endpoint. Each request runs in its own goroutine: one
		// session's slow request (a restore) must not hold up others.
		err := eps.Add(rpc.Endpoint{Name: string(op), Subject: events.APIWildcard(op), Handler: s.routed(op, h), Async: true})
		if err == nil {
			err = eps.Add(rpc.Endpoint{Name: string(op) + "-owned", Subject: events.OwnerSubject(s.token, "*", op), Handler: h, Async: true, NoQueueGroup: true})
		}
		if err != nil {
			eps.Stop(0)
			return err
		}
	}
	if err := s.watchLeases(runCtx); err != nil {
		eps.Stop(0)
		return err
	}
	if err := eps.Listening(); err != nil {
		eps.Stop(0)
		return err
	}
	close(s.ready)
	s.lg.Info("session service ready")

	s.bg.Go(func() { s.sweep(runCtx) })
	s.bg.Go(func() { s.renewLeases(runCtx) })
	for range claimWorkers {
		s.bg.Go(func() { s.claimer(runCtx) })
	}
	s.bg.Go(func() { s.adopt(runCtx) })
	s.bg.Go(func() { s.catchUpAfterReconnects(runCtx) })
	<-ctx.Done()
	eps.Stop(s.cfg.DrainWait) // the requests in flight returned, within DrainWait or cancelled
	s.life.stop()             // the goroutines of bg see their context end; no callback or timer work runs any more
	s.bg.Wait()               // they returned, and no claim may take a lease after releaseAll gives them up
	s.releaseAll()
	// The lease renewals' asynchronous publishes keep a reply
	// subscription on the connection, which outlives Run unless ended.
	js.CleanupPublisher()
	return nil
}

// errShuttingDown answers requests the service cannot finish because it
// stops.
var errShuttingDown = events.Errorf(events.CodeUnavailable, "session service shutting down; retry")

// recordHeadroom is what a log record needs beyond its update's JSON: the
// msgpack envelope and the headers.
const recordHeadroom = 16 << 10

// sweep runs every SweepInterval. While a turn runs it is the safety net
// of the live tail: records a lost core message left unseen are read from
// the stream. Otherwise it reclaims adapters idle past IdleTimeout or older
// than MaxAdapterAge, and gives up sessions unloaded and idle that long.
func (s *Service) sweep(ctx context.Context) {
	lifecycle.Every(ctx, s.cfg.SweepInterval, func() { s.sweepOnce(ctx) })
}

func (s *Service) sweepOnce(ctx context.Context) {
	now := time.Now()
	var silent []*session // with a turn whose agent is silent: starved by a full store?
	for _, sess := range s.loaded() {
		sess.mu.Lock()
		if sess.projectionStale {
			sess.project(ctx)
		}
		expireAsks(ctx, sess, now)
		if sess.turn == nil {
			startQueued(ctx, sess) // the safety net of kickQueue
		}
		if r := sess.adapter; r != nil && sess.turn != nil {
			r.checkTail(ctx, min(tailQuiet, s.cfg.SweepInterval))
			r.watchStall(ctx, now)
			if sess.turn.starving(r, now) {
				silent = append(silent, sess)
			}
		} else if reason := sess.adapter.reclaimReason(now, s.cfg.IdleTimeout, s.cfg.MaxAdapterAge); reason != "" {
			if err := sess.unload(ctx, reason); err != nil {
				sess.lg.Warn("reclaim adapter", "reason", reason, events.LogKeyErr, err)
			} else {
				s.m.reclaims.WithLabelValues(reason).Inc()
			}
		} else if sess.adapter == nil && sess.turn == nil && s.cfg.IdleTimeout > 0 && now.Sub(sess.updatedAt) >= s.cfg.IdleTimeout {
			// Unloaded and idle: give the session up (and its lease);
			// the next request loads it again, on any replica.
			sess.release(nil)
		}
		sess.mu.Unlock()
	}
	// A turn whose agent is silent may be starved by a store with no
	// room for the largest record a runner may hold for ACP_IO. Asked
	// outside the sessions' locks: it may read the account's usage.
	if len(silent) == 0 {
		return
	}
	if _, full := s.store.Full(ctx, uint64(s.nc.MaxPayload())); !full {
		return
	}
	for _, sess := range silent {
		sess.mu.Lock()
		if sess.turn.starving(sess.adapter, time.Now()) {
			sess.lg.Warn("the store refuses writes and the turn's agent is silent: ending the turn", events.LogKeyTurn, sess.turn.id)
			sess.abortTurn(ctx, ioPos{}, events.OutcomeFailed, errStarved)
		}
		sess.mu.Unlock()
	}
}

// session returns the in-memory holder of (ns, sid), creating an empty one.
func (s *Service) session(ns events.Namespace, sid events.SessionID) *session {
	key := events.SessionKey(ns, sid)
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[key]
	if sess == nil {
		sess = newSession(s, ns, sid)
		s.sessions[key] = sess
		s.m.sessionsLoaded.Set(float64(len(s.sessions)))
	}
	return sess
}

// forget drops sess from memory, so the next request rebuilds it from the
// log. The caller holds sess.mu.
func (s *Service) forget(sess *session) {
	key := events.SessionKey(sess.ns, sess.sid)
	s.mu.Lock()
	if s.sessions[key] == sess {
		delete(s.sessions, key)
	}
	s.m.sessionsLoaded.Set(float64(len(s.sessions)))
	s.mu.Unlock()
}

// keep puts sess back among the sessions held when it was forgotten while
// its caller waited for its lock; if another holder took its place, the
// caller must retry with that one.
func (s *Service) keep(sess *session) error {
	key := sess.key()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch cur := s.sessions[key]; cur {
	case sess:
		return nil
	case nil:
		s.sessions[key] = sess
		s.m.sessionsLoaded.Set(float64(len(s.sessions)))
		return nil
	default:
		return events.Errorf(events.CodeUnavailable, "session %s was reloaded while the request waited; retry", key)
	}
}

// loaded returns the sessions held now.
func (s *Service) loaded() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.sessions))
}

func (s *Service) releaseAll() {
	for _, sess := range s.loaded() {
		sess.mu.Lock()
		sess.release(errShuttingDown)
		sess.mu.Unlock()
	}
}

// claimWorkers claim sessions concurrently; claimQueueLen keys wait.
const (
	claimWorkers  = 16
	claimQueueLen = 1024
)

// follow hands f each entry w delivers until ctx is done or w ends, then
// stops w.
func follow(ctx context.Context, w jetstream.KeyWatcher, f func(jetstream.KeyValueEntry)) {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				f(e)
			}
		}
	}
}
