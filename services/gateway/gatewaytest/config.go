package gatewaytest

import (
	"context"
	"encoding/json"
	"slices"

	"skein.dev/pkg/events"
)

// Session config, capabilities and agent info, as the history service
// reads them and the session service sets them:
//
//   - get_session_config answers the session's options (DefaultConfigOptions
//     until SetConfigOptions) and their revision (0 for a new session).
//   - set_session_config_option plays the agent: the option must exist,
//     a select takes a string among its values (grouped ones included) and
//     a boolean a boolean; anything else is adapter_error. A value it
//     accepts becomes the option's currentValue, the revision goes up by
//     one, and the answer is the whole collection. The session is restored
//     if it was unloaded.
//   - get_session_capabilities and get_session_agent_info answer
//     DefaultCapabilities and DefaultAgentInfo until SetCapabilities and
//     SetAgentInfo say otherwise; "" answers nothing (empty).
//
// Each answers session_not_found for a session that does not exist.

// DefaultConfigOptions is the config options of a new session: a select
// ("mode", ask or code, the second grouped) and a boolean ("web_search").
const DefaultConfigOptions = `[` +
	`{"id":"mode","name":"Mode","category":"mode","type":"select","currentValue":"ask",` +
	`"options":[{"value":"ask","name":"Ask"},{"group":"edit","name":"Edit","options":[{"value":"code","name":"Code"}]}]},` +
	`{"id":"web_search","name":"Web search","type":"boolean","currentValue":false}]`

// DefaultCapabilities is the agent capabilities of a new session.
const DefaultCapabilities = `{"loadSession":true,"promptCapabilities":{"image":false,"audio":false,"embeddedContext":true}}`

// DefaultAgentInfo is the agent info of a new session.
const DefaultAgentInfo = `{"name":"demo-agent","title":"Demo Agent","version":"0.1.0"}`

// SetConfigFunc answers a set_session_config_option in place of the
// default. req names an existing session.
type SetConfigFunc func(ctx context.Context, ns events.Namespace, req *events.AcpSetSessionConfigOptionRequest) (*events.AcpSessionConfigResponse, error)

// sessionConfig is what the fake knows of a session's agent.
type sessionConfig struct {
	revision     uint64
	options      events.JSON
	capabilities events.JSON
	agentInfo    events.JSON
}

func newSessionConfig() sessionConfig {
	return sessionConfig{
		options:      events.JSON(DefaultConfigOptions),
		capabilities: events.JSON(DefaultCapabilities),
		agentInfo:    events.JSON(DefaultAgentInfo),
	}
}

// OnSetConfig replaces how set_session_config_option is answered; nil
// restores the default.
func (b *Backend) OnSetConfig(fn SetConfigFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onSetConfig = fn
}

// SetConfigOptions replaces the session's config options with options, a
// JSON array of ACP config options, and bumps their revision, as a
// config_option_update from the agent would.
func (b *Backend) SetConfigOptions(ns events.Namespace, sid events.SessionID, options string) {
	b.tb.Helper()
	b.editConfig(ns, sid, func(c *sessionConfig) {
		c.options = events.JSON(options)
		c.revision++
	})
}

// SetCapabilities replaces the agent capabilities of the session; ""
// makes them empty.
func (b *Backend) SetCapabilities(ns events.Namespace, sid events.SessionID, capabilities string) {
	b.tb.Helper()
	b.editConfig(ns, sid, func(c *sessionConfig) { c.capabilities = events.JSON(capabilities) })
}

// SetAgentInfo replaces the agent info of the session; "" makes it empty.
func (b *Backend) SetAgentInfo(ns events.Namespace, sid events.SessionID, agentInfo string) {
	b.tb.Helper()
	b.editConfig(ns, sid, func(c *sessionConfig) { c.agentInfo = events.JSON(agentInfo) })
}

// ConfigRevision returns the revision of the session's config options, or
// false when there is no such session.
func (b *Backend) ConfigRevision(ns events.Namespace, sid events.SessionID) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		return 0, false
	}
	return s.config.revision, true
}

func (b *Backend) editConfig(ns events.Namespace, sid events.SessionID, edit func(*sessionConfig)) {
	b.tb.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		b.tb.Fatalf("gatewaytest: no session %s", sid)
		return
	}
	edit(&s.config)
}

// config returns a copy of the session's config.
func (b *Backend) config(ns events.Namespace, sid events.SessionID) (sessionConfig, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		return sessionConfig{}, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	return s.config, nil
}

