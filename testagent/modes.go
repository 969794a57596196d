package testagent

import (
	"encoding/json"
	"slices"
)

// The modes and models every session offers. Which shape carries them
// (legacy modes/models, config options, or both) depends on the flags.
var (
	availableModes = []mode{
		{ID: "default", Name: "Default", Description: "Ask before running tools"},
		{ID: "plan", Name: "Plan", Description: "Plan only, change nothing"},
		{ID: "yolo", Name: "YOLO", Description: "Never ask"},
	}
	availableModels = []model{
		{ModelID: "test-small", Name: "Test Small", Description: "Fast and small"},
		{ModelID: "test-large", Name: "Test Large", Description: "Slow and large"},
	}
)

const (
	defaultMode  = "default"
	defaultModel = "test-small"
)

func knownMode(id string) bool {
	return slices.ContainsFunc(availableModes, func(m mode) bool { return m.ID == id })
}

func knownModel(id string) bool {
	return slices.ContainsFunc(availableModels, func(m model) bool { return m.ModelID == id })
}

// setupLocked returns the session state part of a session/new, load or
// resume result. Call with a.mu held.
func (a *agent) setupLocked(s *session) sessionSetup {
	var r sessionSetup
	if a.cfg.LegacyModes {
		r.Modes = &modeState{CurrentModeID: s.mode, AvailableModes: availableModes}
	}
	if a.cfg.LegacyModels {
		r.Models = &modelState{CurrentModelID: s.model, AvailableModels: availableModels}
	}
	r.ConfigOptions = a.configOptionsLocked(s)
	return r
}

// configOptionsLocked returns the complete config option state of s, in
// -config-options order. Call with a.mu held.
func (a *agent) configOptionsLocked(s *session) []configOption {
	var opts []configOption
	for _, id := range a.cfg.ConfigOptions {
		switch id {
		case configMode:
			o := configOption{ID: configMode, Name: "Mode", Description: "Session permission mode", Category: "mode", Type: "select", CurrentValue: s.mode}
			for _, m := range availableModes {
				o.Options = append(o.Options, configChoice{Value: m.ID, Name: m.Name, Description: m.Description})
			}
			opts = append(opts, o)
		case configModel:
			o := configOption{ID: configModel, Name: "Model", Description: "Model to use", Category: "model", Type: "select", CurrentValue: s.model}
			for _, m := range availableModels {
				o.Options = append(o.Options, configChoice{Value: m.ModelID, Name: m.Name, Description: m.Description})
			}
			opts = append(opts, o)
		}
	}
	return opts
}

// sessionFor returns the session id names; when there is none it answers
// msg with -32002 and returns nil.
func (a *agent) sessionFor(msg inMessage, id string) *session {
	a.mu.Lock()
	s := a.sessions[id]
	a.mu.Unlock()
	if s == nil {
		a.respondErr(msg.ID, errSessionNotFound(id))
	}
	return s
}

// setMode answers the legacy session/set_mode: it sends current_mode_update
// (and config_option_update when the mode is also a config option, so both
// views agree) before the empty result.
func (a *agent) setMode(msg inMessage) {
	var p struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
	}
	if !a.decodeParams(msg, &p) {
		return
	}
	s := a.sessionFor(msg, p.SessionID)
	if s == nil {
		return
	}
	if !knownMode(p.ModeID) {
		a.respondErr(msg.ID, errInvalidParams("unknown modeId %q", p.ModeID))
		return
	}
	a.mu.Lock()
	s.mode = p.ModeID
	opts := a.configOptionsLocked(s)
	a.mu.Unlock()
	a.persist(s)
	a.notify(s.id, currentModeUpdate{SessionUpdate: "current_mode_update", CurrentModeID: p.ModeID})
	if slices.Contains(a.cfg.ConfigOptions, configMode) {
		a.notify(s.id, configOptionUpdate{SessionUpdate: "config_option_update", ConfigOptions: opts})
	}
	a.respond(msg.ID, struct{}{})
}

// setModel answers the legacy session/set_model with an empty result.
func (a *agent) setModel(msg inMessage) {
	var p struct {
		SessionID string `json:"sessionId"`
		ModelID   string `json:"modelId"`
	}
	if !a.decodeParams(msg, &p) {
		return
	}
	s := a.sessionFor(msg, p.SessionID)
	if s == nil {
		return
	}
	if !knownModel(p.ModelID) {
		a.respondErr(msg.ID, errInvalidParams("unknown modelId %q", p.ModelID))
		return
	}
	a.mu.Lock()
	s.model = p.ModelID
	a.mu.Unlock()
	a.persist(s)
	a.respond(msg.ID, struct{}{})
}

// setConfigOption answers session/set_config_option with the complete
// option list. When legacy modes are on too, a mode change is also announced
// with current_mode_update first, as claude-agent-acp does.
func (a *agent) setConfigOption(msg inMessage) {
	var p struct {
		SessionID string          `json:"sessionId"`
		ConfigID  string          `json:"configId"`
		Value     json.RawMessage `json:"value"`
	}
	if !a.decodeParams(msg, &p) {
		return
	}
	s := a.sessionFor(msg, p.SessionID)
	if s == nil {
		return
	}
	var value string
	if err := json.Unmarshal(p.Value, &value); err != nil {
		a.respondErr(msg.ID, errInvalidParams("value of select option %q must be a string", p.ConfigID))
		return
	}
	var valid bool
	switch {
	case !slices.Contains(a.cfg.ConfigOptions, p.ConfigID):
		a.respondErr(msg.ID, errInvalidParams("unknown configId %q", p.ConfigID))
		return
	case p.ConfigID == configMode:
		valid = knownMode(value)
	case p.ConfigID == configModel:
		valid = knownModel(value)
	}
	if !valid {
		a.respondErr(msg.ID, errInvalidParams("invalid value %q for %q", value, p.ConfigID))
		return
	}
	a.mu.Lock()
	if p.ConfigID == configMode {
		s.mode = value
	} else {
		s.model = value
	}
	opts := a.configOptionsLocked(s)
	a.mu.Unlock()
	a.persist(s)
	if p.ConfigID == configMode && a.cfg.LegacyModes {
		a.notify(s.id, currentModeUpdate{SessionUpdate: "current_mode_update", CurrentModeID: value})
	}
	a.respond(msg.ID, setConfigOptionResult{ConfigOptions: opts})
}
