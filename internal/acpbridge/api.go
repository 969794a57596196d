package acpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"skein.dev/internal/sse"
)

// api is the part of Skein's public HTTP API (docs/API.md) the bridge
// uses, with the caller's headers on every request.
type api struct {
	base   string // without a trailing slash
	header http.Header
	hc     *http.Client
}

// apiError is an error the API answered: its code is one of the registry
// in pkg/events, or http_<status> for a body that is not Skein's.
type apiError struct {
	Status    int
	Code      string
	Message   string
	RequestID string
	TurnID    string // the turn a prompt's failure ended (X-Skein-Turn-Id), when it was accepted
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func (a *api) sessionURL(sid, suffix string) string {
	return a.base + "/v1/sessions/" + url.PathEscape(sid) + suffix
}

// request builds a request with the caller's headers and, when in is not
// nil, its JSON body.
func (a *api) request(ctx context.Context, method, u string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	maps.Copy(req.Header, a.header)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends a JSON request and decodes the 200 reply into out (nil: drop it).
func (a *api) do(ctx context.Context, method, u string, in, out any) error {
	req, err := a.request(ctx, method, u, in)
	if err != nil {
		return err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return &apiError{Code: "unavailable", Message: fmt.Sprintf("%s %s: %v", method, req.URL.Path, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return responseError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &apiError{Code: "internal", Message: fmt.Sprintf("%s %s: decode the answer: %v", method, req.URL.Path, err)}
	}
	return nil
}

// responseError reads a refusal's error body.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)) // what was read is the error, if anything
	var eb struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			RequestID string `json:"requestId"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
		return &apiError{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(b))}
	}
	e := eb.Error
	return &apiError{Status: resp.StatusCode, Code: e.Code, Message: e.Message, RequestID: e.RequestID}
}

// sessionInfo is GET /v1/sessions/{id}, as far as the bridge reads it.
type sessionInfo struct {
	SessionID             string          `json:"sessionId"`
	Agent                 string          `json:"agent"`
	Cwd                   string          `json:"cwd"`
	AdditionalDirectories []string        `json:"additionalDirectories"`
	Title                 string          `json:"title"`
	UpdatedAt             string          `json:"updatedAt"`
	LatestSequence        uint64          `json:"latestSequence"`
	State                 json.RawMessage `json:"state"`
}

// sessionState is a session's state: the requests it waits on.
type sessionState struct {
	Status   string          `json:"status"`
	Requests []openRequest   `json:"requests"`
	Inputs   []openRequest   `json:"inputs"`
	Error    json.RawMessage `json:"error"`
}

type openRequest struct {
	RequestID string          `json:"requestId"`
	Request   json.RawMessage `json:"request"`
}

func (a *api) session(ctx context.Context, sid string) (*sessionInfo, error) {
	var s sessionInfo
	if err := a.do(ctx, http.MethodGet, a.sessionURL(sid, ""), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// openBody is PUT /v1/sessions/{id}.
type openBody struct {
	Agent                 string          `json:"agent"`
	Cwd                   string          `json:"cwd,omitempty"`
	AdditionalDirectories []string        `json:"additionalDirectories,omitempty"`
	McpServers            json.RawMessage `json:"mcpServers,omitempty"`
	PermissionPolicy      string          `json:"permissionPolicy,omitempty"`
}

func (a *api) open(ctx context.Context, sid string, b openBody) error {
	return a.do(ctx, http.MethodPut, a.sessionURL(sid, ""), b, nil)
}

// listPage is GET /v1/sessions.
type listPage struct {
	Sessions   []sessionInfo `json:"sessions"`
	NextCursor string        `json:"nextCursor"`
}

func (a *api) list(ctx context.Context, cursor string, limit int) (*listPage, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var p listPage
	if err := a.do(ctx, http.MethodGet, a.base+"/v1/sessions?"+q.Encode(), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// configAnswer is GET and PUT …/config.
type configAnswer struct {
	Revision uint64            `json:"revision"`
	Options  []json.RawMessage `json:"options"`
}

func (a *api) config(ctx context.Context, sid string) (*configAnswer, error) {
	var c configAnswer
	if err := a.do(ctx, http.MethodGet, a.sessionURL(sid, "/config"), nil, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func (a *api) setConfig(ctx context.Context, sid, configID string, value json.RawMessage) (*configAnswer, error) {
	var c configAnswer
	body := struct {
		Value json.RawMessage `json:"value"`
	}{value}
	if err := a.do(ctx, http.MethodPut, a.sessionURL(sid, "/config/"+url.PathEscape(configID)), body, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func (a *api) capabilities(ctx context.Context, sid string) (json.RawMessage, error) {
	var c struct {
		Capabilities json.RawMessage `json:"capabilities"`
	}
	if err := a.do(ctx, http.MethodGet, a.sessionURL(sid, "/capabilities"), nil, &c); err != nil {
		return nil, err
	}
	return c.Capabilities, nil
}

// agentEntry is one row of GET /v1/agents.
type agentEntry struct {
	ID        string `json:"id"`
	Installed bool   `json:"installed"`
}

func (a *api) agents(ctx context.Context) ([]agentEntry, error) {
	var r struct {
		Agents []agentEntry `json:"agents"`
	}
	if err := a.do(ctx, http.MethodGet, a.base+"/v1/agents", nil, &r); err != nil {
		return nil, err
	}
	return r.Agents, nil
}

// headerTurnID is the header of a prompt's answer that names its turn.
const headerTurnID = "X-Skein-Turn-Id"

// promptAnswer is POST …/prompt's 200, and the turn it ran; or its 202,
// and the queue entry it waits as (Queued).
type promptAnswer struct {
	StopReason string `json:"stopReason"`
	TurnID     string `json:"-"`
	Queued     *struct {
		ID string `json:"id"`
	} `json:"queued"`
}

// prompt sends a prompt, with queue: a session busy with another turn
// queues it (202, ans.Queued) rather than refusing it.
func (a *api) prompt(ctx context.Context, sid, key string, content json.RawMessage) (*promptAnswer, error) {
	body := struct {
		IdempotencyKey string          `json:"idempotencyKey,omitempty"`
		Content        json.RawMessage `json:"content"`
		Queue          bool            `json:"queue"`
	}{key, content, true}
	req, err := a.request(ctx, http.MethodPost, a.sessionURL(sid, "/prompt"), body)
	if err != nil {
		return nil, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, &apiError{Code: "unavailable", Message: fmt.Sprintf("prompt session %s: %v", sid, err)}
	}
	defer resp.Body.Close()
	turnID := resp.Header.Get(headerTurnID)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		err := responseError(resp)
		if e, ok := errors.AsType[*apiError](err); ok {
			e.TurnID = turnID
		}
		return nil, err
	}
	var p promptAnswer
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, &apiError{Code: "internal", Message: fmt.Sprintf("prompt session %s: decode the answer: %v", sid, err)}
	}
	p.TurnID = turnID
	return &p, nil
}

func (a *api) cancel(ctx context.Context, sid string) error {
	return a.do(ctx, http.MethodPost, a.sessionURL(sid, "/cancel"), struct{}{}, nil)
}

// answer answers a permission request (kind "permissions") or an input
// request ("inputs").
func (a *api) answer(ctx context.Context, sid, kind, requestID string, body any) error {
	return a.do(ctx, http.MethodPost, a.sessionURL(sid, "/"+kind+"/"+url.PathEscape(requestID)), body, nil)
}

// historyPage is GET …/history.
type historyPage struct {
	Events       []json.RawMessage `json:"events"`
	HasMoreAfter bool              `json:"hasMoreAfter"`
}

func (a *api) history(ctx context.Context, sid string, after uint64, limit int) (*historyPage, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}}
	var p historyPage
	if err := a.do(ctx, http.MethodGet, a.sessionURL(sid, "/history?"+q.Encode()), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// eventStream is GET …/events: the session's events after a sequence,
// then live.
type eventStream struct {
	body io.ReadCloser
	*sse.Reader
}

func (a *api) events(ctx context.Context, sid string, after uint64) (*eventStream, error) {
	req, err := a.request(ctx, http.MethodGet, a.sessionURL(sid, "/events?after="+strconv.FormatUint(after, 10)), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, &apiError{Code: "unavailable", Message: fmt.Sprintf("follow session %s: %v", sid, err)}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return &eventStream{body: resp.Body, Reader: sse.NewReader(resp.Body)}, nil
}

func (s *eventStream) Close() error { return s.body.Close() }
