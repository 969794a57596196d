package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"skein.dev/internal/sse"
)

// APIError is a failure the gateway reported: the error body of its HTTP
// API, or the error event that ended an event stream.
type APIError struct {
	// Status is the HTTP status, or 0 for an error event.
	Status    int
	Code      string
	Message   string
	RequestID string
}

// Error returns "code: message", and the request ID when there is one, so
// that a masked internal error can be found in the gateway's log.
func (e *APIError) Error() string {
	msg := e.Code + ": " + e.Message
	if e.RequestID != "" {
		msg += " (request " + e.RequestID + ")"
	}
	return msg
}

// errorBody is the gateway's error JSON.
type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"requestId"`
	} `json:"error"`
}

// isCode reports whether err is an *APIError with code.
func isCode(err error, code string) bool {
	e, ok := errors.AsType[*APIError](err)
	return ok && e.Code == code
}

// client speaks the gateway's HTTP API.
type client struct {
	base  string // without a trailing slash
	token string // bearer token, or "" for none
	http  *http.Client
}

// authorize sets req's Authorization header when the client has a token.
func (c *client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// sessionPath returns the URL of a session's resource, plus suffix.
func (c *client) sessionPath(sid, suffix string) string {
	return c.base + "/v1/sessions/" + url.PathEscape(sid) + suffix
}

// do sends a JSON request and decodes a JSON reply into out (if not nil).
func (c *client) do(ctx context.Context, method, u string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		if isTransport(err) {
			return &UnreachableError{Server: c.base, Err: err}
		}
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		return c.responseError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, u, err)
	}
	return nil
}

// responseError turns a non-200 response into an *APIError.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)) // the error is in what was read, if anything
	var eb errorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
		return &APIError{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(b))}
	}
	return &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, RequestID: eb.Error.RequestID}
}

// responseError is responseError with a hint when the gateway wanted a
// token and the client had none to send.
func (c *client) responseError(resp *http.Response) error {
	err := responseError(resp)
	if e, ok := err.(*APIError); ok && e.Code == "unauthenticated" && c.token == "" {
		e.Message += " (no token was sent: pass --token, set " + EnvToken + ", or point " + EnvData + " at skein dev's data directory)"
	}
	return err
}

// openRequest is the body of PUT /v1/sessions/{id}.
type openRequest struct {
	Agent            string         `json:"agent"`
	Cwd              *string        `json:"cwd,omitempty"`
	PermissionPolicy *string        `json:"permissionPolicy,omitempty"`
	InputPolicy      *string        `json:"inputPolicy,omitempty"`
	Placement        *placementBody `json:"placement,omitempty"`
}

// placementBody is an open's placement: a runner, or labels.
type placementBody struct {
	Runner *string           `json:"runner,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

func (c *client) open(ctx context.Context, sid string, req openRequest) error {
	return c.do(ctx, http.MethodPut, c.sessionPath(sid, ""), req, nil)
}

// sessionInfo is the part of GET /v1/sessions/{id} the commands use.
type sessionInfo struct {
	SessionID      string        `json:"sessionId"`
	Agent          string        `json:"agent"`
	Cwd            string        `json:"cwd"`
	LatestSequence uint64        `json:"latestSequence"`
	State          sessionState  `json:"state"`
	Usage          *sessionUsage `json:"usage"`
	LastTurnTiming *struct {
		FirstReplyMs *int64 `json:"firstReplyMs"`
		FinishedMs   *int64 `json:"finishedMs"`
	} `json:"lastTurnTiming"`
	Runner string `json:"runner"` // the runner a placed session is pinned to
}