// configFor decodes a config read of type T, records it under op, and
// returns the config of the session id names (omitted: main).
func configFor[T any, PT interface {
	*T
	events.Variant
}](b *Backend, op events.Op, ns events.Namespace, data []byte, id func(PT) *string) (sessionConfig, error) {
	_, sid, err := decodeFor(b, op, data, id)
	if err != nil {
		return sessionConfig{}, err
	}
	return b.config(ns, sid)
}

func (b *Backend) getSessionConfig(ns events.Namespace, data []byte) (events.Variant, error) {
	c, err := configFor(b, events.OpGetSessionConfig, ns, data, func(r *events.AcpGetSessionConfigRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	return &events.AcpSessionConfigResponse{Revision: c.revision, Options: c.options}, nil
}

func (b *Backend) getSessionCapabilities(ns events.Namespace, data []byte) (events.Variant, error) {
	c, err := configFor(b, events.OpGetSessionCapabilities, ns, data, func(r *events.AcpGetSessionCapabilitiesRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	return &events.AcpSessionCapabilitiesResponse{Capabilities: c.capabilities}, nil
}

func (b *Backend) getSessionAgentInfo(ns events.Namespace, data []byte) (events.Variant, error) {
	c, err := configFor(b, events.OpGetSessionAgentInfo, ns, data, func(r *events.AcpGetSessionAgentInfoRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	return &events.AcpSessionAgentInfoResponse{AgentInfo: c.agentInfo}, nil
}

func (b *Backend) setSessionConfigOption(ns events.Namespace, data []byte) (events.Variant, error) {
	req, sid, err := decodeFor(b, events.OpSetSessionConfigOption, data, func(r *events.AcpSetSessionConfigOptionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	if req.ConfigID == "" || len(req.Value) == 0 {
		return nil, events.Errorf(events.CodeInvalidRequest, "configId and value are required")
	}
	b.mu.Lock()
	s, ok := b.sessions[key(ns, sid)]
	hook := b.onSetConfig
	b.mu.Unlock()
	if !ok {
		return nil, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	if hook != nil {
		return hook(b.ctx, ns, req)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	s.unloaded = false // the session service restores the adapter to ask the agent
	options, err := setOption(s.config.options, req.ConfigID, req.Value)
	if err != nil {
		return nil, err
	}
	s.config.options = options
	s.config.revision++
	return &events.AcpSessionConfigResponse{Revision: s.config.revision, Options: s.config.options}, nil
}

// setOption returns options with the currentValue of the option id set to
// value, or the adapter_error an agent answers when it rejects the value.
func setOption(options events.JSON, id string, value events.JSON) (events.JSON, error) {
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(options, &list); err != nil {
		return nil, events.Errorf(events.CodeAdapterError, "config options: %v", err)
	}
	i := slices.IndexFunc(list, func(o map[string]json.RawMessage) bool {
		var oid string
		return json.Unmarshal(o["id"], &oid) == nil && oid == id
	})
	if i < 0 {
		return nil, events.Errorf(events.CodeAdapterError, "Invalid params: unknown config option %q", id)
	}
	var typ string
	_ = json.Unmarshal(list[i]["type"], &typ) // a missing type is no type
	switch typ {
	case "boolean":
		var v bool
		if json.Unmarshal(value, &v) != nil {
			return nil, events.Errorf(events.CodeAdapterError, "Invalid params: option %q takes a boolean", id)
		}
	case "select":
		var v string
		if json.Unmarshal(value, &v) != nil || !slices.Contains(selectValues(list[i]["options"]), v) {
			return nil, events.Errorf(events.CodeAdapterError, "Invalid params: %s is not a value of option %q", value, id)
		}
	default:
		return nil, events.Errorf(events.CodeAdapterError, "Invalid params: option %q has type %q", id, typ)
	}
	list[i]["currentValue"] = json.RawMessage(value)
	b, err := json.Marshal(list)
	if err != nil {
		return nil, events.Errorf(events.CodeAdapterError, "config options: %v", err)
	}
	return b, nil
}

// selectValues returns the values a select offers, flat or grouped.
func selectValues(raw json.RawMessage) []string {
	var entries []struct {
		Value   *string `json:"value"`
		Options []struct {
			Value string `json:"value"`
		} `json:"options"`
	}
	_ = json.Unmarshal(raw, &entries) // no options offers nothing
	var values []string
	for _, e := range entries {
		if e.Value != nil {
			values = append(values, *e.Value)
		}
		for _, o := range e.Options {
			values = append(values, o.Value)
		}
	}
	return values
}
