package acpbridge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// conn is one ACP connection: the client's requests in, the bridge's
// answers, notifications and requests out.
type conn struct {
	cfg Config
	api *api
	t   Transport
	lg  *slog.Logger
	// salt tells this connection's requests from another's: a prompt
	// without a messageId is keyed by its JSON-RPC id, which each
	// connection numbers anew.
	salt string

	wmu sync.Mutex // one Write at a time

	mu          sync.Mutex
	elicitation bool               // the client takes form elicitation
	follows     map[string]*follow // the sessions followed, by ID
	calls       map[string]*call   // the bridge's requests to the client, by id
	nextID      int64
	agent       string // the default agent, once looked up

	// life is the connection's: follows end with it.
	life context.Context
	wg   sync.WaitGroup
}

func newConn(cfg Config, t Transport) *conn {
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &conn{
		cfg: cfg, t: t, lg: cfg.Logger, salt: randomID(),
		api:     &api{base: strings.TrimRight(cfg.BaseURL, "/"), header: cfg.Header, hc: cfg.Client},
		follows: map[string]*follow{}, calls: map[string]*call{},
	}
}

// randomID returns 26 random characters of [a-z2-7].
func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

func (c *conn) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	c.life = ctx
	defer func() {
		cancel()
		c.stopAll()
		c.wg.Wait()
	}()
	for {
		raw, err := c.t.Read(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, ErrMessageTooLarge) {
				c.reply(ctx, json.RawMessage("null"), nil, &rpcError{Code: codeInvalidRequest, Message: err.Error(), Data: &errorData{Code: "payload_too_large"}})
			}
			return err
		}
		c.dispatch(ctx, raw)
	}
}

// dispatch takes one message of the client. A request is served in a
// goroutine of its own (a prompt lasts its turn); a notification and a
// response at once.
func (c *conn) dispatch(ctx context.Context, raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		c.reply(ctx, json.RawMessage("null"), nil, &rpcError{Code: codeInvalidRequest, Message: "JSON-RPC batches are not supported"})
		return
	}
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		c.reply(ctx, json.RawMessage("null"), nil, &rpcError{Code: codeParseError, Message: "parse error: " + err.Error()})
		return
	}
	id := m.ID
	if id == nil {
		id = json.RawMessage("null")
	}
	switch {
	case m.JSONRPC != "2.0":
		c.reply(ctx, id, nil, &rpcError{Code: codeInvalidRequest, Message: `jsonrpc must be "2.0"`})
	case m.isRequest():
		c.wg.Go(func() { c.serveRequest(ctx, &m) })
	case m.isNotification():
		c.notification(ctx, &m)
	case m.isResponse():
		c.response(&m)
	default:
		c.reply(ctx, id, nil, &rpcError{Code: codeInvalidRequest, Message: "neither a request, a notification nor a response"})
	}
}

// serveRequest answers one request, then runs what its method left to do
// after the answer (a session followed from then on).
func (c *conn) serveRequest(ctx context.Context, m *message) {
	result, after, err := c.method(ctx, m)
	if err != nil {
		c.reply(ctx, m.ID, nil, asRPCError(err))
		return
	}
	if result == nil {
		result = struct{}{}
	}
	c.reply(ctx, m.ID, result, nil)
	if after != nil {
		after()
	}
}

// method serves the request m: its result, and what to do once the result
// is sent.
func (c *conn) method(ctx context.Context, m *message) (any, func(), error) {
	switch m.Method {
	case "initialize":
		r, err := c.initialize(ctx, m.Params)
		return r, nil, err
	case "authenticate":
		return struct{}{}, nil, nil // no auth method is offered: the token authenticated
	case "session/new":
		return c.newSession(ctx, m.Params)
	case "session/load":
		return c.loadSession(ctx, m.Params)
	case "session/resume":
		return c.resumeSession(ctx, m.Params)
	case "session/close":
		r, err := c.closeSession(m.Params)
		return r, nil, err
	case "session/list":
		r, err := c.listSessions(ctx, m.Params)
		return r, nil, err
	case "session/prompt":
		r, err := c.prompt(ctx, m.ID, m.Params)
		return r, nil, err
	case "session/set_config_option":
		r, err := c.setConfigOption(ctx, m.Params)
		return r, nil, err
	case "session/set_mode":
		r, err := c.setMode(ctx, m.Params)
		return r, nil, err
	}
	return nil, nil, &rpcError{Code: codeMethodNotFound, Message: "method not found: " + m.Method}
}

// notification takes a notification of the client.
func (c *conn) notification(ctx context.Context, m *message) {
	switch m.Method {
	case "session/cancel":
		var p struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(m.Params, &p) != nil || p.SessionID == "" {
			return // a notification has no answer to carry an error
		}
		if err := c.api.cancel(ctx, p.SessionID); err != nil {
			c.lg.Debug("cancel", "session", p.SessionID, "err", err)
		}
	}
	// $/cancel_request of the client's own requests: a prompt is
	// cancelled by session/cancel, and the rest answer at once.
}

// reply writes the response to the request id: result, or rpcErr.
func (c *conn) reply(ctx context.Context, id json.RawMessage, result any, rpcErr *rpcError) {
	resp := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result,omitempty"`
		Error   *rpcError       `json:"error,omitempty"`
	}{"2.0", id, result, rpcErr}
	c.write(ctx, resp)
}

// notify writes a notification.
func (c *conn) notify(ctx context.Context, method string, params any) {
	c.write(ctx, struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{"2.0", method, params})
}

// write writes one message; a failure ends nothing here: the transport's
// Read fails next, which ends the connection.
func (c *conn) write(ctx context.Context, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.lg.Error("encode a message for the client", "err", err)
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.t.Write(ctx, b); err != nil {
		c.lg.Debug("write to the client", "err", err)
	}
}

// call is a request of the bridge's to the client, waiting for its answer.
type call struct {
	id     int64
	result chan *message
}

// request sends the client the request method and returns its call; the
// answer comes on the call's channel.
func (c *conn) request(ctx context.Context, method string, params any) *call {
	c.mu.Lock()
	c.nextID++
	cl := &call{id: c.nextID, result: make(chan *message, 1)}
	c.calls[strconv.FormatInt(cl.id, 10)] = cl
	c.mu.Unlock()
	c.write(ctx, struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int64  `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{"2.0", cl.id, method, params})
	return cl
}

// forget drops a call whose answer no longer matters.
func (c *conn) forget(cl *call) {
	c.mu.Lock()
	delete(c.calls, strconv.FormatInt(cl.id, 10))
	c.mu.Unlock()
}

// response takes the client's answer to one of the bridge's requests.
func (c *conn) response(m *message) {
	c.mu.Lock()
	cl := c.calls[string(m.ID)]
	delete(c.calls, string(m.ID))
	c.mu.Unlock()
	if cl != nil {
		cl.result <- m
	}
}
