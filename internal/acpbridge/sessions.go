package acpbridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"skein.dev/internal/buildinfo"
)

// protocolVersion is the ACP version the bridge speaks.
const protocolVersion = 1

// conservativePrompt is what a client may send when Skein has not seen the
// agent's capabilities yet: text and resource links only.
var conservativePrompt = json.RawMessage(`{"image":false,"audio":false,"embeddedContext":false}`)

// initialize answers protocol version 1 whatever the client asked (the
// client disconnects if it cannot speak it), and notes what the client
// takes.
func (c *conn) initialize(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		ClientCapabilities struct {
			Elicitation struct {
				Form json.RawMessage `json:"form"`
			} `json:"elicitation"`
		} `json:"clientCapabilities"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, invalidParams("initialize: %v", err)
		}
	}
	form := p.ClientCapabilities.Elicitation.Form
	c.mu.Lock()
	c.elicitation = len(form) > 0 && string(form) != "null"
	c.mu.Unlock()

	agent, _ := c.defaultAgent(ctx)
	promptCaps, mcpCaps := c.agentCapabilities(ctx, agent)
	caps := map[string]any{
		"loadSession":         true,
		"promptCapabilities":  promptCaps,
		"sessionCapabilities": map[string]any{"list": struct{}{}, "resume": struct{}{}, "close": struct{}{}},
	}
	if mcpCaps != nil {
		caps["mcpCapabilities"] = mcpCaps
	}
	title := "Skein"
	if agent != "" {
		title = "Skein: " + agent
	}
	return map[string]any{
		"protocolVersion":   protocolVersion,
		"agentCapabilities": caps,
		"authMethods":       []any{},
		"agentInfo":         map[string]string{"name": "skein", "title": title, "version": buildinfo.Version()},
	}, nil
}

// defaultAgent is Config.Agent, else the first agent a runner has
// installed.
func (c *conn) defaultAgent(ctx context.Context) (string, error) {
	c.mu.Lock()
	agent := c.agent
	c.mu.Unlock()
	if agent != "" {
		return agent, nil
	}
	if c.cfg.Agent != "" {
		agent = c.cfg.Agent
	} else {
		agents, err := c.api.agents(ctx)
		if err != nil {
			return "", err
		}
		for _, a := range agents {
			if a.Installed {
				agent = a.ID
				break
			}
		}
		if agent == "" {
			return "", &apiError{Code: "agent_unavailable", Message: "no runner offers an installed agent; name one with --agent or _meta.skein.agent"}
		}
	}
	c.mu.Lock()
	c.agent = agent
	c.mu.Unlock()
	return agent, nil
}

// agentCapabilities are the prompt and MCP capabilities the agent last
// reported to Skein, read from the newest of the namespace's sessions of
// that agent that has them; the conservative prompt capabilities and none
// when no session has.
func (c *conn) agentCapabilities(ctx context.Context, agent string) (prompt, mcp json.RawMessage) {
	if agent == "" {
		return conservativePrompt, nil
	}
	page, err := c.api.list(ctx, "", 50)
	if err != nil {
		return conservativePrompt, nil
	}
	for _, s := range page.Sessions {
		if s.Agent != agent {
			continue
		}
		raw, err := c.api.capabilities(ctx, s.SessionID)
		if err != nil || len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var caps struct {
			Prompt json.RawMessage `json:"promptCapabilities"`
			MCP    json.RawMessage `json:"mcpCapabilities"`
		}
		if json.Unmarshal(raw, &caps) != nil {
			continue
		}
		if len(caps.Prompt) == 0 || string(caps.Prompt) == "null" {
			caps.Prompt = conservativePrompt
		}
		return caps.Prompt, caps.MCP
	}
	return conservativePrompt, nil
}

// skeinMeta is _meta.skein of session/new and session/load.
type skeinMeta struct {
	Agent            string  `json:"agent"`
	PermissionPolicy string  `json:"permissionPolicy"`
	SessionID        string  `json:"sessionId"`
	After            *uint64 `json:"after"`
}

func parseMeta(raw json.RawMessage) (skeinMeta, error) {
	var m struct {
		Skein skeinMeta `json:"skein"`
	}
	if len(raw) == 0 || string(raw) == "null" {
		return m.Skein, nil
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m.Skein, invalidParams("_meta.skein: %v", err)
	}
	return m.Skein, nil
}

// sessionParams are the params of session/new, load and resume.
type sessionParams struct {
	SessionID             string          `json:"sessionId"`
	Cwd                   string          `json:"cwd"`
	AdditionalDirectories []string        `json:"additionalDirectories"`
	McpServers            json.RawMessage `json:"mcpServers"`
	Meta                  json.RawMessage `json:"_meta"`
}

func decodeParams(method string, raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return invalidParams("%s: params are required", method)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return invalidParams("%s: %v", method, err)
	}
	return nil
}

// newSession opens a Skein session; its ID is the ACP sessionId. The
// session is followed once the answer is sent.
func (c *conn) newSession(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := decodeParams("session/new", raw, &p); err != nil {
		return nil, nil, err
	}
	meta, err := parseMeta(p.Meta)
	if err != nil {
		return nil, nil, err
	}
	agent := meta.Agent
	if agent == "" {
		if agent, err = c.defaultAgent(ctx); err != nil {
			return nil, nil, err
		}
	}
	policy := meta.PermissionPolicy
	if policy == "" {
		policy = c.cfg.Policy
	}
	if policy == "" {
		policy = "ask"
	}
	sid := meta.SessionID
	if sid == "" {
		sid = "acp-" + randomID()
	}
	mcp := p.McpServers
	if len(mcp) == 0 || string(mcp) == "null" {
		mcp = nil
	}
	if err := c.api.open(ctx, sid, openBody{Agent: agent, Cwd: p.Cwd, AdditionalDirectories: p.AdditionalDirectories, McpServers: mcp, PermissionPolicy: policy}); err != nil {
		return nil, nil, err
	}
	info, err := c.api.session(ctx, sid)
	if err != nil {
		return nil, nil, err
	}
	result := c.sessionSetup(ctx, sid)
	result["sessionId"] = sid
	return result, c.startFollow(sid, info.LatestSequence, info.State, nil), nil
}

// sessionSetup is what session/new, load and resume answer: the session's
// config options and, when one of them is the agent's mode, its modes.
func (c *conn) sessionSetup(ctx context.Context, sid string) map[string]any {
	out := map[string]any{}
	cfg, err := c.api.config(ctx, sid)
	if err != nil {
		c.lg.Debug("read the session's config", "session", sid, "err", err)
		return out
	}
	options := cfg.Options
	if options == nil {
		options = []json.RawMessage{}
	}
	out["configOptions"] = options
	if modes := modesOf(options); modes != nil {
		out["modes"] = modes
	}
	return out
}

// configOption is the part of an ACP SessionConfigOption the bridge reads.
type configOption struct {
	ID           string          `json:"id"`
	Category     string          `json:"category"`
	Type         string          `json:"type"`
	CurrentValue json.RawMessage `json:"currentValue"`
	Options      []struct {
		Value       string  `json:"value"`
		Name        string  `json:"name"`
		Description *string `json:"description,omitempty"`
	} `json:"options"`
}

// modeOption returns the select option of category mode, if any.
func modeOption(options []json.RawMessage) (*configOption, bool) {
	for _, raw := range options {
		var o configOption
		if json.Unmarshal(raw, &o) == nil && o.Category == "mode" && o.Type == "select" {
			return &o, true
		}
	}
	return nil, false
}

// modesOf is ACP's SessionModeState of the mode option: the modes the
// legacy session/set_mode picks from.
func modesOf(options []json.RawMessage) map[string]any {
	o, ok := modeOption(options)
	if !ok {
		return nil
	}
	var current string
	if json.Unmarshal(o.CurrentValue, &current) != nil {
		return nil
	}
	modes := make([]map[string]any, 0, len(o.Options))
	for _, v := range o.Options {
		m := map[string]any{"id": v.Value, "name": v.Name}
		if v.Description != nil {
			m["description"] = *v.Description
		}
		modes = append(modes, m)
	}
	return map[string]any{"currentModeId": current, "availableModes": modes}
}

// loadSession replays the session's durable history after
// _meta.skein.after (0: all of it), in log order, then answers, and
// follows the session live from where the replay ended.
func (c *conn) loadSession(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := decodeParams("session/load", raw, &p); err != nil {
		return nil, nil, err
	}
	if p.SessionID == "" {
		return nil, nil, invalidParams("session/load: sessionId is required")
	}
	meta, err := parseMeta(p.Meta)
	if err != nil {
		return nil, nil, err
	}
	if _, err := c.api.session(ctx, p.SessionID); err != nil {
		return nil, nil, err
	}
	var after uint64
	if meta.After != nil {
		after = *meta.After
	}
	c.stopFollow(p.SessionID)
	last, open, err := c.replay(ctx, p.SessionID, after)
	if err != nil {
		return nil, nil, err
	}
	result := c.sessionSetup(ctx, p.SessionID)
	return result, c.startFollow(p.SessionID, last, nil, open), nil
}

// resumeSession follows the session live from its newest record, without
// a replay.
func (c *conn) resumeSession(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p sessionParams
	if err := decodeParams("session/resume", raw, &p); err != nil {
		return nil, nil, err
	}
	if p.SessionID == "" {
		return nil, nil, invalidParams("session/resume: sessionId is required")
	}
	info, err := c.api.session(ctx, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	result := c.sessionSetup(ctx, p.SessionID)
	return result, c.startFollow(p.SessionID, info.LatestSequence, info.State, nil), nil
}

// closeSession stops following the session on this connection. The
// session itself, which others may be watching, runs on: this departs from
// ACP's session/close, which cancels the session's work.
func (c *conn) closeSession(raw json.RawMessage) (any, error) {
	var p sessionParams
	if err := decodeParams("session/close", raw, &p); err != nil {
		return nil, err
	}
	c.stopFollow(p.SessionID)
	return struct{}{}, nil
}

// listPages bounds how many pages of sessions one session/list reads to
// find sessions of its cwd.
const listPages = 20

// listSessions lists the namespace's sessions, the most recently updated
// first, those of cwd alone when it is given.
func (c *conn) listSessions(ctx context.Context, raw json.RawMessage) (any, error) {
	var p struct {
		Cwd    *string `json:"cwd"`
		Cursor *string `json:"cursor"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, invalidParams("session/list: %v", err)
		}
	}
	cursor := ""
	if p.Cursor != nil {
		cursor = *p.Cursor
	}
	type info struct {
		SessionID             string   `json:"sessionId"`
		Cwd                   string   `json:"cwd"`
		AdditionalDirectories []string `json:"additionalDirectories,omitempty"`
		Title                 string   `json:"title,omitempty"`
		UpdatedAt             string   `json:"updatedAt,omitempty"`
	}
	sessions := []info{}
	for range listPages {
		page, err := c.api.list(ctx, cursor, 100)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Sessions {
			if p.Cwd != nil && *p.Cwd != "" && s.Cwd != *p.Cwd {
				continue
			}
			sessions = append(sessions, info{SessionID: s.SessionID, Cwd: s.Cwd, AdditionalDirectories: s.AdditionalDirectories, Title: s.Title, UpdatedAt: s.UpdatedAt})
		}
		cursor = page.NextCursor
		if cursor == "" || len(sessions) > 0 {
			break
		}
	}
	out := map[string]any{"sessions": sessions}
	if cursor != "" {
		out["nextCursor"] = cursor
	}
	return out, nil
}

