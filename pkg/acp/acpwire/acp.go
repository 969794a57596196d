package acpwire

import (
	"context"
	"encoding/json"

	"skein.dev/pkg/acp"
)

// This file holds thin typed helpers for the client->agent methods. Each is
// one Call: it blocks like Call, fails like Call (*RPCError for the agent's
// errors, ctx.Err(), Err()), and keeps the raw result. Result fields that are
// raw JSON are nil when the member is absent or null (the schema treats the
// two alike); Raw always holds the result exactly as sent. A result of the
// wrong shape is an ErrProtocol *Error.

// Implementation names a client or an agent (clientInfo, agentInfo).
type Implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// InitializeParams are the params of initialize. Raw fields are compacted
// (insignificant whitespace removed) but otherwise sent as given.
type InitializeParams struct {
	// ProtocolVersion is the latest version the client speaks; zero sends
	// ProtocolVersion (1).
	ProtocolVersion int `json:"protocolVersion"`
	// ClientCapabilities is sent verbatim; nil omits it (meaning no fs, no
	// terminal). A client that advertises fs or terminal must serve them.
	ClientCapabilities json.RawMessage `json:"clientCapabilities,omitempty"`
	ClientInfo         *Implementation `json:"clientInfo,omitempty"`
	Meta               json.RawMessage `json:"_meta,omitempty"`
}

// InitializeResult is the agent's answer to initialize. The caller decides
// what to do when ProtocolVersion is not the one it asked for.
type InitializeResult struct {
	ProtocolVersion   int
	AgentCapabilities json.RawMessage
	AuthMethods       json.RawMessage
	AgentInfo         json.RawMessage
	Raw               json.RawMessage
}

// Initialize sends initialize, which must be the first request on a
// connection.
func (c *Conn) Initialize(ctx context.Context, p InitializeParams) (*InitializeResult, error) {
	if p.ProtocolVersion == 0 {
		p.ProtocolVersion = ProtocolVersion
	}
	raw, err := c.Call(ctx, MethodInitialize, p)
	if err != nil {
		return nil, err
	}
	var version, caps, methods, info []byte
	if err := resultFields(MethodInitialize, raw, false,
		field{Name: "protocolVersion", Value: &version}, field{Name: "agentCapabilities", Value: &caps},
		field{Name: "authMethods", Value: &methods}, field{Name: "agentInfo", Value: &info}); err != nil {
		return nil, err
	}
	n, ok := integer(version)
	if !ok || n < 0 || n > 65535 {
		return nil, protocolError("initialize result: protocolVersion is %s, want an integer", describe(version))
	}
	return &InitializeResult{
		ProtocolVersion:   int(n),
		AgentCapabilities: nonNull(caps),
		AuthMethods:       nonNull(methods),
		AgentInfo:         nonNull(info),
		Raw:               raw,
	}, nil
}

// Authenticate sends authenticate with one of the agent's authMethods ids
// (never a type "terminal" method: those run interactively outside ACP).
func (c *Conn) Authenticate(ctx context.Context, methodID string) error {
	_, err := c.Call(ctx, MethodAuthenticate, struct {
		MethodID string `json:"methodId"`
	}{methodID})
	return err
}

// NewSessionParams are the params of session/new.
type NewSessionParams struct {
	Cwd                   string   `json:"cwd"` // absolute
	AdditionalDirectories []string `json:"additionalDirectories,omitempty"`
	// McpServers is sent verbatim; nil sends [] (the member is required in
	// ACP v1 and TypeScript agents reject its absence with -32602).
	McpServers json.RawMessage `json:"mcpServers"`
	Meta       json.RawMessage `json:"_meta,omitempty"`
}

// SessionResult is the answer to session/new, session/load or
// session/resume. Models is the legacy (pre-config-options) model state
// that gemini-cli and claude-code-acp still send.
type SessionResult struct {
	SessionID     string
	Modes         json.RawMessage
	ConfigOptions json.RawMessage
	Models        json.RawMessage
	Raw           json.RawMessage
}

// NewSession sends session/new. The result must carry a sessionId.
func (c *Conn) NewSession(ctx context.Context, p NewSessionParams) (*SessionResult, error) {
	if p.McpServers == nil {
		p.McpServers = json.RawMessage("[]")
	}
	raw, err := c.Call(ctx, MethodSessionNew, p)
	if err != nil {
		return nil, err
	}
	res, err := sessionResult(MethodSessionNew, raw, false)
	if err != nil {
		return nil, err
	}
	if res.SessionID == "" {
		return nil, protocolError("session/new result has no sessionId")
	}
	return res, nil
}

