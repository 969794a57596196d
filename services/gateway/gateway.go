// Package gateway is Skein's public edge: an HTTP/JSON API and a
// Server-Sent Events stream in front of the request API on NATS. It holds no
// session state. Every operation is one request to the session or history
// service (rpc.Call on events.APISubject), and the live stream is a
// subscription to the session log's RePublish (events.TailSubject) and to
// the ephemeral deltas (events.LiveSubject), backfilled and gap-filled from
// history. Every viewer of a session on one gateway shares that one pair of
// subscriptions (hub.go).
//
// The gateway validates and bounds input (IDs, cursors, body size, JSON
// shape) so that bad input never reaches NATS, maps error codes to HTTP
// statuses in one table (internal/errmap), and masks internal errors: the
// client gets a request ID, the log gets the full error.
//
// # Routes
//
//	PUT  /v1/sessions/{id}               open (idempotent): AcpOpenSessionRequest fields as JSON → 200 {}
//	GET  /v1/sessions/{id}               AcpDurableSessionInfo as JSON
//	DELETE /v1/sessions/{id}             empty or {} → 200 {}: tear down the runtime, remove metadata and history (idempotent)
//	POST /v1/sessions/{id}/prompt        {"idempotencyKey"?, "content": [...]} → blocks through the turn, reading the log
//	POST /v1/sessions/{id}/cancel        empty or {} → {"status"}: cancelled, no_active_prompt, or the turn's outcome
//	POST /v1/sessions/{id}/unload        empty or {} → 200 {}: stop the adapter, keep metadata and history
//	POST /v1/sessions/{id}/permissions/{requestId}
//	                                     {"optionId"} → {"status":"accepted"} | {"status":"not_pending","reason"}
//	POST /v1/sessions/{id}/inputs/{requestId}
//	                                     {"action","content"?} → {"status":"accepted"} | {"status":"not_pending","reason"}
//	GET  /v1/sessions/{id}/history       ?after=N | ?before=N, &limit=N → a page of public events
//	GET  /v1/sessions/{id}/events        SSE, resumable with Last-Event-ID or ?after=N
//	GET  /v1/sessions/{id}/config        {"revision", "options":[...]}: the agent's config options, no adapter started
//	PUT  /v1/sessions/{id}/config/{configId}
//	                                     {"value": string | boolean} → {"revision", "options":[...]}, the whole new collection
//	GET  /v1/sessions/{id}/capabilities  {"capabilities": ... | null}, no adapter started
//	GET  /v1/sessions/{id}/agent-info    {"agentInfo": ... | null}, no adapter started
//	GET  /v1/sessions/{id}/commands      {"commands": [...]}: the agent's last announced commands, no adapter started
//	GET  /v1/agents                      {"agents":[{"id","installed","adapterEntrypoint"}...]}, sorted by ID
//	POST /v1/webhooks, GET /v1/webhooks, DELETE /v1/webhooks/{id}, GET /v1/webhooks/{id}/deliveries
//	                                     signed, durable webhooks of the namespace (webhooks.go)
//	GET  /acp                            Upgrade: websocket → ACP over WebSocket (acpws.go); else
//	                                     Accept: text/event-stream → a Streamable HTTP connection's stream
//	POST /acp                            one ACP message of a Streamable HTTP connection (acphttp.go)
//	DELETE /acp                          ends a Streamable HTTP connection
//	GET  /healthz, /readyz
//	GET  /ui/                            the web console (ui.go); GET / redirects there
//
// Errors are {"error":{"code","message","requestId"}} with the status of the
// code (internal/errmap). Every response carries the X-Request-Id header.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/lifecycle"
	"skein.dev/internal/storewatch"
	"skein.dev/pkg/events"
)

// Gateway serves the HTTP API. Create it with New and start it with Run.
type Gateway struct {
	cfg     Config
	lg      *slog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream // reads of the session log (a prompt's wait)
	metrics *metrics
	handler http.Handler
	hub     *hub // the live feeds of event streams, one per watched session
	acp     *acpEndpoint
	limits  *limiter
	auth    *authenticator    // nil when authentication is off
	backoff *authBackoff      // of addresses failing authentication; nil when it is off
	store   *storewatch.Watch // whether JetStream's store refuses writes (storefull.go)

	// streamSubscribed, set by tests only (export_test.go), runs once an
	// event stream's subscriptions are on the server and before its
	// backfill: a test holds a stream there to store a record it must
	// receive both ways.
	streamSubscribed func()

	ready    chan struct{}
	stopping chan struct{} // closed when Run begins shutting down
	stopOnce sync.Once

	mu   sync.Mutex
	addr string
}

