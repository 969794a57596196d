package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"skein.dev/internal/acpbridge"
	"skein.dev/pkg/events"
)

// The Streamable HTTP profile of /acp, as the official SDK's client
// (http-stream.js) speaks it and its reference server (server.js,
// connection.js) answers it.
//
//   - POST /acp with initialize and no Acp-Connection-Id opens a
//     connection: its bridge starts, and the answer is 200, the
//     initialize response as the JSON body and the new connection's ID in
//     Acp-Connection-Id.
//   - Every later POST names the connection (missing: 400, unknown: 404)
//     and, when its message is a session's, the session in Acp-Session-Id
//     (missing or not the params' sessionId: 400); it is answered 202 as
//     soon as the bridge has it, and the reply comes on a stream.
//   - GET /acp with Accept: text/event-stream opens the connection's
//     stream, or with Acp-Session-Id a session's, each with one receiver
//     at a time (a second: 409). Each message is one SSE event,
//     "data: <json>\n\n"; an idle stream carries ":\n\n" every
//     Config.Keepalive.
//   - DELETE /acp ends the connection: its bridge reads the end of input.
//
// Where a message of the bridge goes (connection.js, routeOutbound): a
// response goes where its request's route was (a request that named a
// session, to that session's stream; session/load's too, after its replay,
// where the SDK's server puts it on the connection's stream and the
// answer may overtake the replay); a request or notification whose params name a
// session, to the session's stream (and the client's answer to such a
// request must name that session); anything else to the connection's
// stream. A stream without a receiver keeps its messages for the next;
// past Config.StreamBufferBytes unread in all of a connection's streams,
// or past acpMaxSessionStreams streams, the connection ends: a client
// that reads nothing must not make the gateway hold everything.

// acpInboundQueue is how many messages of the client wait for the bridge
// to read them; a POST past it waits for room.
const acpInboundQueue = 16

// acpMaxSessionStreams bounds the session streams of one connection, as
// the SDK's server does (maxBufferedSessionStreams).
const acpMaxSessionStreams = 1024

var (
	errACPEnded    = errors.New("the ACP connection ended")
	errACPOverflow = errors.New("the ACP connection's client left too much unread")
)

// acpHTTPConn is one Streamable HTTP connection. It is its bridge's
// Transport.
type acpHTTPConn struct {
	g       *Gateway
	id      string
	owner   acpOwner
	lg      *slog.Logger
	release func() // its place among its principal's connections

	inbound chan []byte   // the client's messages, for Read
	initial chan []byte   // the bridge's first message, the initialize response
	done    chan struct{} // closed when the connection ends
	cancel  context.CancelFunc

	mu          sync.Mutex
	ended       string // why it ended; "" while it is open
	initialized bool   // the bridge's first message went to initial
	conn        *acpStream
	sessions    map[string]*acpStream
	buffered    int64 // bytes waiting in all its streams
	// requests are the client's requests waiting for their response, by
	// ID key: the stream the response goes to ("" the connection's).
	requests map[string]string
	// asked are the bridge's requests waiting for the client's answer, by
	// ID key: the session the answer must name ("" none).
	asked      map[string]string
	receivers  int       // streams being read, and the initialize waiting for its answer
	lastActive time.Time // the last message of the client, or the last receiver's leaving
}

// acpStream is one stream of a connection: the connection's or a
// session's.
type acpStream struct {
	queue    [][]byte
	receiver bool
	wake     chan struct{} // a message was queued: one token at most
}

func newACPStream() *acpStream { return &acpStream{wake: make(chan struct{}, 1)} }