// LoadSessionParams are the params of session/load.
type LoadSessionParams struct {
	SessionID             string   `json:"sessionId"`
	Cwd                   string   `json:"cwd"`
	AdditionalDirectories []string `json:"additionalDirectories,omitempty"` // resend the full list
	// McpServers is sent verbatim; nil sends [] (required in ACP v1).
	McpServers json.RawMessage `json:"mcpServers"`
	Meta       json.RawMessage `json:"_meta,omitempty"`
}

// LoadSession sends session/load. The agent replays the session's history
// as session/update notifications before it answers, so by the time
// LoadSession returns, OnNotification has seen all of them. The result may
// be null or {} (both accepted); SessionID is the one asked for when the
// result does not name it.
func (c *Conn) LoadSession(ctx context.Context, p LoadSessionParams) (*SessionResult, error) {
	if p.McpServers == nil {
		p.McpServers = json.RawMessage("[]")
	}
	raw, err := c.Call(ctx, MethodSessionLoad, p)
	if err != nil {
		return nil, err
	}
	return resumedSession(MethodSessionLoad, raw, p.SessionID)
}

// ResumeSessionParams are the params of session/resume (gated on
// agentCapabilities.sessionCapabilities.resume).
type ResumeSessionParams struct {
	SessionID             string   `json:"sessionId"`
	Cwd                   string   `json:"cwd"`
	AdditionalDirectories []string `json:"additionalDirectories,omitempty"`
	// McpServers is sent verbatim; nil omits it (optional for resume).
	McpServers json.RawMessage `json:"mcpServers,omitempty"`
	Meta       json.RawMessage `json:"_meta,omitempty"`
}

// ResumeSession sends session/resume, which reconnects to a session without
// replaying its history. Results are handled as for LoadSession.
func (c *Conn) ResumeSession(ctx context.Context, p ResumeSessionParams) (*SessionResult, error) {
	raw, err := c.Call(ctx, MethodSessionResume, p)
	if err != nil {
		return nil, err
	}
	return resumedSession(MethodSessionResume, raw, p.SessionID)
}

// CloseSession sends session/close (gated on
// agentCapabilities.sessionCapabilities.close); the agent cancels the
// session's ongoing work.
func (c *Conn) CloseSession(ctx context.Context, sessionID string) error {
	_, err := c.Call(ctx, MethodSessionClose, sessionParams{sessionID})
	return err
}

// PromptResult is the answer to session/prompt: the end of the turn.
type PromptResult struct {
	// StopReason is one of the acp.StopReason constants or a value Skein
	// does not know. It is "" when the agent omitted it: the turn ended all
	// the same.
	StopReason string
	Raw        json.RawMessage
}

// Prompt sends session/prompt and waits for the end of the turn. prompt is
// the JSON array of content blocks, sent verbatim (valid JSON, no
// newlines). Every session/update the agent sent before its answer has
// been dispatched when Prompt returns; updates may still arrive afterwards.
// To stop a turn, call Cancel and keep waiting: the agent answers with
// acp.StopReasonCancelled. Cancelling ctx abandons the call instead.
func (c *Conn) Prompt(ctx context.Context, sessionID string, prompt json.RawMessage) (*PromptResult, error) {
	params, err := promptParams(sessionID, prompt)
	if err != nil {
		return nil, err
	}
	raw, err := c.Call(ctx, MethodSessionPrompt, params)
	if err != nil {
		return nil, err
	}
	return promptResult(raw)
}

// PromptAsync sends session/prompt and returns once the request is written
// to the agent's stdin, without waiting for the end of the turn. Exactly
// one of these happens: PromptAsync returns an error and done is never
// called, or done is called exactly once, on the reader goroutine, after
// every notification the agent sent before its answer (CallAsync's
// ordering). done gets the result as Prompt returns it, or an error: the
// agent's *RPCError, an ErrProtocol *Error for a result
// whose stopReason is not a string, or Err() when the connection ended
// before the answer. A result without a stopReason is no error here
// (StopReason ""); the caller decides what that means.
func (c *Conn) PromptAsync(sessionID string, prompt json.RawMessage, done func(*PromptResult, error)) error {
	params, err := promptParams(sessionID, prompt)
	if err != nil {
		return err
	}
	_, err = c.CallAsync(MethodSessionPrompt, params, func(m *Message) {
		switch {
		case m.Raw == nil: // synthesized: the connection ended first
			done(nil, c.Err())
		case m.Error != nil:
			done(nil, m.Error)
		default:
			done(promptResult(m.Result))
		}
	})
	return err
}

// promptParams builds the params of session/prompt, prompt verbatim.
func promptParams(sessionID string, prompt json.RawMessage) (json.RawMessage, error) {
	if err := checkRaw(prompt); err != nil {
		return nil, invalidArgument("session/prompt: prompt: %v", err)
	}
	params := append([]byte(`{"sessionId":`), appendString(nil, sessionID)...)
	params = append(params, `,"prompt":`...)
	params = append(params, prompt...)
	return append(params, '}'), nil
}

