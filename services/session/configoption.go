package session

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// call sends one JSON-RPC request to the adapter and waits for its answer,
// which arrives on ACP_IO like all adapter output. sess.mu is released
// while waiting (the answer is applied under it) and held again on return.
func (sess *session) call(ctx context.Context, method string, params any) (*acpwire.Message, error) {
	return sess.request(ctx, method, params, func(cctx context.Context, answer <-chan events.JSON) (events.JSON, error) {
		sess.mu.Unlock()
		defer sess.mu.Lock()
		select {
		case resp := <-answer:
			return resp, nil
		case <-cctx.Done():
			return nil, cctx.Err()
		}
	})
}

// callHeld is call for a caller that must hold sess.mu throughout: attach,
// whose callers act after it on what they checked before it (a prompt,
// that no turn runs; released, a second prompt would start a turn in
// between). The answer is applied under sess.mu, so instead of waiting for
// the IO consumer callHeld applies the session's ACP_IO itself each time
// the stream's tail announces a record.
func (sess *session) callHeld(ctx context.Context, method string, params any) (*acpwire.Message, error) {
	r := sess.adapter
	wake := make(chan struct{}, 1)
	sub, err := sess.svc.nc.Subscribe(events.IOTailSubject(sess.ns, sess.sid), func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default: // a wake-up is pending; the catch-up it starts reads this record too
		}
	})
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "follow io: %v", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	return sess.request(ctx, method, params, func(cctx context.Context, answer <-chan events.JSON) (events.JSON, error) {
		for {
			select {
			case resp := <-answer:
				return resp, nil
			case <-wake:
				sess.catchUp(r, 0)
				if sess.adapter != r {
					return nil, events.Errorf(events.CodeAdapterExited, "the agent exited before it answered %s", method)
				}
			case <-cctx.Done():
				return nil, cctx.Err()
			}
		}
	})
}

// request sends one JSON-RPC request to the adapter and returns its
// answer, which await waits for (bounded by CallTimeout, in cctx).
func (sess *session) request(ctx context.Context, method string, params any,
	await func(cctx context.Context, answer <-chan events.JSON) (events.JSON, error)) (*acpwire.Message, error) {
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
	resp, err := await(cctx, answer)
	if err != nil {
		if cctx.Err() != nil {
			return nil, events.Errorf(events.CodeTimeout, "the agent did not answer %s in %v", method, sess.svc.cfg.CallTimeout)
		}
		return nil, err
	}
	msg, err := acpwire.Parse(resp)
	if err != nil {
		return nil, events.Errorf(events.CodeAdapterProtocol, "%s answer: %v", method, err)
	}
	if msg.Error != nil {
		return nil, events.Errorf(events.CodeAdapterError, "%s: %d %s", method, msg.Error.Code, msg.Error.Message)
	}
	return msg, nil
}

// setConfigOption is setSessionConfigOption: it may restore the adapter,
// forwards the change to the agent (which validates it), and the agent's
// answer replaces the cached options and bumps their revision. Options
// mapped from legacy modes or models are set with session/set_mode or
// session/set_model.
func (sess *session) setConfigOption(ctx context.Context, configID string, value events.JSON) (*events.AcpSessionConfigResponse, error) {
	if _, err := optionValue(value); err != nil {
		return nil, err
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.loadExisting(ctx); err != nil {
		return nil, err
	}
	if sess.adapter == nil {
		if err := sess.attach(ctx); err != nil {
			return nil, err
		}
	}
	opts, err := sess.sendOption(ctx, sess.call, configID, value)
	if err != nil {
		return nil, err
	}
	if opts == nil {
		opts = sess.withCurrentValue(configID, value)
	}
	if err := sess.configChanged(ctx, 0, opts); err != nil {
		return nil, err
	}
	return sess.configResponse(), nil
}

// sendOption asks the adapter, through call, to set option configID to
// value, and returns the complete options it answers. An option mapped
// from legacy modes or models is set with session/set_mode or
// session/set_model, which answer nothing: opts is then nil, and the
// caller sets the option's current value itself.
func (sess *session) sendOption(ctx context.Context, call func(context.Context, string, any) (*acpwire.Message, error),
	configID string, value events.JSON) ([]events.JSON, error) {
	v, err := optionValue(value)
	if err != nil {
		return nil, err
	}
	str, isString := v.(string)
	_, isBool := v.(bool)
	acpSession := sess.adapter.acpSessionID
	legacy := ""
	if i := sess.optionIndex(configID); i >= 0 {
		legacy = legacyMethod(sess.meta.ConfigOptions[i])
	}
	switch legacy {
	case acpwire.MethodSessionSetMode, acpwire.MethodSessionSetModel:
		if !isString {
			return nil, events.Errorf(events.CodeInvalidRequest, "option %s takes a string", configID)
		}
		key := "modeId"
		if legacy == acpwire.MethodSessionSetModel {
			key = "modelId"
		}
		_, err = call(ctx, legacy, map[string]string{"sessionId": acpSession, key: str})
		return nil, err
	}
	params := map[string]any{"sessionId": acpSession, "configId": configID, "value": json.RawMessage(value)}
	if isBool {
		params["type"] = "boolean"
	}
	msg, err := call(ctx, acpwire.MethodSessionSetConfigOption, params)
	if err != nil {
		return nil, err
	}
	var res struct {
		ConfigOptions []json.RawMessage `json:"configOptions"`
	}
	if err := json.Unmarshal(msg.Result, &res); err != nil {
		return nil, events.Errorf(events.CodeAdapterProtocol, "session/set_config_option answer: %v", err)
	}
	opts := make([]events.JSON, len(res.ConfigOptions))
	for i, o := range res.ConfigOptions {
		opts[i] = events.JSON(o)
	}
	return opts, nil
}

// optionValue decodes value, which must be what session/set_config_option
// takes: one JSON string or boolean.
func optionValue(value events.JSON) (any, error) {
	var v any
	if err := json.Unmarshal(value, &v); err == nil {
		switch v.(type) {
		case string, bool:
			return v, nil
		}
	}
	return nil, events.Errorf(events.CodeInvalidRequest, "value must be one JSON string or boolean")
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
	return indexOption(sess.meta.ConfigOptions, configID)
}

// indexOption finds the option with id configID in opts, or -1.
func indexOption(opts []events.JSON, configID string) int {
	return slices.IndexFunc(opts, func(o events.JSON) bool {
		var head struct {
			ID string `json:"id"`
		}
		return json.Unmarshal(o, &head) == nil && head.ID == configID
	})
}

// withCurrentValue returns the cached options with configID's current
// value set to value.
func (sess *session) withCurrentValue(configID string, value events.JSON) []events.JSON {
	return withValue(sess.meta.ConfigOptions, configID, value)
}

// withValue returns a copy of opts with configID's current value set to
// value.
func withValue(opts []events.JSON, configID string, value events.JSON) []events.JSON {
	out := slices.Clone(opts)
	if i := indexOption(out, configID); i >= 0 {
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
