package gatewaytest

import (
	"context"
	"encoding/json"
	"slices"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Session config, capabilities and agent info, as the session service sets
// them in the ACP_SESSIONS projection, which the real history service reads
// (get_session_config, get_session_capabilities, get_session_agent_info):
//
//   - A new session has the options DefaultConfigOptions at revision 0,
//     until SetConfigOptions.
//   - set_session_config_option plays the agent: the option must exist,
//     a select takes a string among its values (grouped ones included) and
//     a boolean a boolean; anything else is adapter_error. A value it
//     accepts becomes the option's currentValue, the revision goes up by
//     one (recorded as ConfigChanged), and the answer is the whole
//     collection. The session is restored if it was unloaded. It answers
//     session_not_found for a session that does not exist.
//   - The capabilities and agent info are DefaultCapabilities and
//     DefaultAgentInfo until SetCapabilities and SetAgentInfo say
//     otherwise; "" stores nothing (empty).

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

// splitOptions returns the options of a JSON array, one element each, as
// the projection keeps them (SessionMeta.ConfigOptions). Anything but an
// array is kept as one element, garbage included: the projection then
// holds what a broken writer stored.
func splitOptions(options string) []events.JSON {
	if options == "" {
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(options), &list); err != nil {
		return []events.JSON{events.JSON(options)}
	}
	out := make([]events.JSON, len(list))
	for i, o := range list {
		out[i] = events.JSON(o)
	}
	return out
}

// joinOptions is the inverse of splitOptions: the JSON array.
func joinOptions(options []events.JSON) events.JSON {
	return (&events.SessionMeta{ConfigOptions: options}).ConfigResponse().Options
}

// OnSetConfig replaces how set_session_config_option is answered; nil
// restores the default.
func (b *Backend) OnSetConfig(fn SetConfigFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onSetConfig = fn
}

// SetConfigOptions replaces the session's config options with options, a
// JSON array of ACP config options (anything else is stored as one broken
// option), and bumps their revision, as a config_option_update from the
// agent would.
func (b *Backend) SetConfigOptions(ns events.Namespace, sid events.SessionID, options string) {
	b.tb.Helper()
	b.editMeta(ns, sid, func(m *events.SessionMeta) {
		m.ConfigOptions = splitOptions(options)
		m.ConfigRevision++
	})
}

// SetCapabilities replaces the agent capabilities of the session; ""
// makes them empty.
func (b *Backend) SetCapabilities(ns events.Namespace, sid events.SessionID, capabilities string) {
	b.tb.Helper()
	b.editMeta(ns, sid, func(m *events.SessionMeta) { m.AgentCapabilities = events.JSON(capabilities) })
}

// SetAgentInfo replaces the agent info of the session; "" makes it empty.
func (b *Backend) SetAgentInfo(ns events.Namespace, sid events.SessionID, agentInfo string) {
	b.tb.Helper()
	b.editMeta(ns, sid, func(m *events.SessionMeta) { m.AgentInfo = events.JSON(agentInfo) })
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
	return s.meta.ConfigRevision, true
}

// editMeta changes the session's projection and writes it.
func (b *Backend) editMeta(ns events.Namespace, sid events.SessionID, edit func(*events.SessionMeta)) {
	b.tb.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		b.tb.Fatalf("gatewaytest: no session %s", sid)
		return
	}
	edit(&s.meta)
	b.projectLocked(s)
}

func (b *Backend) setSessionConfigOption(ns events.Namespace, data []byte) (events.Variant, error) {
	req, sid, err := decodeFor[events.AcpSetSessionConfigOptionRequest](b, events.OpSetSessionConfigOption, data)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	_, ok := b.sessions[key(ns, sid)]
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
	s, err := b.sessionLocked(ns, sid)
	if err != nil {
		return nil, err
	}
	s.unloaded = false // the session service restores the adapter to ask the agent
	options, err := setOption(joinOptions(s.meta.ConfigOptions), req.ConfigID, req.Value)
	if err != nil {
		return nil, err
	}
	s.meta.ConfigOptions = splitOptions(string(options))
	s.meta.ConfigRevision++
	if _, err := b.appendLocked(s, eventlog.Entry{Kind: events.LogControl, Value: &events.ConfigChanged{
		Revision: s.meta.ConfigRevision, ConfigOptions: s.meta.ConfigOptions,
	}}); err != nil {
		return nil, err
	}
	b.projectLocked(s)
	return s.meta.ConfigResponse(), nil
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