func (s *acpStream) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Read returns the client's next message, io.EOF once the connection
// ended.
func (c *acpHTTPConn) Read(ctx context.Context) ([]byte, error) {
	select {
	case m := <-c.inbound:
		return m, nil
	case <-c.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write routes one message of the bridge to its stream. It never waits
// for a client: a stream without a receiver keeps the message.
func (c *acpHTTPConn) Write(_ context.Context, msg []byte) error {
	m, err := parseACPMessage(msg)
	if err != nil {
		return err
	}
	frame, err := acpFrame(msg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.ended != "" {
		c.mu.Unlock()
		return errACPEnded
	}
	if !c.initialized {
		c.initialized = true
		c.initial <- frame // room for one: this is the one
		c.mu.Unlock()
		return nil
	}
	route := c.outboundRouteLocked(m)
	s := c.conn
	if route != "" {
		s = c.sessions[route]
		if s == nil {
			if len(c.sessions) >= acpMaxSessionStreams {
				c.mu.Unlock()
				c.end(acpEndOverflow)
				return errACPOverflow
			}
			s = newACPStream()
			c.sessions[route] = s
		}
	}
	s.queue = append(s.queue, frame)
	c.buffered += int64(len(frame))
	over := c.buffered > c.g.cfg.StreamBufferBytes
	c.mu.Unlock()
	if over {
		c.end(acpEndOverflow)
		return errACPOverflow
	}
	s.notify()
	return nil
}

// outboundRouteLocked returns the stream a message of the bridge goes to
// ("" the connection's), and keeps the route of a request for the
// client's answer.
func (c *acpHTTPConn) outboundRouteLocked(m acpMessage) string {
	if m.isResponse() {
		route := c.requests[m.idKey]
		delete(c.requests, m.idKey)
		return route
	}
	route := ""
	if m.hasMethod && len(m.sessionID) <= acpMaxIDBytes {
		route = m.sessionID
	}
	if m.isRequest() {
		c.asked[m.idKey] = route
	}
	return route
}

// inboundLocked checks a message of the client against the session its
// POST names (header, "" none) and keeps the route of a request for its
// response. It returns a function that forgets that route again, should
// the message not reach the bridge.
func (c *acpHTTPConn) inboundLocked(m acpMessage, header string) (undo func(), err error) {
	if len(header) > acpMaxIDBytes || len(m.sessionID) > acpMaxIDBytes {
		return nil, events.Errorf(events.CodeInvalidRequest, "a session ID over %d bytes", acpMaxIDBytes)
	}
	if m.isResponse() {
		if route, ok := c.asked[m.idKey]; ok && route != "" {
			if header == "" {
				return nil, events.Errorf(events.CodeInvalidRequest, "an answer to a request of session %q needs %s", events.Truncate(route, 128), headerACPSessionID)
			}
			if header != route {
				return nil, events.Errorf(events.CodeInvalidRequest, "%s does not name the session of the request this answers", headerACPSessionID)
			}
		}
		delete(c.asked, m.idKey)
		return func() {}, nil
	}
	if (acpSessionScoped[m.method] || m.sessionID != "") && header == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "a message of a session needs %s", headerACPSessionID)
	}
	if header != "" && m.sessionID != "" && header != m.sessionID {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s does not name the session of params.sessionId", headerACPSessionID)
	}
	if !m.isRequest() {
		return func() {}, nil
	}
	route := header
	if route == "" {
		route = m.sessionID
	}
	// session/load's answer too goes on the session's stream, after its
	// replay: the SDK's own server puts it on the connection's, where it
	// may overtake the replay, and the SDK's client takes an answer on
	// either.
	key := m.idKey
	c.requests[key] = route
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.requests, key)
	}, nil
}

