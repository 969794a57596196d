package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/lifecycle"
	"skein.dev/pkg/events"
)

// Endpoints is the request side of one service's lifecycle: its nats micro
// service, its endpoints, and every request they are running. Each Skein
// service starts its endpoints with StartEndpoints, adds them with Add, and
// ends them with Stop before its Run returns, so that no request outlives
// the Run that took it.
//
// micro.Service.Stop alone does not give that: it only starts draining the
// endpoints' subscriptions, and a request already delivered still runs, in
// the subscription's callback or in a goroutine its handler started, after
// Stop has returned. Endpoints counts every handler it runs, refuses the
// requests delivered once Stop has begun, and Stop waits for the handlers
// in flight.
type Endpoints struct {
	svc      micro.Service
	nc       *nats.Conn
	lg       *slog.Logger
	stopping error

	// life is the context of every request the endpoints run: it outlives
	// the ctx given to StartEndpoints (a request in flight when its
	// service begins to stop gets Stop's bound to finish), and ends when
	// Stop gives up waiting. It is the one context kept in a struct, as
	// STYLE R12 allows for a context scoped to the lifetime of the work
	// it is handed to: here, the requests of one Run.
	life context.Context
	end  context.CancelFunc

	// inflight is the handlers running; Stop closes it.
	inflight lifecycle.Group
}

// ServiceConfig configures the micro service of StartEndpoints.
type ServiceConfig struct {
	micro.Config
	// Stopping answers the requests delivered once Stop has begun, and
	// those cut short by it (their handler returned the error of a context
	// Stop ended). Nil means CodeUnavailable "<Name> is stopping".
	Stopping error
}

// StartEndpoints adds the micro service cfg describes on nc (AddService),
// with no endpoint yet. Requests' contexts carry ctx's values, not its
// cancellation: Stop ends them.
func StartEndpoints(ctx context.Context, nc *nats.Conn, lg *slog.Logger, cfg ServiceConfig) (*Endpoints, error) {
	svc, err := AddService(nc, cfg.Config)
	if err != nil {
		return nil, err
	}
	stopping := cfg.Stopping
	if stopping == nil {
		stopping = events.Errorf(events.CodeUnavailable, "%s is stopping", cfg.Name)
	}
	life, end := context.WithCancel(context.WithoutCancel(ctx))
	return &Endpoints{svc: svc, nc: nc, lg: lg, stopping: stopping, life: life, end: end}, nil
}

// listenTimeout bounds Listening's flush.
const listenTimeout = 10 * time.Second

// Listening returns once the server holds every subscription made on the
// endpoints' connection so far, the endpoints' and the service's own:
// only then may clients on other connections find them, so a service
// reports ready after it. On an error, the caller stops the endpoints.
func (e *Endpoints) Listening() error {
	if err := e.nc.FlushTimeout(listenTimeout); err != nil {
		return fmt.Errorf("flush subscriptions: %w", err)
	}
	return nil
}

// ID returns the micro service's instance ID ($SRV.INFO, nats micro ls).
func (e *Endpoints) ID() string { return e.svc.Info().ID }

// Endpoint describes one endpoint for Endpoints.Add.
type Endpoint struct {
	// Name is the micro endpoint's name; logs name the op by it.
	Name string
	// Subject is the subject the endpoint serves.
	Subject string
	// Handler answers each request.
	Handler OpHandler
	// Async runs each request in a goroutine of its own, answered by
	// publishing the reply (RespondAsync): for handlers that block, so
	// that one slow request does not hold up the next. Otherwise requests
	// run one at a time in the endpoint's subscription callback, in the
	// order they arrived, answered through micro.
	Async bool
	// NoQueueGroup serves the subject on this instance alone, not in the
	// service's queue group.
	NoQueueGroup bool
	// Namespace returns the namespace the handler is given. Nil means
	// the one the subject names (acp.api.<ns>.<op>); endpoints whose
	// subject names none (the runners') read what they need from the
	// request's headers (RequestHeaders) and set one that returns "".
	Namespace func(micro.Request) (events.Namespace, error)
}

// Add adds ep. Handlers run with a context that carries the request's
// headers (RequestHeaders) and ends when Stop gives up waiting.
func (e *Endpoints) Add(ep Endpoint) error {
	ns := ep.Namespace
	if ns == nil {
		ns = apiNamespace
	}
	serve := func(req micro.Request) {
		serveOp(e.life, e.nc, ep.Async, e.lg, ep.Name, ns, e.guard(ep.Handler), req)
	}
	run := e.inflight.Do
	if ep.Async {
		run = e.inflight.Go
	}
	h := func(req micro.Request) {
		if !run(func() { serve(req) }) {
			_ = RespondError(req, e.stopping)
		}
	}
	opts := []micro.EndpointOpt{micro.WithEndpointSubject(ep.Subject)}
	if ep.NoQueueGroup {
		opts = append(opts, micro.WithEndpointQueueGroupDisabled())
	}
	if err := e.svc.AddEndpoint(ep.Name, micro.HandlerFunc(h), opts...); err != nil {
		return fmt.Errorf("endpoint %s: %w", ep.Name, err)
	}
	return nil
}

// guard answers a request that Stop cut short with e.stopping: the caller
// is told to retry (elsewhere), not that something broke.
func (e *Endpoints) guard(h OpHandler) OpHandler {
	return func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
		v, err := h(ctx, ns, data)
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil, e.stopping
		}
		return v, err
	}
}

// Stop stops the service taking requests, waits up to wait for the
// requests in flight (0: not at all), then ends the context of those
// still running and waits for them to return. It reports whether they all
// finished within wait. Handlers must return once their context is done;
// Stop waits for them without bound. Call it once, after every Add.
func (e *Endpoints) Stop(wait time.Duration) bool {
	drained := make(chan struct{})
	go func() {
		e.inflight.Close()
		close(drained)
	}()
	if err := e.svc.Stop(); err != nil {
		e.lg.Warn("stop the micro service", events.LogKeyErr, err)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	finished := true
	select {
	case <-drained:
	case <-t.C:
		finished = false
		if wait > 0 {
			e.lg.Warn("requests still in flight at shutdown; cancelling them")
		}
	}
	e.end()
	<-drained
	return finished
}

// headersKey is the context key of a request's headers.
type headersKey struct{}

// RequestHeaders returns the headers of the request whose handler ctx was
// given by Endpoints; nil outside one.
func RequestHeaders(ctx context.Context) micro.Headers {
	h, _ := ctx.Value(headersKey{}).(micro.Headers)
	return h
}
