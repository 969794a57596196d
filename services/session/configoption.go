package session

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/nats-io/nuid"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// call sends one JSON-RPC request to the adapter and waits for its answer,
// which arrives on ACP_IO like all adapter output. sess.mu is released
// while waiting (the answer is applied under it) and held again on return.
func (sess *session) call(ctx context.Context, method string, params any) (*acpwire.Message, error) {
	r := sess.adapter
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	callID := nuid.Next()
	answer := make(chan events.JSON, 1)
	if sess.calls == nil {
		sess.calls = map[string]chan events.JSON{}
	}
	sess.calls[callID] = answer
	defer delete(sess.calls, callID)
	hdr := sess.runnerHeader(r)
	hdr.Set(events.HeaderCallID, callID)
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	if _, err := events.Call[events.RunnerAck](cctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerCall),
		&events.AcpSessionRequest{SessionID: r.acpSessionID, Method: method, Params: raw}, hdr); err != nil {
		return nil, err
	}
	sess.mu.Unlock()
	defer sess.mu.Lock()
	select {
	case resp := <-answer:
		msg, err := acpwire.Parse(resp)
		if err != nil {
			return nil, events.Errorf(events.CodeAdapterProtocol, "%s answer: %v", method, err)
		}
		if msg.Error != nil {
			return nil, events.Errorf(events.CodeAdapterError, "%s: %d %s", method, msg.Error.Code, msg.Error.Message)
		}
		return msg, nil
	case <-cctx.Done():
		return nil, events.Errorf(events.CodeTimeout, "the agent did not answer %s in %v", method, sess.svc.cfg.CallTimeout)
	}
}

// setConfigOption is setSessionConfigOption: it may restore the adapter,
// forwards the change to the agent (which validates it), and the agent's
// answer replaces the cached options and bumps their revision. Options
// mapped from legacy modes or models are set with session/set_mode or
// session/set_model.
func (sess *session) setConfigOption(ctx context.Context, configID string, value events.JSON) (*events.AcpSessionConfigResponse, error) {
	var v any
	if err := json.Unmarshal(value, &v); err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "value must be one JSON string or boolean")
	}
	str, isString := v.(string)
	_, isBool := v.(bool)
	if !isString && !isBool {
		return nil, events.Errorf(events.CodeInvalidRequest, "value must be one JSON string or boolean")
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.load(ctx); err != nil {
		return nil, err
	}
	if sess.opened == nil {
		return nil, events.Errorf(events.CodeSessionNotFound, "session %s does not exist", sess.sid)
	}
	if sess.adapter == nil {
		if err := sess.attach(ctx); err != nil {
			return nil, err
		}
	}
	acpSession := sess.adapter.acpSessionID
	legacy := ""
	if i := sess.optionIndex(configID); i >= 0 {
		legacy = legacyMethod(sess.meta.ConfigOptions[i])
	}
	var opts []events.JSON
	switch legacy {
	case acpwire.MethodSessionSetMode, acpwire.MethodSessionSetModel:
		if !isString {
			return nil, events.Errorf(events.CodeInvalidRequest, "option %s takes a string", configID)
		}
		key := "modeId"
		if legacy == acpwire.MethodSessionSetModel {
			key = "modelId"
		}
		if _, err := sess.call(ctx, legacy, map[string]string{"sessionId": acpSession, key: str}); err != nil {
			return nil, err
		}
		opts = sess.withCurrentValue(configID, value)
	default:
		params := map[string]any{"sessionId": acpSession, "configId": configID, "value": json.RawMessage(value)}
		if isBool {
			params["type"] = "boolean"
		}
		msg, err := sess.call(ctx, acpwire.MethodSessionSetConfigOption, params)
		if err != nil {
			return nil, err
		}
		var res struct {
			ConfigOptions []json.RawMessage `json:"configOptions"`
		}
		if err := json.Unmarshal(msg.Result, &res); err != nil {
			return nil, events.Errorf(events.CodeAdapterProtocol, "session/set_config_option answer: %v", err)
		}
		for _, o := range res.ConfigOptions {
			opts = append(opts, events.JSON(o))
		}
	}
	if err := sess.configChanged(ctx, 0, opts); err != nil {
		return nil, err
	}
	return sess.configResponse(), nil
}

// configChanged makes opts the session's options: a new revision, recorded
// (ConfigChanged) and projected.
func (sess *session) configChanged(ctx context.Context, ioSeq uint64, opts []events.JSON) error {
	sess.meta.ConfigOptions = opts
	sess.meta.ConfigRevision++
	if _, err := sess.append(ctx, ioSeq, eventlog.Entry{Kind: events.LogControl, Value: &events.ConfigChanged{
		Revision: sess.meta.ConfigRevision, ConfigOptions: opts,
	}}); err != nil {
		return err
	}
	sess.project(ctx)
	return nil
}

func (sess *session) configResponse() *events.AcpSessionConfigResponse {
	return sess.meta.ConfigResponse()
}

// optionIndex finds the cached option with id configID, or -1.
func (sess *session) optionIndex(configID string) int {
	return slices.IndexFunc(sess.meta.ConfigOptions, func(o events.JSON) bool {
		var head struct {
			ID string `json:"id"`
		}
		return json.Unmarshal(o, &head) == nil && head.ID == configID
	})
}

// withCurrentValue returns the cached options with configID's current
// value set to value.
func (sess *session) withCurrentValue(configID string, value events.JSON) []events.JSON {
	out := slices.Clone(sess.meta.ConfigOptions)
	if i := sess.optionIndex(configID); i >= 0 {
		var m map[string]json.RawMessage
		if json.Unmarshal(out[i], &m) == nil {
			m["currentValue"] = json.RawMessage(value)
			if b, err := json.Marshal(m); err == nil {
				out[i] = b
			}
		}
	}
	return out
}

// legacyMethod returns _meta.skein.legacy of an option mapped from legacy
// modes or models by the runner.
func legacyMethod(option events.JSON) string {
	var o struct {
		Meta struct {
			Skein struct {
				Legacy string `json:"legacy"`
			} `json:"skein"`
		} `json:"_meta"`
	}
	if json.Unmarshal(option, &o) != nil {
		return ""
	}
	return o.Meta.Skein.Legacy
}

// onConfigUpdate keeps the cache in step with what the agent announces on
// its own: config_option_update replaces the options, current_mode_update
// moves a mode option mapped from legacy modes.
func (sess *session) onConfigUpdate(ctx context.Context, ioSeq uint64, kind string, update json.RawMessage) {
	switch kind {
	case "config_option_update":
		var u struct {
			ConfigOptions []json.RawMessage `json:"configOptions"`
		}
		if json.Unmarshal(update, &u) != nil {
			return
		}
		opts := make([]events.JSON, len(u.ConfigOptions))
		for i, o := range u.ConfigOptions {
			opts[i] = events.JSON(o)
		}
		_ = sess.configChanged(ctx, ioSeq, opts)
	case "current_mode_update":
		var u struct {
			CurrentModeID string `json:"currentModeId"`
		}
		i := sess.optionIndex("mode")
		if json.Unmarshal(update, &u) != nil || i < 0 || legacyMethod(sess.meta.ConfigOptions[i]) == "" {
			return
		}
		value, _ := json.Marshal(u.CurrentModeID)
		next := sess.withCurrentValue("mode", value)
		if !bytes.Equal(next[i], sess.meta.ConfigOptions[i]) {
			_ = sess.configChanged(ctx, ioSeq, next)
		}
	}
}