// end ends the connection for reason, once: its bridge reads the end of
// input, its streams end, and its ID is forgotten. A client that closed
// the connection or left it idle is gone, and the bridge ends as it does
// when its client goes (its context ends once it returned); otherwise the
// bridge's context ends now too, so that nothing it does outlasts the
// gateway, the token or a client that reads nothing.
func (c *acpHTTPConn) end(reason string) {
	c.mu.Lock()
	if c.ended != "" {
		c.mu.Unlock()
		return
	}
	c.ended = reason
	c.mu.Unlock()
	close(c.done)
	if reason != acpEndClosed && reason != acpEndIdle {
		c.cancel()
	}
	e := c.g.acp
	e.mu.Lock()
	if e.conns[c.id] == c {
		delete(e.conns, c.id)
	}
	e.mu.Unlock()
	c.release()
	c.g.metrics.acpConns.WithLabelValues(acpTransportHTTP).Dec()
	c.g.metrics.acpEnds.WithLabelValues(reason).Inc()
	c.lg.Debug("ACP connection ended", logKeyReason, reason)
}

// touch records a message of the client: the connection is not idle.
func (c *acpHTTPConn) touch() {
	c.mu.Lock()
	c.lastActive = time.Now()
	c.mu.Unlock()
}

// idleLeft returns how long the connection may still go without a
// message or a receiver: 0 when it has gone long enough.
func (c *acpHTTPConn) idleLeft(now time.Time) time.Duration {
	idle := c.g.cfg.ACPIdleTimeout
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.receivers > 0 {
		return idle
	}
	return max(0, idle-now.Sub(c.lastActive))
}

// watch ends the connection when it idles, when its token no longer
// grants it, and when the gateway stops.
func (c *acpHTTPConn) watch() {
	t := time.NewTimer(c.g.cfg.ACPIdleTimeout)
	defer t.Stop()
	changed := c.owner.caller.changed
	for {
		select {
		case <-c.done:
			return
		case <-c.g.stopping:
			c.end(acpEndShutdown)
			return
		case <-changed:
			changed = c.g.auth.changes()
			if c.g.acpRevoked(c.owner) {
				c.end(acpEndRevoked)
				return
			}
		case now := <-t.C:
			left := c.idleLeft(now)
			if left <= 0 {
				c.end(acpEndIdle)
				return
			}
			t.Reset(left)
		}
	}
}

// handleACPPost serves POST /acp: one message of the client.
func (g *Gateway) handleACPPost(w http.ResponseWriter, r *http.Request) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return events.Errorf(events.CodeUnsupportedMediaType, "an ACP message is application/json")
	}
	body, err := readBody(w, r, acpbridge.MaxMessageBytes)
	if err != nil {
		return err
	}
	// A body that is no message is answered as the other transports answer
	// it, with JSON-RPC's error, id null (a batch: ACP uses none, and the
	// SDK's server answers one error without looking at the entries), with
	// 400: the body is JSON-RPC's, not the edge's, what the client reads as
	// the answer.
	var refusal []byte
	switch shapeOf(body) {
	case acpInvalid:
		refusal = acpParseError
	case acpBatch:
		refusal = acpBatchError
	case acpOther:
		refusal = acpInvalidError
	}
	if refusal != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(refusal)
		return nil
	}
	m, err := parseACPMessage(body)
	if err != nil {
		return events.Errorf(events.CodeInvalidRequest, "an ACP message: %v", err)
	}
	id := r.Header.Get(headerACPConnectionID)
	if m.isInitialize() {
		if id != "" {
			return events.Errorf(events.CodeInvalidRequest, "initialize opens a connection: send it without %s", headerACPConnectionID)
		}
		return g.acpInitialize(w, r, body, m)
	}
	c, err := g.acpConnection(r)
	if err != nil {
		return err
	}
	c.mu.Lock()
	undo, err := c.inboundLocked(m, r.Header.Get(headerACPSessionID))
	c.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case c.inbound <- body:
	case <-c.done:
		undo()
		return errACPUnknown
	case <-r.Context().Done():
		undo()
		return r.Context().Err()
	}
	c.touch()
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// errACPUnknown answers a request naming a connection that is not open,
// or not its caller's.
var errACPUnknown = events.Errorf(events.CodeNotFound, "no ACP connection has that %s", headerACPConnectionID)