// New returns a Gateway. It validates cfg and does no I/O. reg receives the
// gateway's metrics; it may be nil.
func New(cfg Config, lg *slog.Logger, nc *nats.Conn, reg prometheus.Registerer) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	if lg == nil {
		return nil, errors.New("gateway: nil logger")
	}
	if nc == nil {
		return nil, errors.New("gateway: nil NATS connection")
	}
	js, err := jetstream.New(nc) // no I/O
	if err != nil {
		return nil, fmt.Errorf("gateway: jetstream: %w", err)
	}
	g := &Gateway{
		cfg:      cfg,
		lg:       lg.With("svc", "gateway"),
		nc:       nc,
		js:       js,
		store:    storewatch.New(js),
		metrics:  newMetrics(reg, nc),
		ready:    make(chan struct{}),
		stopping: make(chan struct{}),
	}
	g.hub = newHub(g)
	g.acp = newACPEndpoint()
	g.limits = newLimiter(&g.cfg)
	// The one read New makes: a tokens file that does not parse stops
	// the start rather than refusing every request.
	if g.auth, err = newAuthenticator(cfg.Auth, g.lg); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.auth != nil {
		g.backoff = newAuthBackoff(cfg.AuthFailuresFree, cfg.AuthBackoffMax)
	}
	g.handler = g.limitBodies(g.instrument(g.unmatched(g.routes())))
	return g, nil
}

// Handler returns the gateway's HTTP handler, for serving it in-process
// (httptest) without Run. Event streams served this way end only when their
// client goes away.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Ready is closed once Run listens; Addr is then valid.
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// Addr returns the address Run listens on, or "" before Ready is closed.
func (g *Gateway) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// Run listens on cfg.Addr and serves until ctx is done. Then it fails
// /readyz, ends every event stream (their clients resume with
// Last-Event-ID), stops accepting connections and waits up to
// cfg.ShutdownTimeout for in-flight requests before closing the rest. It
// returns nil after a clean shutdown, or the error that stopped it. Call it
// once.
func (g *Gateway) Run(ctx context.Context) error {
	ln, err := g.cfg.Listener, error(nil)
	if ln == nil {
		if ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", g.cfg.Addr); err != nil {
			return fmt.Errorf("gateway: listen %s: %w", g.cfg.Addr, err)
		}
	}
	// http.Server's Shutdown waits for no handler once its bound passed,
	// and Close for none at all: the handlers are counted, so that Run
	// returns after the last, and the event streams' feeds with them.
	var handlers lifecycle.Group
	srv := &http.Server{
		Handler:           counted(&handlers, g.handler),
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout,
		IdleTimeout:       g.cfg.IdleTimeout,
		// The server refuses past twice the limit, untyped (431); up to
		// there, checkRequest answers the typed error.
		MaxHeaderBytes: 2 * g.cfg.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(g.lg.Handler(), slog.LevelWarn),
		// Request contexts descend from ctx's values but not its
		// cancellation: a prompt in flight survives the start of shutdown
		// and gets ShutdownTimeout to finish.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		Protocols:   serverProtocols(),
	}
	ln = newLimitListener(ln, g.cfg.MaxConnsPerAddr)
	g.mu.Lock()
	g.addr = ln.Addr().String()
	g.mu.Unlock()
	close(g.ready)
	// The effective configuration is logged once by the binary, with every
	// other service's (cmd/skein, configlog.go), secrets redacted.
	g.lg.Info("gateway listening", logKeyAddr, ln.Addr().String())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	var tokens sync.WaitGroup
	if g.auth != nil {
		tctx, stopTokens := context.WithCancel(ctx)
		defer func() {
			stopTokens()
			tokens.Wait()
		}()
		tokens.Go(func() { g.auth.watchTokens(tctx) })
	}

	select {
	case err := <-serveErr:
		g.stop()
		_ = srv.Close()
		handlers.Close()
		g.acp.shutdown()
		g.hub.shutdown()
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	g.lg.Info("gateway shutting down", logKeyCause, context.Cause(ctx))
	g.stop()
	// A fresh context: ctx is already done (STYLE R12, R14).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if err != nil {
		g.lg.Warn("gateway shutdown incomplete, closing connections", events.LogKeyErr, err)
		err = srv.Close()
	}
	// Closing connections does not wait for their handlers: they are
	// waited for (their requests' contexts ended with their connections),
	// then the ACP bridges and their requests (the WebSocket ones ended
	// with their handlers), and then the live feeds, which end with their
	// last stream or watch.
	handlers.Close()
	g.acp.shutdown()
	g.hub.shutdown()
	if serr := <-serveErr; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("gateway: serve: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("gateway: close: %w", err)
	}
	return nil
}

