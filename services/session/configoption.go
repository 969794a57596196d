package session

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
)

// setConfigOption is setSessionConfigOption: it may restore the adapter,
// forwards the change to the agent (which validates it), and the agent's
// answer replaces the cached options and bumps their revision. Options
// mapped from legacy modes or models are set with session/set_mode or
// session/set_model.
func (sess *session) setConfigOption(ctx context.Context, configID string, value events.JSON) (*events.AcpSessionConfigResponse, error) {
	if _, err := events.ConfigValue(value); err != nil {
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
	opts, err := sess.sendOption(ctx, configID, value)
	if err != nil {
		return nil, err
	}
	if opts == nil {
		opts = withValue(sess.meta.ConfigOptions, configID, value)
	}
	if err := sess.configChanged(ctx, ioPos{}, opts); err != nil {
		return nil, err
	}
	return sess.meta.ConfigResponse(), nil
}

// sendOption asks the adapter, through its runner, to set option configID
// to value, and returns the complete options the agent answers. sess.mu
// stays held (bounded by CallTimeout): attach's callers act after it on
// what they checked before it. An option the runner mapped from legacy
// modes or models is set with session/set_mode or session/set_model, which
// answer nothing: opts is then nil, and the caller sets the option's
// current value itself.
func (sess *session) sendOption(ctx context.Context, configID string, value events.JSON) ([]events.JSON, error) {
	v, err := events.ConfigValue(value)
	if err != nil {
		return nil, err
	}
	if i := indexOption(sess.meta.ConfigOptions, configID); i >= 0 && legacyMethod(sess.meta.ConfigOptions[i]) != "" {
		if _, isString := v.(string); !isString {
			return nil, events.Errorf(events.CodeInvalidRequest, "option %s takes a string", configID)
		}
	}
	r := sess.adapter
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	resp, err := rpc.Call[events.RunnerConfigResponse](cctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerSetConfig),
		&events.RunnerSetConfigRequest{ConfigID: configID, Value: value}, r.header())
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, events.Errorf(events.CodeTimeout, "the agent did not answer a config change in %v", sess.svc.cfg.CallTimeout)
		}
		return nil, err
	}
	return resp.ConfigOptions, nil
}

// configChanged makes opts the session's options: a new revision, recorded
// (ConfigChanged) and projected.
func (sess *session) configChanged(ctx context.Context, at ioPos, opts []events.JSON) error {
	sess.meta.ConfigOptions = opts
	sess.meta.ConfigRevision++
	if _, err := sess.append(ctx, at, eventlog.Entry{Kind: events.LogControl, Value: &events.ConfigChanged{
		Revision: sess.meta.ConfigRevision, ConfigOptions: opts,
	}}); err != nil {
		return err
	}
	sess.project(ctx)
	return nil
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

// withValue returns a copy of opts with configID's current value set to
// value, the agent's option JSON otherwise byte for byte.
func withValue(opts []events.JSON, configID string, value events.JSON) []events.JSON {
	out := slices.Clone(opts)
	if i := indexOption(out, configID); i >= 0 {
		out[i] = acp.WithMember(out[i], "currentValue", value)
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
func (r *route) onConfigUpdate(ctx context.Context, at ioPos, kind string, update json.RawMessage) {
	sess := r.sess
	switch kind {
	case acp.UpdateConfigOption:
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
		if err := sess.configChanged(ctx, at, opts); err != nil {
			sess.lg.Warn("record the agent's config options", events.LogKeyErr, err)
		}
	case acp.UpdateCurrentMode:
		var u struct {
			CurrentModeID string `json:"currentModeId"`
		}
		i := indexOption(sess.meta.ConfigOptions, "mode")
		if json.Unmarshal(update, &u) != nil || i < 0 || legacyMethod(sess.meta.ConfigOptions[i]) == "" {
			return
		}
		value, _ := json.Marshal(u.CurrentModeID)
		next := withValue(sess.meta.ConfigOptions, "mode", value)
		if !bytes.Equal(next[i], sess.meta.ConfigOptions[i]) {
			if err := sess.configChanged(ctx, at, next); err != nil {
				sess.lg.Warn("record the agent's mode", events.LogKeyErr, err)
			}
		}
	}
}