// acpConnection returns the open Streamable HTTP connection r names.
func (g *Gateway) acpConnection(r *http.Request) (*acpHTTPConn, error) {
	id := r.Header.Get(headerACPConnectionID)
	if id == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s is missing", headerACPConnectionID)
	}
	g.acp.mu.Lock()
	c := g.acp.conns[id]
	g.acp.mu.Unlock()
	if c == nil || !c.owner.admits(r) {
		return nil, errACPUnknown
	}
	return c, nil
}

// acpInitialize opens a connection with the initialize request m (body),
// and answers it with the bridge's initialize response.
func (g *Gateway) acpInitialize(w http.ResponseWriter, r *http.Request, body []byte, m acpMessage) error {
	if m.idKey == "" || m.idKey == "null" {
		return events.Errorf(events.CodeInvalidRequest, "initialize needs an ID")
	}
	owner := g.acpOwnerOf(r)
	release, ok := g.acp.admit(owner.key, g.cfg.ACPMaxConns)
	if !ok {
		return rateLimited(w, holdRetry)
	}
	id := newACPConnectionID()
	lg := g.lg.With(logKeyACPConnection, id, logKeyTransport, acpTransportHTTP)
	ctx, cancel := context.WithCancel(context.Background())
	c := &acpHTTPConn{
		g: g, id: id, owner: owner, lg: lg, release: release,
		inbound: make(chan []byte, acpInboundQueue), initial: make(chan []byte, 1),
		done: make(chan struct{}), cancel: cancel,
		conn: newACPStream(), sessions: map[string]*acpStream{},
		requests: map[string]string{}, asked: map[string]string{},
		lastActive: time.Now(),
	}
	c.inbound <- body // the first message: room for it
	cfg := g.bridgeConfig(r, lg)
	g.acp.mu.Lock()
	g.acp.conns[id] = c
	g.acp.mu.Unlock()
	g.metrics.acpConns.WithLabelValues(acpTransportHTTP).Inc()
	started := g.acp.work.Go(func() {
		err := acpbridge.Serve(ctx, cfg, c)
		cancel()
		reason := acpServeEnd(err)
		if reason == acpEndError {
			lg.Warn("ACP bridge failed", events.LogKeyErr, err)
		}
		c.end(reason)
	})
	if !started || !g.acp.work.Go(c.watch) {
		c.end(acpEndShutdown)
		return events.Errorf(events.CodeUnavailable, "the gateway is shutting down")
	}
	lg.Debug("ACP connection opened", events.LogKeyNamespace, acpNamespace(g, r))

	// The client waits on this request for its answer, as a receiver
	// waits on a stream: the connection is not idle meanwhile, however
	// long the bridge takes (the agents' list, a service restarting).
	c.mu.Lock()
	c.receivers++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.receivers--; c.receivers == 0 {
			c.lastActive = time.Now()
		}
		c.mu.Unlock()
	}()
	timer := time.NewTimer(g.cfg.RequestTimeout)
	defer timer.Stop()
	var first []byte
	select {
	case first = <-c.initial:
	case <-c.done:
		return events.Errorf(events.CodeUnavailable, "the ACP connection ended before initialize was answered")
	case <-r.Context().Done():
		c.end(acpEndClosed)
		return r.Context().Err()
	case <-timer.C:
		c.end(acpEndError)
		return events.Errorf(events.CodeTimeout, "initialize got no answer within %v", g.cfg.RequestTimeout)
	}
	if resp, err := parseACPMessage(first); err != nil || !resp.isResponse() || resp.idKey != m.idKey {
		c.end(acpEndError)
		return events.Errorf(events.CodeInternal, "the bridge's first message is not the initialize response")
	}
	c.touch()
	w.Header().Set(headerACPConnectionID, id)
	writeJSON(w, http.StatusOK, first)
	return nil
}

