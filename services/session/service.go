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
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Service is the session service.
type Service struct {
	cfg   Config
	lg    *slog.Logger
	nc    *nats.Conn
	m     *metrics
	token string // this replica's writer identity, in every Nats-Msg-Id
	ready chan struct{}

	// Set by Run.
	js      jetstream.JetStream
	meta    jetstream.KeyValue
	runners *runnerDirectory
	runCtx  context.Context
	// maxRecord is the largest log record (Config.MaxRecordBytes, or the
	// server's max payload less room for the envelope and headers).
	maxRecord int

	mu       sync.Mutex
	sessions map[string]*session
	inflight sync.WaitGroup
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
		token:    nuid.Next(),
		ready:    make(chan struct{}),
		sessions: map[string]*session{},
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
	if err := eventlog.Provision(ctx, js, eventlog.Options{Replicas: s.cfg.Replicas}, true); err != nil {
		return err
	}
	s.js = js
	if s.meta, err = js.KeyValue(ctx, events.BucketSessions); err != nil {
		return fmt.Errorf("sessions bucket: %w", err)
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
	defer cancel()
	s.runCtx = runCtx
	if s.runners, err = watchRunners(runCtx, runnersKV, s.lg, s.runnerGone); err != nil {
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
		if err := svc.AddEndpoint(string(op), s.serve(runCtx, op, h), micro.WithEndpointSubject(events.APIWildcard(op))); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("endpoint %s: %w", op, err)
		}
	}
	// Subscriptions are in place on the server once the connection is
	// flushed; only then may clients on other connections find them.
	if err := s.nc.FlushTimeout(flushTimeout); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("flush subscriptions: %w", err)
	}
	close(s.ready)
	s.lg.Info("session service ready")

	go s.sweep(runCtx)
	go s.adopt(runCtx)
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
	s.releaseAll()
	return nil
}

// serve adapts an op handler to nats micro. Each request runs in its own
// goroutine: a prompt blocks through its turn, and must not hold up others.
func (s *Service) serve(ctx context.Context, op events.Op, h events.OpHandler) micro.HandlerFunc {
	return func(req micro.Request) {
		s.inflight.Go(func() { events.ServeOp(ctx, s.nc, s.lg, op, h, req) })
	}
}

// recordHeadroom is what a log record needs beyond its update's JSON: the
// msgpack envelope and the headers.
const recordHeadroom = 16 << 10

// sweep runs every SweepInterval. While a turn runs it is the safety net
// of the live tail: records a lost core message left unseen are read from
// the stream. Otherwise it reclaims adapters idle past IdleTimeout or older
// than MaxAdapterAge.
func (s *Service) sweep(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
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
			}
			sess.mu.Unlock()
		}
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

// loaded returns the sessions held now.
func (s *Service) loaded() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.sessions))
}

func (s *Service) releaseAll() {
	for _, sess := range s.loaded() {
		sess.mu.Lock()
		sess.release(events.Errorf(events.CodeUnavailable, "session service shutting down"))
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
		return nil, events.Errorf(events.CodeUnavailable, "session service shutting down")
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
	// respondPermission names its session explicitly: it never defaults to main.
	if req.SessionID == "" {
		return nil, events.Errorf(events.CodeInvalidSessionID, "respondPermission needs a session ID")
	}
	sid, err := events.ParseSessionID(req.SessionID)
	if err != nil {
		return nil, err
	}
	if req.RequestID == "" || req.OptionID == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "requestId and optionId are required")
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

// adopt loads, at start-up, every session whose projection says a turn was
// running: a turn whose adapter still works on it is taken over and
// completes; any other open turn is closed. Without this, such a turn would
// wait for the next request to touch its session.
func (s *Service) adopt(ctx context.Context) {
	keys, err := s.meta.ListKeys(ctx)
	if err != nil {
		s.lg.Warn("list sessions to adopt", events.LogKeyErr, err)
		return
	}
	for key := range keys.Keys() {
		e, err := s.meta.Get(ctx, key)
		if err != nil {
			continue
		}
		m, err := events.Decode[events.SessionMeta](e.Value())
		if err != nil {
			continue
		}
		var state struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(m.Info.State, &state) != nil || (state.Status != "running" && state.Status != "waiting") {
			continue
		}
		ns, err := events.ParseNamespace(m.Namespace)
		if err != nil {
			continue
		}
		sid, err := events.ParseSessionID(m.Info.SessionID)
		if err != nil {
			continue
		}
		sess := s.session(ns, sid)
		sess.mu.Lock()
		if err := sess.load(ctx); err != nil {
			sess.lg.Warn("adopt session", events.LogKeyErr, err)
		}
		sess.mu.Unlock()
	}
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
