package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
	"unicode/utf8"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// handleDiscard serves POST /v1/sessions/{id}/discard: delete the session,
// as DELETE does, only if it is idle and holds no user message (a client
// that opened it eagerly and did not use it); otherwise 409
// session_not_empty, and nothing changes. Discarding a missing session
// succeeds.
func (g *Gateway) handleDiscard(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpDiscardSession, g.controlBodyLimit(),
		emptyBody(func(sid *string) validator { return &events.DiscardSessionRequest{SessionID: sid} }),
		func(*events.DiscardSessionResponse) error { writeJSON(w, http.StatusOK, []byte(`{}`)); return nil })
}

// handleFork serves POST /v1/sessions/{id}/fork: {"sessionId": new,
// "atSequence": N} makes the session new a fork of the URL's session at
// its log sequence N (omitted: its newest record). The answer is
// {sessionId, sourceSessionId, atSequence}.
func (g *Gateway) handleFork(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpForkSession, g.controlBodyLimit(),
		func(body []byte, sid events.SessionID) (events.Variant, error) { return decodeFork(body, sid) },
		func(resp *events.ForkSessionResponse) error {
			b, err := json.Marshal(forkJSON{resp.SessionID, resp.SourceSessionID, resp.AtSequence})
			if err != nil {
				return events.Errorf(events.CodeInternal, "render fork: %v", err)
			}
			writeJSON(w, http.StatusOK, b)
			return nil
		})
}

// forkBody is the JSON form of ForkSessionRequest: its source comes from
// the URL, and sessionId names the new session.
type forkBody struct {
	SessionID  *string `json:"sessionId"`
	AtSequence *uint64 `json:"atSequence"`
}

// forkJSON is ForkSessionResponse in JSON.
type forkJSON struct {
	SessionID       string `json:"sessionId"`
	SourceSessionID string `json:"sourceSessionId"`
	AtSequence      uint64 `json:"atSequence"`
}

// decodeFork decodes and checks the body of POST /v1/sessions/{id}/fork
// for the source session sid.
func decodeFork(body []byte, sid events.SessionID) (*events.ForkSessionRequest, error) {
	if !utf8.Valid(body) {
		return nil, events.Errorf(events.CodeInvalidRequest, "request body must be valid UTF-8")
	}
	var b forkBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.SessionID == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "sessionId, the new session's ID, is required")
	}
	req := &events.ForkSessionRequest{SessionID: new(string(sid)), NewSessionID: *b.SessionID, AtSequence: b.AtSequence}
	if _, _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// handleDirectories serves GET /v1/directories?path=: the folders under
// path, confined to the caller's namespace as a session's cwd is; without
// path, the namespace's own folders under the workspace roots. Only names
// and paths of folders are told, never files or their contents.
func (g *Gateway) handleDirectories(w http.ResponseWriter, r *http.Request) error {
	ns, err := g.namespace(r)
	if err != nil {
		return err
	}
	req, err := parseDirectoriesQuery(r.URL.Query())
	if err != nil {
		return err
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	resp, err := rpc.Call[events.ListDirectoriesResponse](ctx, g.nc, events.APISubject(ns, events.OpListDirectories), req, nil)
	if err != nil {
		return err
	}
	dirs := make([]directoryJSON, len(resp.Directories))
	for i, d := range resp.Directories {
		dirs[i] = directoryJSON(d)
	}
	b, err := json.Marshal(directoriesJSON{Path: resp.Path, Parent: resp.Parent, Directories: dirs, Truncated: resp.Truncated})
	if err != nil {
		return events.Errorf(events.CodeInternal, "render directories: %v", err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// directoryJSON is DirectoryEntry in JSON.
type directoryJSON struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// directoriesJSON is ListDirectoriesResponse in JSON.
type directoriesJSON struct {
	Path        string          `json:"path"`
	Parent      string          `json:"parent,omitempty"`
	Directories []directoryJSON `json:"directories"`
	Truncated   bool            `json:"truncated,omitempty"`
}

// parseDirectoriesQuery reads listDirectories' query: path, at most once,
// nothing else.
func parseDirectoriesQuery(q url.Values) (*events.ListDirectoriesRequest, error) {
	if err := onlyKeys(q, "path"); err != nil {
		return nil, err
	}
	req := &events.ListDirectoriesRequest{}
	p, ok, err := single(q, "path")
	if err != nil {
		return nil, err
	}
	if ok {
		if !utf8.ValidString(p) {
			return nil, events.Errorf(events.CodeInvalidRequest, "path must be valid UTF-8")
		}
		req.Path = &p
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}
