// Package session owns session policy and the per-session state machine. It
// is the only writer of a session's log (ACP_LOG): it opens sessions, accepts
// prompts, attaches adapters through the adapter-runners, applies what the
// adapters said (ACP_IO) to the log, and publishes live deltas.
//
// A session's state lives in memory only as a projection of its log; any
// replica can rebuild it by reading the log.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Service is the session service.
type Service struct {
	cfg Config
	lg  *slog.Logger
	nc  *nats.Conn
	m   *metrics
	// token is this replica's identity, set by Run: its nats micro
	// instance ID (so `nats micro ls` names the holders of ACP_OWNERS
	// leases), its owner lease value, and part of every Nats-Msg-Id it
	// writes.
	token string
	ready chan struct{}

	// Set by Run.
	js      jetstream.JetStream
	meta    jetstream.KeyValue
	owners  jetstream.KeyValue
	runners *runnerDirectory
	// claimQueue takes the keys of sessions this replica should try to
	// claim: at start-up, and whenever a lease ends.
	claimQueue chan string
	live       liveness
	runCtx     context.Context
	// maxRecord is the largest log record (Config.MaxRecordBytes, or the
	// server's max payload less room for the envelope and headers).
	maxRecord int

	mu       sync.Mutex
	sessions map[string]*session
	inflight sync.WaitGroup
	// bg tracks the goroutines Run starts besides the requests: the sweep,
	// lease renewal, claims, the KV watches. Run returns after them.
	bg sync.WaitGroup
}

// New returns a Service; it does no I/O. Call Run to start it.
func New(cfg Config, lg *slog.Logger, nc *nats.Conn, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{
		cfg:      cfg,
		lg:       lg.With("svc", "session"),
		nc:       nc,
		m:        newMetrics(reg),
		ready:    make(chan struct{}),
		sessions: map[string]*session{},

		claimQueue: make(chan string, claimQueueLen),
	}, nil
}

// Ready is closed once Run serves requests.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves the session API until ctx is done. Then it stops taking
// requests, waits up to DrainWait for requests in flight, releases every
// session it holds, and returns nil.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	if err := eventlog.Provision(ctx, js, eventlog.Options{Replicas: s.cfg.Replicas, OwnerTTL: s.cfg.OwnerTTL}, true); err != nil {
		return err
	}
	s.js = js
	if s.meta, err = js.KeyValue(ctx, events.BucketSessions); err != nil {
		return fmt.Errorf("sessions bucket: %w", err)
	}
	if s.owners, err = js.KeyValue(ctx, events.BucketOwners); err != nil {
		return fmt.Errorf("owners bucket: %w", err)
	}
	runnersKV, err := js.KeyValue(ctx, events.BucketRunners)
	if err != nil {
		return fmt.Errorf("runners bucket: %w", err)
	}
	s.maxRecord = s.cfg.MaxRecordBytes
	if s.maxRecord <= 0 {
		s.maxRecord = int(s.nc.MaxPayload()) - recordHeadroom
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer s.bg.Wait()
	defer cancel()
	s.runCtx = runCtx
	if s.runners, err = watchRunners(runCtx, &s.bg, runnersKV, s.lg, s.runnerGone); err != nil {
		return err
	}

	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        events.APIServiceSession,
		Version:     "0.1.0",
		Description: "Skein session service: the single writer of session logs",
		QueueGroup:  events.APIServiceSession,
	})
	if err != nil {
		return fmt.Errorf("session service: %w", err)
	}
	s.token = svc.Info().ID
	handlers := map[events.Op]events.OpHandler{
		events.OpOpenSession:            s.handleOpen,
		events.OpPrompt:                 s.handlePrompt,
		events.OpCancelPrompt:           s.handleCancel,
		events.OpUnloadSession:          s.handleUnload,
		events.OpDeleteSession:          s.handleDelete,
		events.OpSetSessionConfigOption: s.handleSetConfig,

		events.OpRespondPermission: s.handleRespond,
	}
	for op, h := range handlers {
		// Requests to the API reach any replica (a queue group), which
		// forwards those for sessions another replica owns to that one's
		// own endpoint.
		err := svc.AddEndpoint(string(op), s.serve(runCtx, op, s.routed(op, h)), micro.WithEndpointSubject(events.APIWildcard(op)))
		if err == nil {
			err = svc.AddEndpoint(string(op)+"-owned", s.serve(runCtx, op, h),
				micro.WithEndpointSubject(events.OwnerSubject(s.token, "*", op)), micro.WithEndpointQueueGroupDisabled())
		}
		if err != nil {
			_ = svc.Stop()
			return fmt.Errorf("endpoint %s: %w", op, err)
		}
	}
	if err := s.watchLeases(runCtx); err != nil {
		_ = svc.Stop()
		return err
	}
	// Subscriptions are in place on the server once the connection is
	// flushed; only then may clients on other connections find them.
	if err := s.nc.FlushTimeout(flushTimeout); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("flush subscriptions: %w", err)
	}
	close(s.ready)
	s.lg.Info("session service ready")

	s.bg.Go(func() { s.sweep(runCtx) })
	s.bg.Go(func() { s.renewLeases(runCtx) })
	for range claimWorkers {
		s.bg.Go(func() { s.claimer(runCtx) })
	}
	s.bg.Go(func() { s.adopt(runCtx) })
	<-ctx.Done()
	_ = svc.Stop()
	drained := make(chan struct{})
	go func() { s.inflight.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(s.cfg.DrainWait):
		s.lg.Warn("requests still in flight at shutdown")
	}
	cancel()
	s.bg.Wait() // no claim may take a lease after releaseAll gives them up
	s.releaseAll()
	return nil
}

