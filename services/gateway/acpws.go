package gateway

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"skein.dev/internal/acpbridge"
	"skein.dev/pkg/events"
)

// The WebSocket profile of /acp: GET /acp with Upgrade: websocket, the
// token on the upgrade request. The 101 carries the connection's
// Acp-Connection-Id; every JSON-RPC message is then one text frame, both
// ways. As the SDK's server does, a binary frame is ignored, and a text
// frame the bridge could not take is answered at once, id null: -32700 for
// one that is not JSON, -32600 for a batch (ACP uses none) or a value
// that is not an object. A message is at most acpbridge.MaxMessageBytes:
// a larger frame closes the socket (1009).
//
// The upgrade is refused (403) when an Origin header names another host
// than the request's: a page elsewhere must not drive a gateway its
// browser reaches, least of all one serving without authentication.
//
// The connection lives in its upgrade's handler, which Run waits for. It
// ends when the client closes the socket, when a ping (one every
// Config.Keepalive) goes unanswered for Config.ACPIdleTimeout, when the
// caller's token no longer grants it (1008), when a write to the client
// takes longer than Config.StreamWriteTimeout, and when the gateway stops
// (1001).

// acpWebSocket upgrades r and serves the connection until it ends.
func (g *Gateway) acpWebSocket(w http.ResponseWriter, r *http.Request) error {
	owner := g.acpOwnerOf(r)
	release, ok := g.acp.admit(owner.key, g.cfg.ACPMaxConns)
	if !ok {
		return rateLimited(w, holdRetry)
	}
	defer release()
	id := newACPConnectionID()
	w.Header().Set(headerACPConnectionID, id)
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		// Accept answered: a handshake that is not one, or a foreign Origin.
		g.lg.Debug("ACP WebSocket refused", logKeyRequestID, requestID(r), events.LogKeyErr, err)
		return nil
	}
	ws.SetReadLimit(acpbridge.MaxMessageBytes)
	lg := g.lg.With(logKeyACPConnection, id, logKeyTransport, acpTransportWebSocket)
	lg.Debug("ACP connection opened", events.LogKeyNamespace, acpNamespace(g, r))
	g.metrics.acpConns.WithLabelValues(acpTransportWebSocket).Inc()

	ctx, cancel := context.WithCancel(context.Background())
	t := &acpWSTransport{ws: ws, writeTimeout: g.cfg.StreamWriteTimeout}
	var (
		ended   acpEndOnce
		watches sync.WaitGroup
	)
	watches.Go(func() { g.acpWatchWS(ctx, ws, owner, &ended) })
	watches.Go(func() { g.acpPing(ctx, ws, &ended) })
	err = acpbridge.Serve(ctx, g.bridgeConfig(r, lg), t)
	served := acpServeEnd(err)
	if served == acpEndError {
		lg.Warn("ACP bridge failed", events.LogKeyErr, err)
	}
	ended.set(served)
	// Close before the context ends: a read that its context ends closes
	// the socket without a word.
	if served == acpEndError {
		_ = ws.Close(websocket.StatusInternalError, "the ACP bridge failed")
	} else {
		_ = ws.Close(websocket.StatusNormalClosure, "")
	}
	cancel()
	watches.Wait()
	reason := ended.get()
	// Open no longer, then ended, as the Streamable HTTP side does: whoever
	// sees the end counted sees the connection gone from the gauge.
	g.metrics.acpConns.WithLabelValues(acpTransportWebSocket).Dec()
	g.metrics.acpEnds.WithLabelValues(reason).Inc()
	lg.Debug("ACP connection ended", logKeyReason, reason)
	return nil
}

// acpEndOnce keeps the first reason a connection ended for.
type acpEndOnce struct {
	mu     sync.Mutex
	reason string
}

func (e *acpEndOnce) set(reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.reason == "" {
		e.reason = reason
	}
}

func (e *acpEndOnce) get() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reason
}

// acpWatchWS closes ws when the gateway stops or the owner's token no
// longer grants the connection, until ctx ends.
func (g *Gateway) acpWatchWS(ctx context.Context, ws *websocket.Conn, owner acpOwner, ended *acpEndOnce) {
	changed := owner.caller.changed
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.stopping:
			ended.set(acpEndShutdown)
			_ = ws.Close(websocket.StatusGoingAway, "the gateway is shutting down")
			return
		case <-changed:
			changed = g.auth.changes()
			if g.acpRevoked(owner) {
				ended.set(acpEndRevoked)
				_ = ws.Close(websocket.StatusPolicyViolation, "the bearer token no longer grants this connection")
				return
			}
		}
	}
}

// acpPing pings the client every Config.Keepalive, so that proxies keep
// the socket and a client that is gone is found, and closes ws when a
// pong does not come within Config.ACPIdleTimeout.
func (g *Gateway) acpPing(ctx context.Context, ws *websocket.Conn, ended *acpEndOnce) {
	t := time.NewTicker(g.cfg.Keepalive)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, g.cfg.ACPIdleTimeout)
		err := ws.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				ended.set(acpEndIdle)
			}
			_ = ws.CloseNow()
			return
		}
	}
}

// acpWSTransport is a WebSocket connection as the bridge's Transport.
type acpWSTransport struct {
	ws           *websocket.Conn
	writeTimeout time.Duration
}

// Read returns the next text frame that holds a JSON object; io.EOF once
// the socket is closed or fails.
func (t *acpWSTransport) Read(ctx context.Context) ([]byte, error) {
	for {
		typ, data, err := t.ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, io.EOF
		}
		if typ != websocket.MessageText {
			continue
		}
		var reply []byte
		switch shapeOf(data) {
		case acpObject:
			return data, nil
		case acpInvalid:
			reply = acpParseError
		case acpBatch:
			reply = acpBatchError
		default:
			reply = acpInvalidError
		}
		if err := t.Write(ctx, reply); err != nil {
			return nil, io.EOF
		}
	}
}

// Write sends msg as one text frame, within writeTimeout: a client that
// reads nothing for that long is closed.
func (t *acpWSTransport) Write(ctx context.Context, msg []byte) error {
	wctx, cancel := context.WithTimeout(ctx, t.writeTimeout)
	defer cancel()
	return t.ws.Write(wctx, websocket.MessageText, msg)
}
