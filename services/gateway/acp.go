package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"skein.dev/internal/acpbridge"
	"skein.dev/internal/lifecycle"
	"skein.dev/pkg/events"
)

// The ACP endpoint, /acp: an editor that speaks the Agent Client Protocol
// to an agent connects to the gateway instead, over one of ACP's two
// remote profiles (the Streamable HTTP and WebSocket transport RFD, as the
// official SDKs' clients speak it), and each connection is served by the
// ACP bridge (internal/acpbridge) as an agent whose sessions are Skein's.
//
//   - WebSocket: GET /acp with Upgrade: websocket. Every JSON-RPC message
//     is one text frame, both ways (acpws.go).
//   - Streamable HTTP: POST /acp carries the client's messages, GET /acp
//     with Accept: text/event-stream opens the streams the bridge's come
//     on, DELETE /acp ends the connection (acphttp.go).
//
// Every request of either profile is authenticated, bounded and limited
// as every other route's (routes: the same wrapper), before anything else:
// no token is 401, the WebSocket's upgrade included. Every role may
// connect: the bridge is a client of the public API (acpinproc.go) that
// sends the caller's own Authorization (and X-Skein-Namespace) on each of
// its calls, so each call is authorized, role-checked and rate-limited as
// the caller's own request would be: a read token loads and follows a
// session, and its prompt is refused (403) by the route it reaches.
//
// A connection belongs to the token and namespace that opened it: a
// request of the Streamable HTTP profile carrying another finds no such
// connection (404), so a connection ID that leaks gives nobody else its
// sessions. A principal
// holds at most Config.ACPMaxConns connections of both profiles at once
// (the next is 429 rate_limited, with Retry-After); a connection ends
// when its client closes it, after Config.ACPIdleTimeout without a
// receiver or a message (Streamable HTTP) or an answered ping
// (WebSocket), when its token no longer grants it, and when the gateway
// stops: Run returns after every bridge and every request a bridge made
// has ended (acpEndpoint.work). Sessions outlive their connections: a
// turn a connection started runs on, and another connection loads it.

// acpPath is the endpoint's one URL.
const acpPath = "/acp"

// The transport's headers.
const (
	headerACPConnectionID = "Acp-Connection-Id"
	headerACPSessionID    = "Acp-Session-Id"
)

// acpRoutes are the endpoint's routes. They are served as routeTable's
// are, but are not in it: one URL that speaks two protocols is not a REST
// resource openapi.json could describe, and its refusals are the
// transport's (docs/API.md, "/acp").
var acpRoutes = []route{
	{http.MethodGet, acpPath, (*Gateway).handleACPGet},
	{http.MethodPost, acpPath, (*Gateway).handleACPPost},
	{http.MethodDelete, acpPath, (*Gateway).handleACPDelete},
}

// acpBridgeBaseURL is the bridge's API base URL. inProcess ignores the
// host, which the .invalid domain keeps from ever resolving elsewhere.
const acpBridgeBaseURL = "http://gateway.skein.invalid"

// Log keys of the endpoint.
const (
	logKeyACPConnection = "acp_connection"
	logKeyTransport     = "transport"
)

// The transports, the values of the transport label.
const (
	acpTransportHTTP      = "http"
	acpTransportWebSocket = "websocket"
)

// Why a connection ended, the values of the reason label of
// acp_gateway_acp_connection_ends_total.
const (
	acpEndClosed   = "closed"   // its client closed it (DELETE, the WebSocket's close) or went away
	acpEndIdle     = "idle"     // nothing came for ACPIdleTimeout, or a ping went unanswered
	acpEndShutdown = "shutdown" // the gateway is stopping
	acpEndOverflow = "overflow" // its client left more unread than its streams hold
	acpEndRevoked  = "revoked"  // its token no longer grants it
	acpEndError    = "error"    // the bridge or the transport failed
)