// serve adapts an op handler to nats micro. Each request runs in its own
// goroutine: a prompt blocks through its turn, and must not hold up others.
func (s *Service) serve(ctx context.Context, op events.Op, h events.OpHandler) micro.HandlerFunc {
	// A request cut short because the service stops is told to retry
	// (elsewhere), not that something broke.
	guarded := func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
		v, err := h(ctx, ns, data)
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil, errShuttingDown
		}
		return v, err
	}
	return func(req micro.Request) {
		s.inflight.Go(func() { events.ServeOp(ctx, s.nc, s.lg, op, guarded, req) })
	}
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
	every(ctx, s.cfg.SweepInterval, func() bool { s.sweepOnce(ctx); return true })
}

func (s *Service) sweepOnce(ctx context.Context) {
	now := time.Now()
	for _, sess := range s.loaded() {
		sess.mu.Lock()
		if r := sess.adapter; r != nil && sess.turn != nil {
			sess.catchUp(r, 0)
		} else if reason := sess.reclaimReason(now, s.cfg.IdleTimeout, s.cfg.MaxAdapterAge); reason != "" {
			if err := sess.unloadLocked(ctx, reason); err != nil {
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

// hold puts sess back among the sessions held when it was forgotten while
// its caller waited for its lock; if another holder took its place, the
// caller must retry with that one.
func (s *Service) hold(sess *session) error {
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

func (s *Service) handleOpen(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpOpenSessionRequest](data)
	if err != nil {
		return nil, err
	}
	sid, err := events.OptionalSessionID(req.SessionID)
	if err != nil {
		return nil, err
	}
	opened, err := s.normalizeOpen(req)
	if err != nil {
		return nil, err
	}
	sess := s.session(ns, sid)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.open(ctx, opened); err != nil {
		return nil, err
	}
	return &events.AcpOpenSessionResponse{}, nil
}

func (s *Service) handlePrompt(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpPromptRequest](data)
	if err != nil {
		return nil, err
	}
	sid, err := events.OptionalSessionID(req.SessionID)
	if err != nil {
		return nil, err
	}
	blocks, err := s.validatePrompt(req.Content)
	if err != nil {
		return nil, err
	}
	if err := validateIdempotencyKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	sess := s.session(ns, sid)
	t, err := sess.prompt(ctx, req, blocks)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
		return t.result, t.err
	case <-ctx.Done():
		return nil, errShuttingDown
	}
}

// requestFor decodes a request of type T and finds the session it names
// through id (omitted: main).
func requestFor[T any, PT interface {
	*T
	events.Variant
}](s *Service, ns events.Namespace, data []byte, id func(PT) *string) (PT, *session, error) {
	req, err := events.Decode[T, PT](data)
	if err != nil {
		return nil, nil, err
	}
	sid, err := events.OptionalSessionID(id(req))
	if err != nil {
		return nil, nil, err
	}
	return req, s.session(ns, sid), nil
}

func (s *Service) handleCancel(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	arrived := time.Now()
	_, sess, err := requestFor(s, ns, data, func(r *events.AcpCancelPromptRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	return sess.cancel(ctx, arrived)
}

func (s *Service) handleRespond(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpRespondPermissionRequest](data)
	if err != nil {
		return nil, err
	}
	sid, err := req.Validate()
	if err != nil {
		return nil, err
	}
	return s.session(ns, sid).respond(ctx, req.RequestID, req.OptionID)
}

// flushTimeout bounds the flush that makes subscriptions visible before Run
// reports ready.
const flushTimeout = 10 * time.Second

func (s *Service) handleUnload(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	_, sess, err := requestFor(s, ns, data, func(r *events.AcpUnloadSessionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	if err := sess.unload(ctx, "unload"); err != nil {
		return nil, err
	}
	return &events.AcpUnloadSessionResponse{}, nil
}

func (s *Service) handleDelete(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	_, sess, err := requestFor(s, ns, data, func(r *events.AcpDeleteSessionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	if err := sess.delete(ctx); err != nil {
		return nil, err
	}
	return &events.AcpDeleteSessionResponse{}, nil
}

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

// claimWorkers claim sessions concurrently; claimQueueLen keys wait.
const (
	claimWorkers  = 16
	claimQueueLen = 1024
)

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

// routed serves op for sessions this replica owns, and forwards requests
// for sessions another replica owns to it. A forwarded request whose owner
// is gone (nobody serves its subject) evicts that lease and is served here.
func (s *Service) routed(op events.Op, h events.OpHandler) events.OpHandler {
	return func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
		v, err := h(ctx, ns, data)
		moved, ok := errors.AsType[*ownedElsewhere](err)
		if !ok {
			return v, err
		}
		s.m.forwards.Inc()
		v, err = s.forward(ctx, ns, op, data, moved)
		if err == nil || events.AsError(err).Code != events.CodeUnavailable || s.answers(ctx, moved.owner) {
			return v, err
		}
		s.evictLease(ctx, moved)
		return h(ctx, ns, data)
	}
}

// forward passes a request to the session's owner and returns its answer.
// While it waits (a prompt waits through its turn), the lease is checked
// every third of its TTL: when it leaves that owner, waiting ends with a
// retryable error.
func (s *Service) forward(ctx context.Context, ns events.Namespace, op events.Op, data []byte, to *ownedElsewhere) (events.Variant, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go every(ctx, s.cfg.OwnerTTL/3, func() bool {
		e, err := s.owners.Get(ctx, to.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && string(e.Value()) != to.owner) {
			cancel(events.Errorf(events.CodeUnavailable, "the owner of session %s changed while the request waited; retry", to.key))
			return false
		}
		return true
	})
	v, err := events.RequestMsg(ctx, s.nc, &nats.Msg{Subject: events.OwnerSubject(to.owner, ns, op), Data: data})
	if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && err != nil {
		return nil, cause
	}
	return v, err
}

func (s *Service) handleSetConfig(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor(s, ns, data, func(r *events.AcpSetSessionConfigOptionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	if req.ConfigID == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "configId is required")
	}
	return sess.setConfigOption(ctx, req.ConfigID, req.Value)
}

// every calls f every d until ctx is done or f returns false.
func every(ctx context.Context, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}

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