// promptResult decodes the result of session/prompt.
func promptResult(raw json.RawMessage) (*PromptResult, error) {
	var stop []byte
	if err := resultFields(MethodSessionPrompt, raw, false, field{Name: "stopReason", Value: &stop}); err != nil {
		return nil, err
	}
	res := &PromptResult{Raw: raw}
	if stop != nil {
		s, ok := acp.StringValue(stop)
		if !ok {
			return nil, protocolError("session/prompt result: stopReason is %s, want a string", describe(stop))
		}
		res.StopReason = s
	}
	return res, nil
}

// Cancel sends the session/cancel notification. The agent should stop the
// turn and answer the pending session/prompt with acp.StopReasonCancelled; the
// client must answer every pending session/request_permission of the
// session with outcome "cancelled". Cancel does neither for you.
func (c *Conn) Cancel(sessionID string) error {
	return c.Notify(MethodSessionCancel, sessionParams{sessionID})
}

// SetConfigOption sends session/set_config_option and returns the agent's
// complete configOptions (nil if absent). value is sent verbatim: a JSON
// string for select options; a JSON true or false also sends
// "type":"boolean", as the schema requires for boolean options.
func (c *Conn) SetConfigOption(ctx context.Context, sessionID, configID string, value json.RawMessage) (json.RawMessage, error) {
	if err := checkRaw(value); err != nil {
		return nil, invalidArgument("session/set_config_option: value: %v", err)
	}
	params := append([]byte(`{"sessionId":`), appendString(nil, sessionID)...)
	params = append(params, `,"configId":`...)
	params = appendString(params, configID)
	if v := string(trimSpace(value)); v == "true" || v == "false" {
		params = append(params, `,"type":"boolean"`...)
	}
	params = append(params, `,"value":`...)
	params = append(params, value...)
	params = append(params, '}')
	raw, err := c.Call(ctx, MethodSessionSetConfigOption, json.RawMessage(params))
	if err != nil {
		return nil, err
	}
	var opts []byte
	if err := resultFields(MethodSessionSetConfigOption, raw, true, field{Name: "configOptions", Value: &opts}); err != nil {
		return nil, err
	}
	return nonNull(opts), nil
}

// SetMode sends session/set_mode (the legacy modes API; prefer
// SetConfigOption when the session returned configOptions).
func (c *Conn) SetMode(ctx context.Context, sessionID, modeID string) error {
	_, err := c.Call(ctx, MethodSessionSetMode, struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
	}{sessionID, modeID})
	return err
}

// SetModel sends the legacy session/set_model, for agents that return
// models instead of a model config option.
func (c *Conn) SetModel(ctx context.Context, sessionID, modelID string) error {
	_, err := c.Call(ctx, MethodSessionSetModel, struct {
		SessionID string `json:"sessionId"`
		ModelID   string `json:"modelId"`
	}{sessionID, modelID})
	return err
}

// sessionParams is {"sessionId": ...}.
type sessionParams struct {
	SessionID string `json:"sessionId"`
}

// resultFields extracts members of a call's result. nullOK accepts a null
// result (all fields nil).
func resultFields(method string, raw json.RawMessage, nullOK bool, fields ...field) error {
	if nullOK && isNull(trimSpace(raw)) {
		for _, f := range fields {
			*f.Value = nil
		}
		return nil
	}
	if err := getFields(raw, fields...); err != nil {
		return protocolError("%s result: %v", method, err)
	}
	return nil
}

// sessionResult decodes the result of session/new, load or resume.
func sessionResult(method string, raw json.RawMessage, nullOK bool) (*SessionResult, error) {
	var id, modes, opts, models []byte
	if err := resultFields(method, raw, nullOK,
		field{Name: "sessionId", Value: &id}, field{Name: "modes", Value: &modes},
		field{Name: "configOptions", Value: &opts}, field{Name: "models", Value: &models}); err != nil {
		return nil, err
	}
	res := &SessionResult{Modes: nonNull(modes), ConfigOptions: nonNull(opts), Models: nonNull(models), Raw: raw}
	if !isNull(id) {
		s, ok := acp.StringValue(id)
		if !ok {
			return nil, protocolError("%s result: sessionId is %s, want a string", method, describe(id))
		}
		res.SessionID = s
	}
	return res, nil
}

// resumedSession decodes a session/load or session/resume result, which may
// be null and usually does not repeat the session id.
func resumedSession(method string, raw json.RawMessage, sessionID string) (*SessionResult, error) {
	res, err := sessionResult(method, raw, true)
	if err != nil {
		return nil, err
	}
	if res.SessionID == "" {
		res.SessionID = sessionID
	}
	return res, nil
}

// nonNull returns v, or nil when v is absent or null.
func nonNull(v []byte) json.RawMessage {
	if isNull(v) {
		return nil
	}
	return v
}