// acpEndpoint holds the ACP connections of a gateway.
type acpEndpoint struct {
	// work is every bridge of a Streamable HTTP connection, its watchdog,
	// and every in-process request of any bridge (a WebSocket's bridge
	// runs in its upgrade's handler). Closed by Run, after the handlers.
	work lifecycle.Group

	mu    sync.Mutex
	conns map[string]*acpHTTPConn // the Streamable HTTP connections, by ID
	held  map[string]int          // connections of both profiles, by limit key
}

func newACPEndpoint() *acpEndpoint {
	return &acpEndpoint{conns: map[string]*acpHTTPConn{}, held: map[string]int{}}
}

// admit takes one of key's max connections; release gives it back, once.
func (e *acpEndpoint) admit(key string, max int) (release func(), ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held[key] >= max {
		return nil, false
	}
	e.held[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.held[key]--; e.held[key] <= 0 {
				delete(e.held, key)
			}
		})
	}, true
}

// shutdown ends every connection left and waits for every bridge and
// in-process request. Run calls it once the HTTP handlers have returned
// (the WebSocket bridges with them).
func (e *acpEndpoint) shutdown() {
	e.mu.Lock()
	conns := make([]*acpHTTPConn, 0, len(e.conns))
	for _, c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	for _, c := range conns {
		c.end(acpEndShutdown)
	}
	e.work.Close()
}

// acpOwner is who opened a connection: the only caller its requests may
// come from.
type acpOwner struct {
	key    string // its limit key (limitKey)
	caller caller // zero when authentication is off
	authed bool
}

func (g *Gateway) acpOwnerOf(r *http.Request) acpOwner {
	c, ok := r.Context().Value(callerKey{}).(caller)
	return acpOwner{key: g.limitKey(r), caller: c, authed: ok}
}

// admits reports whether r comes from o: the same token, in the same
// namespace.
func (o acpOwner) admits(r *http.Request) bool {
	if !o.authed {
		return true
	}
	c, ok := r.Context().Value(callerKey{}).(caller)
	return ok && c.token == o.caller.token && c.ns == o.caller.ns
}

// revoked reports whether o's token no longer grants what it opened.
func (g *Gateway) acpRevoked(o acpOwner) bool {
	return o.authed && g.auth != nil && !g.auth.granted(o.caller)
}

// acpNamespace is r's namespace, for a log line.
func acpNamespace(g *Gateway, r *http.Request) events.Namespace {
	ns, _ := g.namespace(r)
	return ns
}

// newACPConnectionID returns a connection ID: 130 random bits, so that it
// cannot be guessed (though a guess would still need the owner's token).
func newACPConnectionID() string { return rand.Text() }

// bridgeConfig is the configuration of the bridge serving r's connection
// id: the caller's credentials, and an API client that serves each of its
// calls with the gateway's own handler.
func (g *Gateway) bridgeConfig(r *http.Request, lg *slog.Logger) acpbridge.Config {
	hdr := http.Header{}
	for _, k := range []string{"Authorization", HeaderNamespace} {
		if v := r.Header.Values(k); len(v) > 0 {
			hdr[k] = slices.Clone(v)
		}
	}
	// The defaults of the connection's new sessions, as skein acp's flags
	// give them: /acp?agent=claude&policy=allow_all.
	q := r.URL.Query()
	return acpbridge.Config{
		BaseURL: acpBridgeBaseURL,
		Header:  hdr,
		Agent:   q.Get("agent"),
		Policy:  q.Get("policy"),
		Client:  &http.Client{Transport: &inProcess{h: g.handler, work: &g.acp.work, lg: lg, remoteAddr: r.RemoteAddr}},
		Logger:  lg,
	}
}

// acpServeEnd names why a bridge's Serve returned with err, on a
// connection not already ended for another reason.
func acpServeEnd(err error) string {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return acpEndClosed
	}
	return acpEndError
}

// handleACPGet serves GET /acp: a WebSocket upgrade, or a Streamable HTTP
// connection's event stream.
func (g *Gateway) handleACPGet(w http.ResponseWriter, r *http.Request) error {
	if headerHasToken(r.Header, "Upgrade", "websocket") {
		return g.acpWebSocket(w, r)
	}
	return g.acpEventStream(w, r)
}

// headerHasToken reports whether a comma-separated list header of h holds
// token, in any case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
