package adapterrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"skein.dev/internal/buildinfo"
	"skein.dev/pkg/acp"
	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/events"
)

// initialize runs initialize (and authenticate, when the registry entry
// names an auth method).
func (p *process) initialize(ctx context.Context, clientCaps events.JSON) (*acpwire.InitializeResult, error) {
	caps := json.RawMessage(clientCapabilities)
	if len(clientCaps) > 0 {
		caps = json.RawMessage(clientCaps)
	}
	init, err := p.conn.Initialize(ctx, acpwire.InitializeParams{
		ProtocolVersion:    acpwire.ProtocolVersion,
		ClientCapabilities: caps,
		ClientInfo:         &acpwire.Implementation{Name: "skein", Title: "Skein", Version: buildinfo.Version()},
	})
	if err != nil {
		return nil, p.failed("initialize", err)
	}
	if init.ProtocolVersion != acpwire.ProtocolVersion {
		return nil, events.Errorf(events.CodeAdapterProtocol, "agent %s speaks ACP version %d, not %d", p.agent.ID, init.ProtocolVersion, acpwire.ProtocolVersion)
	}
	if m := p.agent.AuthMethod; m != "" {
		if err := p.conn.Authenticate(ctx, m); err != nil {
			return nil, p.failed("authenticate", err)
		}
	}
	// Read as the session service reads it to check prompts: the one
	// reader of promptCapabilities.
	p.embedContext = acp.ParsePromptCapabilities(init.AgentCapabilities).EmbeddedContext
	return init, nil
}

// handshake runs initialize and session/new, with meta (the session's
// instructions, systemPromptMeta) as its _meta, and returns what the session
// service records about the adapter.
func (p *process) handshake(ctx context.Context, req *events.AcpCreateSessionRequest, meta json.RawMessage) (*events.AcpSessionCreatedResponse, error) {
	init, err := p.initialize(ctx, req.ClientCapabilities)
	if err != nil {
		return nil, err
	}
	sess, err := p.conn.NewSession(ctx, acpwire.NewSessionParams{
		Cwd:                   p.cwd,
		AdditionalDirectories: req.AdditionalDirectories,
		McpServers:            json.RawMessage(req.McpServers),
		Meta:                  meta,
	})
	if err != nil {
		return nil, p.failed("session/new", err)
	}
	return p.created(init, sess)
}

// restore brings back ACP session req.SessionID by the ladder, advertising
// clientCaps (empty: the runner's default) in initialize: native
// session/resume when the agent advertises it, then session/load when it
// advertises that (the history it replays is dropped: the log is the only
// history), then a new session (the fallback tier; the session service
// then arms its continuation preamble). Whichever method it takes gets
// meta (the session's instructions) as its _meta: an agent is given them
// again on every load or resume, as at creation.
//
// A rung is left for the next when the agent answers it with a JSON-RPC
// error: at once when the error says the session is unknown, after one
// more try otherwise. An agent's error is about its own copy of the
// session, and Skein's log holds the whole of it: gemini-cli answers a load
// in the minute the session was created with -32603, having lost its own
// chat file, and a session must not fail every later prompt for that. An
// adapter that exits, does not answer, or breaks the protocol fails the
// restore. AdapterReady.Reason tells what was stepped past.
func (p *process) restore(ctx context.Context, req *events.AcpResumeSessionRequest, meta json.RawMessage, clientCaps events.JSON) (*events.AdapterReady, error) {
	init, err := p.initialize(ctx, clientCaps)
	if err != nil {
		return nil, err
	}
	var caps struct {
		LoadSession         bool `json:"loadSession"`
		Resume              any  `json:"resume"` // legacy spelling
		SessionCapabilities struct {
			Resume any `json:"resume"`
		} `json:"sessionCapabilities"`
	}
	_ = json.Unmarshal(init.AgentCapabilities, &caps)
	canResume := caps.SessionCapabilities.Resume != nil || caps.Resume == true
	params := acpwire.LoadSessionParams{
		SessionID:             req.SessionID,
		Cwd:                   p.cwd,
		AdditionalDirectories: req.AdditionalDirectories,
		McpServers:            json.RawMessage(req.McpServers),
		Meta:                  meta,
	}
	rungs := []struct {
		tier, method string
		offered      bool
		call         func() (*acpwire.SessionResult, error)
	}{
		{events.TierResume, acpwire.MethodSessionResume, canResume, func() (*acpwire.SessionResult, error) {
			return p.conn.ResumeSession(ctx, acpwire.ResumeSessionParams(params))
		}},
		{events.TierLoad, acpwire.MethodSessionLoad, caps.LoadSession, func() (*acpwire.SessionResult, error) {
			return p.load(ctx, params)
		}},
	}
	var reasons []string
	if !canResume && !caps.LoadSession {
		reasons = append(reasons, "the agent offers neither session/resume nor session/load")
	}
	for _, r := range rungs {
		if !r.offered {
			continue
		}
		var failures []string // the agent's errors, one per try
		for len(failures) < 2 {
			sess, err := r.call()
			if err == nil {
				if len(failures) > 0 {
					reasons = append(reasons, fmt.Sprintf("%s: %s, then it worked on the second try", r.method, failures[0]))
				}
				return p.ready(r.tier, strings.Join(reasons, "; "), init, sess)
			}
			rpcErr, ok := errors.AsType[*acpwire.RPCError](err)
			if !ok || p.ended() {
				return nil, p.failed(r.method, err)
			}
			failures = append(failures, fmt.Sprintf("%d %s", rpcErr.Code, rpcErr.Message))
			if acpwire.IsUnknownSession(err) {
				reasons = append(reasons, fmt.Sprintf("%s: the agent does not know the session (%s)", r.method, failures[len(failures)-1]))
				failures = nil
				break
			}
		}
		switch {
		case len(failures) == 2 && failures[0] == failures[1]:
			reasons = append(reasons, fmt.Sprintf("%s: %s, twice", r.method, failures[0]))
		case len(failures) == 2:
			reasons = append(reasons, fmt.Sprintf("%s: %s, then %s", r.method, failures[0], failures[1]))
		}
	}
	sess, err := p.conn.NewSession(ctx, acpwire.NewSessionParams{
		Cwd:                   p.cwd,
		AdditionalDirectories: req.AdditionalDirectories,
		McpServers:            json.RawMessage(req.McpServers),
		Meta:                  meta,
	})
	if err != nil {
		return nil, p.failed("session/new", err)
	}
	return p.ready(events.TierFallback, strings.Join(reasons, "; "), init, sess)
}