// handleACPDelete serves DELETE /acp: the client ends its connection.
func (g *Gateway) handleACPDelete(w http.ResponseWriter, r *http.Request) error {
	c, err := g.acpConnection(r)
	if err != nil {
		return err
	}
	c.end(acpEndClosed)
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// acpEventStream serves GET /acp with Accept: text/event-stream: the
// connection's stream, or a session's.
func (g *Gateway) acpEventStream(w http.ResponseWriter, r *http.Request) error {
	if !acceptsEventStream(r.Header) {
		return events.Errorf(events.CodeNotAcceptable, "an ACP stream is text/event-stream: ask for it in Accept")
	}
	c, err := g.acpConnection(r)
	if err != nil {
		return err
	}
	sid := r.Header.Get(headerACPSessionID)
	s, err := c.acquire(sid)
	if err != nil {
		return err
	}
	defer c.leave(sid, s)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// The client waits for the stream's headers before it sends a
	// session's first message.
	if err := acpFlush(rc); err != nil {
		return nil
	}
	keepalive := time.NewTicker(g.cfg.Keepalive)
	defer keepalive.Stop()
	var buf bytes.Buffer
	for {
		if frames := c.take(s); len(frames) > 0 {
			buf.Reset()
			for _, f := range frames {
				buf.WriteString("data: ")
				buf.Write(f)
				buf.WriteString("\n\n")
			}
			if acpWrite(g, rc, w, buf.Bytes()) != nil || acpFlush(rc) != nil {
				return nil // the client is gone
			}
			continue
		}
		select {
		case <-s.wake:
		case <-c.done:
			return nil
		case <-g.stopping:
			return nil
		case <-r.Context().Done():
			return nil
		case <-keepalive.C:
			if acpWrite(g, rc, w, []byte(":\n\n")) != nil || acpFlush(rc) != nil {
				return nil
			}
		}
	}
}

// acceptsEventStream reports whether an Accept header names
// text/event-stream, as the transport asks (a wildcard is not enough: a
// GET that does not ask for the stream is no ACP client's).
func acceptsEventStream(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		for t := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(t)); err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// acpWrite writes b within Config.StreamWriteTimeout.
func acpWrite(g *Gateway, rc *http.ResponseController, w http.ResponseWriter, b []byte) error {
	if err := rc.SetWriteDeadline(time.Now().Add(g.cfg.StreamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	_, err := w.Write(b)
	return err
}

func acpFlush(rc *http.ResponseController) error {
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// acquire makes the caller the receiver of the stream sid names ("" the
// connection's).
func (c *acpHTTPConn) acquire(sid string) (*acpStream, error) {
	if len(sid) > acpMaxIDBytes {
		return nil, events.Errorf(events.CodeInvalidRequest, "a session ID over %d bytes", acpMaxIDBytes)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended != "" {
		return nil, errACPUnknown
	}
	s := c.conn
	if sid != "" {
		s = c.sessions[sid]
		if s == nil {
			if len(c.sessions) >= acpMaxSessionStreams {
				return nil, events.Errorf(events.CodeRateLimited, "the connection has %d session streams already", acpMaxSessionStreams)
			}
			s = newACPStream()
			c.sessions[sid] = s
		}
	}
	if s.receiver {
		return nil, events.Errorf(events.CodeStreamBusy, "the stream already has a receiver")
	}
	s.receiver = true
	c.receivers++
	return s, nil
}

// leave gives up the receiver's place. A session's stream with nothing
// waiting is forgotten: the next receiver or message makes it anew.
func (c *acpHTTPConn) leave(sid string, s *acpStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.receiver = false
	if c.receivers--; c.receivers == 0 {
		c.lastActive = time.Now()
	}
	if sid != "" && len(s.queue) == 0 && c.sessions[sid] == s {
		delete(c.sessions, sid)
	}
}

// take returns the messages waiting on s, and forgets them.
func (c *acpHTTPConn) take(s *acpStream) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	frames := s.queue
	s.queue = nil
	for _, f := range frames {
		c.buffered -= int64(len(f))
	}
	return frames
}