// turnSettle bounds how long a prompt's answer waits for the session's
// stream to carry the end of its turn. The end is in the log before the
// prompt answers, so the stream carries it at once; only a prompt that
// joined a turn which ended before this connection followed the session
// never sees it go by.
const turnSettle = 10 * time.Second

// prompt sends a Skein prompt and answers once every update of its turn
// went to the client.
func (c *conn) prompt(ctx context.Context, id json.RawMessage, raw json.RawMessage) (any, error) {
	var p struct {
		SessionID string          `json:"sessionId"`
		Prompt    json.RawMessage `json:"prompt"`
		MessageID string          `json:"messageId"`
	}
	if err := decodeParams("session/prompt", raw, &p); err != nil {
		return nil, err
	}
	if p.SessionID == "" {
		return nil, invalidParams("session/prompt: sessionId is required")
	}
	if len(p.Prompt) == 0 || p.Prompt[0] != '[' {
		return nil, invalidParams("session/prompt: prompt must be an array of content blocks")
	}
	f, err := c.followed(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	key := c.promptKey(p.SessionID, p.MessageID, id)
	ans, err := c.api.prompt(ctx, p.SessionID, key, p.Prompt)
	for err == nil && ans.Queued != nil {
		// Queued behind another turn (ACP lets a client prompt a busy
		// session): wait for the entry to leave the queue, then send
		// the same keyed prompt again, which joins the turn it started.
		h := f.awaitDequeued(ctx, ans.Queued.ID)
		switch {
		case h == nil:
			return nil, &apiError{Code: "unavailable", Message: "the session's stream ended while the prompt waited in its queue"}
		case h.Queue.Reason == "withdrawn":
			return map[string]any{"stopReason": "cancelled"}, nil
		case h.Queue.Reason != "started":
			e := &apiError{Code: "internal", Message: "the queued prompt could not start"}
			if h.Error != nil {
				e.Code, e.Message = h.Error.Code, h.Error.Message
			}
			return nil, e
		}
		ans, err = c.api.prompt(ctx, p.SessionID, key, p.Prompt)
	}
	turnID := ""
	switch {
	case ans != nil:
		turnID = ans.TurnID
	case err != nil:
		if e, ok := errors.AsType[*apiError](err); ok {
			turnID = e.TurnID
		}
	}
	if turnID != "" {
		f.awaitTurn(ctx, turnID, turnSettle)
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{"stopReason": ans.StopReason}, nil
}

// promptKey is the prompt's idempotency key. With the client's messageId
// (ACP's message-id) the same message sent again, on any connection, joins
// its turn; without one, the same request of this connection does.
func (c *conn) promptKey(sid, messageID string, id json.RawMessage) string {
	h := sha256.New()
	if messageID != "" {
		h.Write([]byte("message\x00" + sid + "\x00" + messageID))
	} else {
		h.Write([]byte("request\x00" + c.salt + "\x00" + sid + "\x00"))
		h.Write(id)
	}
	return "acp-" + hex.EncodeToString(h.Sum(nil))[:40]
}

// setConfigOption sets one of the session's config options; the answer is
// the whole collection as the agent left it.
func (c *conn) setConfigOption(ctx context.Context, raw json.RawMessage) (any, error) {
	var p struct {
		SessionID string          `json:"sessionId"`
		ConfigID  string          `json:"configId"`
		Value     json.RawMessage `json:"value"`
	}
	if err := decodeParams("session/set_config_option", raw, &p); err != nil {
		return nil, err
	}
	if p.SessionID == "" || p.ConfigID == "" || len(p.Value) == 0 {
		return nil, invalidParams("session/set_config_option: sessionId, configId and value are required")
	}
	cfg, err := c.api.setConfig(ctx, p.SessionID, p.ConfigID, p.Value)
	if err != nil {
		return nil, err
	}
	options := cfg.Options
	if options == nil {
		options = []json.RawMessage{}
	}
	return map[string]any{"configOptions": options}, nil
}

// setMode sets the session's mode option (the legacy session/set_mode).
func (c *conn) setMode(ctx context.Context, raw json.RawMessage) (any, error) {
	var p struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
	}
	if err := decodeParams("session/set_mode", raw, &p); err != nil {
		return nil, err
	}
	if p.SessionID == "" || p.ModeID == "" {
		return nil, invalidParams("session/set_mode: sessionId and modeId are required")
	}
	cfg, err := c.api.config(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	o, ok := modeOption(cfg.Options)
	if !ok {
		return nil, invalidParams("session/set_mode: the session's agent offers no modes")
	}
	value, _ := json.Marshal(p.ModeID)
	if _, err := c.api.setConfig(ctx, p.SessionID, o.ID, value); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}