// ended reports whether the adapter's stdout has ended: it exited, or is
// about to.
func (p *process) ended() bool {
	select {
	case <-p.conn.Done():
		return true
	default:
		return false
	}
}

// load runs session/load with the replay it triggers kept out of ACP_IO:
// notifications are dropped from the call until its answer, which the
// reader goroutine delivers in stream order.
func (p *process) load(ctx context.Context, params acpwire.LoadSessionParams) (*acpwire.SessionResult, error) {
	if params.McpServers == nil {
		params.McpServers = json.RawMessage("[]")
	}
	type answer struct {
		m *acpwire.Message
	}
	got := make(chan answer, 1)
	p.replaying.Store(true)
	_, err := p.conn.CallAsync(acpwire.MethodSessionLoad, params, func(m *acpwire.Message) {
		p.replaying.Store(false)
		got <- answer{m}
	})
	if err != nil {
		p.replaying.Store(false)
		return nil, err
	}
	select {
	case a := <-got:
		if a.m.Error != nil {
			return nil, a.m.Error
		}
		return &acpwire.SessionResult{SessionID: params.SessionID, Modes: field(a.m.Result, "modes"), ConfigOptions: field(a.m.Result, "configOptions"), Models: field(a.m.Result, "models"), Raw: a.m.Result}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// field returns the member name of a JSON object, or nil.
func field(obj json.RawMessage, name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return nil
	}
	return json.RawMessage(nullable(m[name]))
}

func (p *process) ready(tier, reason string, init *acpwire.InitializeResult, sess *acpwire.SessionResult) (*events.AdapterReady, error) {
	created, err := p.created(init, sess)
	if err != nil {
		return nil, err
	}
	return &events.AdapterReady{Tier: tier, Reason: reason, Session: *created}, nil
}

// created is what the session service records about an adapter's session.
// It also keeps, on the process, the ACP session ID and which options it
// mapped from legacy lists: what RunnerPrompt, RunnerCancel and
// RunnerSetConfig need to speak to the agent.
func (p *process) created(init *acpwire.InitializeResult, sess *acpwire.SessionResult) (*events.AcpSessionCreatedResponse, error) {
	var opts []events.JSON
	var legacy map[string]string
	if len(sess.ConfigOptions) > 0 && string(sess.ConfigOptions) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(sess.ConfigOptions, &list); err != nil {
			return nil, events.Errorf(events.CodeAdapterProtocol, "configOptions: %v", err)
		}
		for _, o := range list {
			opts = append(opts, events.JSON(o))
		}
	} else {
		opts, legacy = legacyOptions(sess.Modes, sess.Models)
	}
	p.opened(sess.SessionID, legacy)
	p.startLog.opened()
	pid := p.pid
	return &events.AcpSessionCreatedResponse{
		SessionID:         sess.SessionID,
		Pid:               &pid,
		Modes:             nullable(sess.Modes),
		ConfigOptions:     opts,
		AgentCapabilities: nullable(init.AgentCapabilities),
		AgentInfo:         nullable(init.AgentInfo),
	}, nil
}

// failed is the error of a start whose call of method failed: callError's,
// then what the agent said meanwhile that is not ACP (startLog), so that
// an agent that printed its usage or an error, or hangs, or exited, is
// reported with its own words.
func (p *process) failed(method string, err error) error {
	_, answered := errors.AsType[*acpwire.RPCError](err)
	if !answered && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		// Most likely the request could not be written: the adapter
		// exited. Its stdout ends soon after, and then, for callError, the
		// failure is the exit it is, and its last words are in stderr.
		within(p.stopGrace, p.conn.Done(), p.stderrDone)
	}
	err = p.callError(method, err)
	e, ok := errors.AsType[*events.Error](err)
	if !ok {
		return err
	}
	msg := e.Message
	switch e.Code {
	case events.CodeTimeout:
		msg += fmt.Sprintf(" (waited %s)", time.Since(p.started).Round(time.Second))
	case events.CodeAdapterExited:
		within(p.stopGrace, p.stderrDone) // its last words may still be in the pipe
	}
	if e.Code == events.CodeAdapterExited {
		msg += p.deniedHint()
	}
	return &events.Error{Code: e.Code, Message: msg + p.startLog.String()}
}