// serverProtocols are the HTTP versions the gateway speaks: HTTP/1.1,
// which Node's fetch (the official ACP SDK's Streamable HTTP client) and
// every WebSocket upgrade use; HTTP/2 over TLS, for a listener that
// terminates it; and HTTP/2 without TLS (h2c, with prior knowledge), which
// the ACP transport RFD asks of Streamable HTTP, for clients and proxies
// that speak it to a plain-text port.
func serverProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// counted returns h run as work of handlers: once handlers is closed, a
// request read just as the server closed is refused.
func counted(handlers *lifecycle.Group, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !handlers.Do(func() { h.ServeHTTP(w, r) }) {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
}

// stop marks the gateway as stopping: /readyz fails and event streams end.
func (g *Gateway) stop() { g.stopOnce.Do(func() { close(g.stopping) }) }

// namespace maps a request to the namespace it may act in: the one its
// bearer token resolved to (auth.go), or events.DefaultNamespace when
// authentication is off. Never one the request names by itself.
func (g *Gateway) namespace(r *http.Request) (events.Namespace, error) {
	if c, ok := r.Context().Value(callerKey{}).(caller); ok {
		return c.ns, nil
	}
	if g.auth != nil {
		return "", errUnauthenticated // a route authenticate did not see
	}
	return events.DefaultNamespace, nil
}

// route is one HTTP route. docs/openapi.json describes the same set;
// TestOpenAPIMatchesRoutes keeps them equal.
type route struct {
	method, path string
	handler      handler
}

// handler serves one route. It returns an error only if it has written
// nothing: the error is then the answer (writeError).
type handler func(g *Gateway, w http.ResponseWriter, r *http.Request) error

var routeTable = []route{
	{http.MethodGet, "/v1/sessions", (*Gateway).handleListSessions},
	{http.MethodPut, "/v1/sessions/{id}", (*Gateway).handleOpen},
	{http.MethodGet, "/v1/sessions/{id}", (*Gateway).handleGetSession},
	{http.MethodDelete, "/v1/sessions/{id}", (*Gateway).handleDelete},
	{http.MethodPatch, "/v1/sessions/{id}", (*Gateway).handleRename},
	{http.MethodPost, "/v1/sessions/{id}/prompt", (*Gateway).handlePrompt},
	{http.MethodPost, "/v1/sessions/{id}/cancel", (*Gateway).handleCancel},
	{http.MethodGet, "/v1/sessions/{id}/queue", (*Gateway).handleQueue},
	{http.MethodDelete, "/v1/sessions/{id}/queue/{queueId}", (*Gateway).handleWithdraw},
	{http.MethodPost, "/v1/sessions/{id}/unload", (*Gateway).handleUnload},
	{http.MethodPost, "/v1/sessions/{id}/permissions/{requestId}", (*Gateway).handleRespond},
	{http.MethodPost, "/v1/sessions/{id}/inputs/{requestId}", (*Gateway).handleRespondInput},
	{http.MethodGet, "/v1/sessions/{id}/history", (*Gateway).handleHistory},
	{http.MethodGet, "/v1/sessions/{id}/events", (*Gateway).handleEvents},
	{http.MethodGet, "/v1/sessions/{id}/watch", (*Gateway).handleWatch},
	{http.MethodGet, "/v1/sessions/{id}/config", (*Gateway).handleGetConfig},
	{http.MethodPut, "/v1/sessions/{id}/config/{configId}", (*Gateway).handleSetConfig},
	{http.MethodGet, "/v1/sessions/{id}/capabilities", (*Gateway).handleCapabilities},
	{http.MethodGet, "/v1/sessions/{id}/agent-info", (*Gateway).handleAgentInfo},
	{http.MethodGet, "/v1/sessions/{id}/commands", (*Gateway).handleCommands},
	{http.MethodPost, "/v1/sessions/{id}/discard", (*Gateway).handleDiscard},
	{http.MethodPost, "/v1/sessions/{id}/fork", (*Gateway).handleFork},
	{http.MethodPost, "/v1/sessions/{id}/files/uploads", (*Gateway).handleFileBegin},
	{http.MethodPut, "/v1/sessions/{id}/files/uploads/{transferId}", (*Gateway).handleFileWrite},
	{http.MethodPost, "/v1/sessions/{id}/files/uploads/{transferId}/commit", (*Gateway).handleFileCommit},
	{http.MethodDelete, "/v1/sessions/{id}/files/uploads/{transferId}", (*Gateway).handleFileCancel},
	{http.MethodGet, "/v1/sessions/{id}/files", (*Gateway).handleFileList},
	{http.MethodGet, "/v1/sessions/{id}/files/content", (*Gateway).handleFileContent},
	{http.MethodGet, "/v1/agents", (*Gateway).handleListAgents},
	{http.MethodGet, "/v1/directories", (*Gateway).handleDirectories},
	{http.MethodPost, "/v1/webhooks", (*Gateway).handleCreateWebhook},
	{http.MethodGet, "/v1/webhooks", (*Gateway).handleListWebhooks},
	{http.MethodDelete, "/v1/webhooks/{id}", (*Gateway).handleDeleteWebhook},
	{http.MethodGet, "/v1/webhooks/{id}/deliveries", (*Gateway).handleWebhookDeliveries},
	{http.MethodGet, "/healthz", (*Gateway).handleHealthz},
	{http.MethodGet, "/readyz", (*Gateway).handleReadyz},
}

// routes returns the API's ServeMux, one handler per row of routeTable.
func (g *Gateway) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, r := range slices.Concat(routeTable, acpRoutes) {
		h := r.handler
		mux.HandleFunc(r.method+" "+r.path, func(w http.ResponseWriter, req *http.Request) {
			if err := g.checkRequest(req); err != nil {
				g.writeError(w, req, err)
				return
			}
			req, err := g.authenticate(w, req, r)
			if err != nil {
				g.writeError(w, req, err)
				return
			}
			if !probes[r.path] {
				release, wait, ok := g.limits.admit(g.limitKey(req), holds[r.path], time.Now())
				if !ok {
					g.writeError(w, req, rateLimited(w, wait))
					return
				}
				defer release()
			}
			if err := h(g, w, req); err != nil {
				g.writeError(w, req, err)
			}
		})
	}
	mountUI(mux)
	return mux
}