func (c *client) session(ctx context.Context, sid string) (*sessionInfo, error) {
	var info sessionInfo
	if err := c.do(ctx, http.MethodGet, c.sessionPath(sid, ""), nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// inWorkspace reports whether dir is a folder a session of the caller may
// work in: GET /v1/directories confines its path exactly as an open
// confines a cwd, and refuses one outside with invalid_request.
func (c *client) inWorkspace(ctx context.Context, dir string) (bool, error) {
	err := c.do(ctx, http.MethodGet, c.base+"/v1/directories?path="+url.QueryEscape(dir), nil, nil)
	if isCode(err, "invalid_request") {
		return false, nil
	}
	return err == nil, err
}

// promptRequest is the body of POST /v1/sessions/{id}/prompt.
type promptRequest struct {
	IdempotencyKey *string         `json:"idempotencyKey,omitempty"`
	Content        json.RawMessage `json:"content"`
	Queue          bool            `json:"queue,omitempty"`
}

// promptResponse is the reply to a prompt.
type promptResponse struct {
	SessionID  string          `json:"sessionId"`
	Message    json.RawMessage `json:"message"`
	StopReason string          `json:"stopReason"`
	Queued     *queuedRef      `json:"queued"` // a 202: the prompt waits in the queue
}

// queuedRef is where a queued prompt waits.
type queuedRef struct {
	ID       string `json:"id"`
	Position int    `json:"position"`
}

// queuedPrompt is one entry of GET …/queue.
type queuedPrompt struct {
	ID        string `json:"id"`
	Position  int    `json:"position"`
	Principal string `json:"principal"`
	QueuedAt  string `json:"queuedAt"`
	Content   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// queue is GET …/queue.
func (c *client) queue(ctx context.Context, sid string) ([]queuedPrompt, bool, error) {
	var q struct {
		Queued []queuedPrompt `json:"queued"`
		Held   bool           `json:"held"`
	}
	if err := c.do(ctx, http.MethodGet, c.sessionPath(sid, "/queue"), nil, &q); err != nil {
		return nil, false, err
	}
	return q.Queued, q.Held, nil
}

// withdraw takes a prompt out of the session's queue.
func (c *client) withdraw(ctx context.Context, sid, qid string) error {
	return c.do(ctx, http.MethodDelete, c.sessionPath(sid, "/queue/"+url.PathEscape(qid)), nil, nil)
}

func (c *client) prompt(ctx context.Context, sid string, req promptRequest) (*promptResponse, error) {
	var resp promptResponse
	if err := c.do(ctx, http.MethodPost, c.sessionPath(sid, "/prompt"), req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// statusResponse is the reply to a cancel or a permission answer.
type statusResponse struct {
	Status string `json:"status"`
	Reason string `json:"reason"` // of not_pending
}

// cancel asks the gateway to cancel the session's running turn.
func (c *client) cancel(ctx context.Context, sid string) (*statusResponse, error) {
	var resp statusResponse
	if err := c.do(ctx, http.MethodPost, c.sessionPath(sid, "/cancel"), struct{}{}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// unload asks the gateway to unload the session: cancel its running turn,
// if any, and stop its adapter.
func (c *client) unload(ctx context.Context, sid string) error {
	return c.do(ctx, http.MethodPost, c.sessionPath(sid, "/unload"), struct{}{}, nil)
}

// deleteSession asks the gateway to delete the session: tear down its
// runtime, then remove its metadata and history. The request has no body.
func (c *client) deleteSession(ctx context.Context, sid string) error {
	return c.do(ctx, http.MethodDelete, c.sessionPath(sid, ""), nil, nil)
}

// respondRequest is the body of POST /v1/sessions/{id}/permissions/{requestId}.
type respondRequest struct {
	OptionID string `json:"optionId"`
}

// respond answers the permission request requestID with optionID.
func (c *client) respond(ctx context.Context, sid, requestID, optionID string) (*statusResponse, error) {
	return c.resolve(ctx, sid, "/permissions/", requestID, respondRequest{OptionID: optionID})
}

// resolve posts answer to the request requestID of session sid that waits
// for a person, under kind ("/permissions/" or "/inputs/"): accepted, or
// not pending with the reason, for either kind.
func (c *client) resolve(ctx context.Context, sid, kind, requestID string, answer any) (*statusResponse, error) {
	var resp statusResponse
	if err := c.do(ctx, http.MethodPost, c.sessionPath(sid, kind+url.PathEscape(requestID)), answer, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// historyQuery selects a history page; nil fields are left out.
type historyQuery struct {
	After, Before *uint64
	Limit         *uint32
	IncludeState  bool // interleave the session's state changes (include=state)
}

// historyPage is one page of history, each event in its public JSON.
type historyPage struct {
	Events        []json.RawMessage `json:"events"`
	HasMoreBefore bool              `json:"hasMoreBefore"`
	HasMoreAfter  bool              `json:"hasMoreAfter"`
}

func (c *client) history(ctx context.Context, sid string, q historyQuery) (*historyPage, error) {
	v := url.Values{}
	if q.After != nil {
		v.Set("after", strconv.FormatUint(*q.After, 10))
	}
	if q.Before != nil {
		v.Set("before", strconv.FormatUint(*q.Before, 10))
	}
	if q.Limit != nil {
		v.Set("limit", strconv.FormatUint(uint64(*q.Limit), 10))
	}
	if q.IncludeState {
		v.Set("include", "state")
	}
	u := c.sessionPath(sid, "/history")
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	var page historyPage
	if err := c.do(ctx, http.MethodGet, u, nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// sessionConfig is the reply of GET /v1/sessions/{id}/config and of a
// config option set: the agent's config options, byte for byte.
type sessionConfig struct {
	Revision uint64          `json:"revision"`
	Options  json.RawMessage `json:"options"`
}

// config returns the session's config options.
func (c *client) config(ctx context.Context, sid string) (*sessionConfig, error) {
	var resp sessionConfig
	if err := c.do(ctx, http.MethodGet, c.sessionPath(sid, "/config"), nil, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// configValueRequest is the body of PUT /v1/sessions/{id}/config/{configId}.
type configValueRequest struct {
	Value any `json:"value"` // a string or a bool
}

// setConfig sets the config option configID to value, a string or a bool,
// and returns the whole new option collection.
func (c *client) setConfig(ctx context.Context, sid, configID string, value any) (*sessionConfig, error) {
	var resp sessionConfig
	u := c.sessionPath(sid, "/config/"+url.PathEscape(configID))
	if err := c.do(ctx, http.MethodPut, u, configValueRequest{Value: value}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// agentDetails is what `skein info` shows: the replies of GET
// .../agent-info and .../capabilities, null when unknown.
type agentDetails struct {
	AgentInfo    json.RawMessage `json:"agentInfo"`
	Capabilities json.RawMessage `json:"capabilities"`
	Server       *serverInfo     `json:"server,omitempty"`
}

// serverInfo is the gateway skein info talked to.
type serverInfo struct {
	URL     string `json:"url"`
	Version string `json:"version"`
}

// info returns the session's agent info and capabilities.
func (c *client) info(ctx context.Context, sid string) (*agentDetails, error) {
	var d agentDetails
	if err := c.do(ctx, http.MethodGet, c.sessionPath(sid, "/agent-info"), nil, &d); err != nil {
		return nil, err
	}
	if err := c.do(ctx, http.MethodGet, c.sessionPath(sid, "/capabilities"), nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// agent is one entry of GET /v1/agents.
type agent struct {
	ID                string `json:"id"`
	Installed         bool   `json:"installed"`
	AdapterEntrypoint string `json:"adapterEntrypoint"`
}

// runner is one runner of GET /v1/agents.
type runner struct {
	ID         string            `json:"id"`
	Agents     []agent           `json:"agents"`
	Labels     map[string]string `json:"labels"`
	PlacedOnly bool              `json:"placedOnly"`
	Load       uint32            `json:"load"`
	Capacity   uint32            `json:"capacity"`
}

// agentList is GET /v1/agents.
type agentList struct {
	Agents  []agent  `json:"agents"`
	Runners []runner `json:"runners"`
}

// agents returns every agent the gateway lists, and every runner, in its
// order (by ID).
func (c *client) agents(ctx context.Context) (*agentList, error) {
	var resp agentList
	if err := c.do(ctx, http.MethodGet, c.base+"/v1/agents", nil, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// events opens the session's event stream after the durable sequence
// after. It returns once the gateway answered: from then on, nothing the
// session does is missed.
func (c *client) events(ctx context.Context, sid string, after uint64) (*eventStream, error) {
	u := c.sessionPath(sid, "/events")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		if isTransport(err) {
			return nil, &UnreachableError{Server: c.base, Err: err}
		}
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, c.responseError(resp)
	}
	return &eventStream{body: resp.Body, Reader: sse.NewReader(resp.Body)}, nil
}

// sseEvent is one event of a stream (package sse).
type sseEvent = sse.Event

// eventStream reads a session's Server-Sent Events.
type eventStream struct {
	body io.ReadCloser
	*sse.Reader
}

// Close ends the stream.
func (s *eventStream) Close() error { return s.body.Close() }

// streamError returns the *APIError an error event carries.
func streamError(ev sseEvent) error {
	var eb errorBody
	if json.Unmarshal(ev.Data, &eb) != nil || eb.Error.Code == "" {
		return &APIError{Code: "stream_error", Message: string(ev.Data)}
	}
	return &APIError{Code: eb.Error.Code, Message: eb.Error.Message, RequestID: eb.Error.RequestID}
}