// deniedHint is what to add to the error of an adapter that died at start
// saying it was refused a file (EACCES or EPERM on its stderr) while the
// sandbox confined it: the path, and the registry setting that grants it.
// "" when it said no such thing or ran unconfined.
func (p *process) deniedHint() string {
	if !p.confined {
		return ""
	}
	path, ok := p.startLog.denied()
	if !ok {
		return ""
	}
	what := "a file"
	if path != "" {
		what = strconv.Quote(path)
	}
	hint := fmt.Sprintf("; it was denied %s, which the sandbox (adapter-runner.sandbox) may refuse it: "+
		"if the agent needs it, add it (or its directory) to the sandbox.read of agent %s in the agents file", what, p.agent.ID)
	if path != "" {
		if err := p.user.canRead(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			hint += fmt.Sprintf("; nor may its user (adapter-runner.adapter-uid) read it: %v", err)
		}
	}
	return hint
}

func nullable(raw json.RawMessage) events.JSON {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return events.JSON(raw)
}

// callError turns a failed call to the agent into a typed error.
func (p *process) callError(method string, err error) error {
	select {
	case <-p.conn.Done():
		return events.Errorf(events.CodeAdapterExited, "agent %s exited during %s: %v", p.agent.ID, method, p.conn.Err())
	default:
	}
	if rpcErr, ok := errors.AsType[*acpwire.RPCError](err); ok {
		return events.Errorf(events.CodeAdapterError, "agent %s: %s: %d %s", p.agent.ID, method, rpcErr.Code, rpcErr.Message)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return events.Errorf(events.CodeTimeout, "agent %s did not answer %s in time", p.agent.ID, method)
	}
	if errors.Is(err, context.Canceled) {
		return events.Errorf(events.CodeUnavailable, "stopped waiting for agent %s to answer %s", p.agent.ID, method)
	}
	return acpError(fmt.Errorf("agent %s: %s: %w", p.agent.ID, method, err))
}

// legacyOptions maps an agent that has no config options but the legacy
// mode and model lists (gemini, claude-code-acp) onto config options, so a
// client sees one interface. Each carries _meta.skein.legacy, the method
// that sets it (session/set_mode, session/set_model), which methods also
// maps the option's ID to.
func legacyOptions(modes, models json.RawMessage) (out []events.JSON, methods map[string]string) {
	add := func(opt legacyOption, method string) {
		opt.Meta = legacyMeta(method)
		b, err := json.Marshal(opt)
		if err != nil {
			return // strings only: it always encodes
		}
		out = append(out, b)
		if methods == nil {
			methods = map[string]string{}
		}
		methods[opt.ID] = method
	}
	var m struct {
		CurrentModeID  string `json:"currentModeId"`
		AvailableModes []struct {
			ID          string  `json:"id"`
			Name        string  `json:"name"`
			Description *string `json:"description,omitempty"`
		} `json:"availableModes"`
	}
	if json.Unmarshal(modes, &m) == nil && len(m.AvailableModes) > 0 {
		opt := legacyOption{ID: "mode", Name: "Mode", Category: "mode", Type: "select", CurrentValue: m.CurrentModeID}
		for _, a := range m.AvailableModes {
			opt.Options = append(opt.Options, legacyValue{Value: a.ID, Name: a.Name, Description: a.Description})
		}
		add(opt, acpwire.MethodSessionSetMode)
	}
	var md struct {
		CurrentModelID  string `json:"currentModelId"`
		AvailableModels []struct {
			ModelID     string  `json:"modelId"`
			Name        string  `json:"name"`
			Description *string `json:"description,omitempty"`
		} `json:"availableModels"`
	}
	if json.Unmarshal(models, &md) == nil && len(md.AvailableModels) > 0 {
		opt := legacyOption{ID: "model", Name: "Model", Category: "model", Type: "select", CurrentValue: md.CurrentModelID}
		for _, a := range md.AvailableModels {
			opt.Options = append(opt.Options, legacyValue{Value: a.ModelID, Name: a.Name, Description: a.Description})
		}
		add(opt, acpwire.MethodSessionSetModel)
	}
	return out, methods
}

type legacyOption struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Category     string          `json:"category"`
	Type         string          `json:"type"`
	CurrentValue string          `json:"currentValue"`
	Options      []legacyValue   `json:"options"`
	Meta         json.RawMessage `json:"_meta"`
}

type legacyValue struct {
	Value       string  `json:"value"`
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
}

func legacyMeta(method string) json.RawMessage {
	b, _ := json.Marshal(map[string]map[string]string{"skein": {"legacy": method}})
	return b
}