// checkRequest refuses a request whose line and headers together pass
// Config.MaxHeaderBytes, before anything reads it further.
func (g *Gateway) checkRequest(r *http.Request) error {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if n > g.cfg.MaxHeaderBytes {
		return events.Errorf(events.CodePayloadTooLarge, "the request's line and headers are %d bytes, more than %d", n, g.cfg.MaxHeaderBytes)
	}
	return nil
}

func (g *Gateway) handleHealthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, healthzBody())
	return nil
}

// handleReadyz reports whether the gateway should receive traffic: it is
// not stopping, its NATS connection is up, JetStream's store takes writes
// (storefull.go), and its process is not near its descriptor or thread
// limit (procload.go).
func (g *Gateway) handleReadyz(w http.ResponseWriter, r *http.Request) error {
	select {
	case <-g.stopping:
		g.metrics.unready.WithLabelValues(unreadyStopping).Inc()
		writeJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"stopping"}`))
		return nil
	default:
	}
	if !g.nc.IsConnected() {
		g.metrics.unready.WithLabelValues(unreadyNATS).Inc()
		writeJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"nats disconnected"}`))
		return nil
	}
	if body, full := g.storageFullBody(r.Context()); full {
		g.metrics.unready.WithLabelValues(unreadyStorageFull).Inc()
		writeJSON(w, http.StatusServiceUnavailable, body)
		return nil
	}
	if reason, status := readProcLoad().near(g.cfg.ReadyMaxLoad); reason != "" {
		g.metrics.unready.WithLabelValues(reason).Inc()
		writeJSON(w, http.StatusServiceUnavailable, unreadyBody(reason, status))
		return nil
	}
	writeJSON(w, http.StatusOK, []byte(`{"status":"ready"}`))
	return nil
}
