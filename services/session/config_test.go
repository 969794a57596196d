package session_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
)

type option struct {
	ID           string          `json:"id"`
	Category     string          `json:"category"`
	CurrentValue json.RawMessage `json:"currentValue"`
	Meta         json.RawMessage `json:"_meta"`
}

func (h *rig) setConfig(t *testing.T, sid, configID, value string) (*events.AcpSessionConfigResponse, error) {
	t.Helper()
	return rpc.Call[events.AcpSessionConfigResponse](t.Context(), h.nc, events.APISubject("default", events.OpSetSessionConfigOption),
		&events.AcpSetSessionConfigOptionRequest{SessionID: &sid, ConfigID: configID, Value: events.JSON(value)}, nil)
}

func options(t *testing.T, raw events.JSON) map[string]option {
	t.Helper()
	var list []option
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("options %s: %v", raw, err)
	}
	out := map[string]option{}
	for _, o := range list {
		out[o.ID] = o
	}
	return out
}

// setSessionConfigOption forwards to the agent, which validates; its answer
// replaces the cached options and bumps the revision, recorded in the log
// and the projection.
func TestSetConfigOption(t *testing.T) {
	h := startRig(t, session.Config{})
	if err := h.open(t, "cfg", events.AcpOpenSessionRequest{Agent: "configurable"}); err != nil {
		t.Fatal(err)
	}
	res, err := h.setConfig(t, "cfg", "mode", `"plan"`)
	if err != nil {
		t.Fatal(err)
	}
	if got := options(t, res.Options)["mode"].CurrentValue; string(got) != `"plan"` || res.Revision == 0 {
		t.Errorf("after set: mode = %s, revision %d; want plan and a new revision", got, res.Revision)
	}
	for name, tc := range map[string]struct{ id, value string }{
		"unknown value":  {"mode", `"nope"`},
		"unknown option": {"colour", `"red"`},
	} {
		if _, err := h.setConfig(t, "cfg", tc.id, tc.value); code(err) != events.CodeAdapterError {
			t.Errorf("%s: set = %v, want %s (the agent validates)", name, err, events.CodeAdapterError)
		}
	}
	for name, value := range map[string]string{"number": `3`, "object": `{"a":1}`, "not JSON": `plan`} {
		if _, err := h.setConfig(t, "cfg", "mode", value); code(err) != events.CodeInvalidRequest {
			t.Errorf("%s: set = %v, want %s", name, err, events.CodeInvalidRequest)
		}
	}
	if n, err := h.countCtl(t.Context(), "cfg", "ConfigChanged"); err != nil || n != 1 {
		t.Errorf("%d ConfigChanged records (%v), want 1: failed sets change nothing", n, err)
	}
	// A set on an unloaded session restores it first.
	h.unload(t, "cfg")
	res, err = h.setConfig(t, "cfg", "model", `"test-large"`)
	if err != nil {
		t.Fatal(err)
	}
	if got := options(t, res.Options)["model"].CurrentValue; string(got) != `"test-large"` {
		t.Errorf("after a set that restored: model = %s", got)
	}
	if tiers := h.tiers(t, "cfg"); len(tiers) != 2 {
		t.Errorf("tiers = %v, want the set to have restored the session", tiers)
	}
}

// An agent with only legacy modes and models is shown config options
// mapped from them, set through session/set_mode and session/set_model.
func TestLegacyModesAndModels(t *testing.T) {
	h := startRig(t, session.Config{})
	if err := h.open(t, "leg", events.AcpOpenSessionRequest{Agent: "legacy"}); err != nil {
		t.Fatal(err)
	}
	res, err := h.setConfig(t, "leg", "model", `"test-large"`)
	if err != nil {
		t.Fatal(err)
	}
	opts := options(t, res.Options)
	if opts["model"].Category != "model" || string(opts["model"].CurrentValue) != `"test-large"` || opts["mode"].Category != "mode" {
		t.Errorf("options = %+v, want mode and model, model now test-large", opts)
	}
	res, err = h.setConfig(t, "leg", "mode", `"plan"`)
	if err != nil {
		t.Fatal(err)
	}
	if got := options(t, res.Options)["mode"].CurrentValue; string(got) != `"plan"` {
		t.Errorf("mode = %s, want plan", got)
	}
	if _, err := h.setConfig(t, "leg", "mode", `"nope"`); code(err) != events.CodeAdapterError {
		t.Errorf("unknown mode = %v, want %s", err, events.CodeAdapterError)
	}
}

// startAgents starts, beside the rig's runner, a runner id offering agents;
// it returns a function that stops it.
func (h *rig) startAgents(t *testing.T, id string, agents ...adapterrunner.Agent) func() {
	t.Helper()
	nc := h.connect()
	runner, err := adapterrunner.New(adapterrunner.Config{ID: id, DataDir: t.TempDir(), StopGrace: 200 * time.Millisecond, Builtin: agents},
		h.lg, nc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	stop := runStoppable(t, "runner "+id, runner)
	flush(t, nc)
	return stop
}

// projectedConfig returns what getSessionConfig answers for sid: the
// options cached in its ACP_SESSIONS projection.
func (h *rig) projectedConfig(t *testing.T, sid string) *events.AcpSessionConfigResponse {
	t.Helper()
	return projectedMeta(t, h, sid).ConfigResponse()
}

// forgetting returns the arguments of a test agent with config options
// whose sessions outlive its process without their settings: a restored
// one reports the default mode and model.
func (h *rig) forgetting(restore string) []string {
	return []string{restore, "--config-options=mode,model", "--forget-config", "--state-dir", h.stateDir}
}

// A restore gives the agent back the values the session had: an agent that
// resumes, loads or recreates the session with its defaults is set again
// as setSessionConfigOption sets it (legacy options by session/set_mode and
// session/set_model), and what it then reports is the cache, recorded.
func TestRestoreReappliesConfig(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	h.startAgents(t, "r2",
		adapterrunner.Agent{ID: "forgets-resume", Command: testAgent, Args: h.forgetting("--resume")},
		adapterrunner.Agent{ID: "forgets-load", Command: testAgent, Args: h.forgetting("--load-session")},
	)
	for _, tc := range []struct {
		agent, tier string
		forgets     bool // the restored agent reports its defaults
	}{
		{"forgets-resume", events.TierResume, true},
		{"forgets-load", events.TierLoad, true},
		{"legacy", events.TierFallback, true}, // a new session
		{"configurable", events.TierResume, false},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			sid := "reapply-" + tc.agent
			if err := h.open(t, sid, events.AcpOpenSessionRequest{Agent: tc.agent}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.setConfig(t, sid, "mode", `"plan"`); err != nil {
				t.Fatal(err)
			}
			before, err := h.setConfig(t, sid, "model", `"test-large"`)
			if err != nil {
				t.Fatal(err)
			}
			changes, err := h.countCtl(ctx, sid, "ConfigChanged")
			if err != nil {
				t.Fatal(err)
			}
			h.unload(t, sid)

			res, err := h.prompt(ctx, sid, "", "config")
			if err != nil {
				t.Fatal(err)
			}
			if got := h.tiers(t, sid); strings.Join(got, ",") != events.TierNew+","+tc.tier {
				t.Fatalf("tiers = %v, want new then %s", got, tc.tier)
			}
			a, err := h.lastAttached(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(a.ConfigOptions)
			if got := options(t, raw)["model"].CurrentValue; (string(got) == `"test-small"`) != tc.forgets {
				t.Fatalf("the restored agent reported model %s; want its default: %v", got, tc.forgets)
			}
			// The agent has the values again ...
			if !strings.Contains(string(res.Message), "config: mode=plan model=test-large") {
				t.Errorf("the restored agent says %s, want mode plan and model test-large", res.Message)
			}
			// ... and so has the cache getSessionConfig reads.
			cfg := h.projectedConfig(t, sid)
			opts := options(t, cfg.Options)
			if string(opts["mode"].CurrentValue) != `"plan"` || string(opts["model"].CurrentValue) != `"test-large"` {
				t.Errorf("cached mode %s, model %s after the restore; want plan, test-large", opts["mode"].CurrentValue, opts["model"].CurrentValue)
			}
			after, err := h.countCtl(ctx, sid, "ConfigChanged")
			if err != nil {
				t.Fatal(err)
			}
			if tc.forgets {
				if after == changes || cfg.Revision <= before.Revision {
					t.Errorf("ConfigChanged records %d -> %d, revision %d -> %d; want the reapplied options recorded under a new revision",
						changes, after, before.Revision, cfg.Revision)
				}
			} else if after != changes || cfg.Revision != before.Revision {
				t.Errorf("ConfigChanged records %d -> %d, revision %d -> %d; want nothing new: the agent kept the values",
					changes, after, before.Revision, cfg.Revision)
			}
			h.readLog(t, sid)
		})
	}
}

// A value the restored agent refuses does not fail the restore: the
// session goes on with the value the agent reports, and the others are
// still given back.
func TestRestoreConfigRefused(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	args := h.forgetting("--resume")
	stop := h.startAgents(t, "r2", adapterrunner.Agent{ID: "moody", Command: testAgent, Args: args})
	if err := h.open(t, "m1", events.AcpOpenSessionRequest{Agent: "moody"}); err != nil {
		t.Fatal(err)
	}
	for id, value := range map[string]string{"mode": `"plan"`, "model": `"test-large"`} {
		if _, err := h.setConfig(t, "m1", id, value); err != nil {
			t.Fatal(err)
		}
	}
	h.unload(t, "m1")
	stop()
	// The same agent, restarted behind a filter that makes every
	// session/set_config_option of the model name an option it lacks.
	h.startAgents(t, "r2", adapterrunner.Agent{ID: "moody", Command: "/bin/sh",
		Args: append([]string{"-c", `sed -u 's/"configId":"model"/"configId":"gone"/' | exec "$0" "$@"`, testAgent}, args...)})

	res, err := h.prompt(ctx, "m1", "", "config")
	if err != nil {
		t.Fatalf("prompt after a refused reapply: %v", err)
	}
	if !strings.Contains(string(res.Message), "config: mode=plan model=test-small") {
		t.Errorf("the restored agent says %s, want mode plan and its default model", res.Message)
	}
	opts := options(t, h.projectedConfig(t, "m1").Options)
	if string(opts["mode"].CurrentValue) != `"plan"` || string(opts["model"].CurrentValue) != `"test-small"` {
		t.Errorf("cached mode %s, model %s; want plan and what the agent reports, test-small", opts["mode"].CurrentValue, opts["model"].CurrentValue)
	}
	if tiers := h.tiers(t, "m1"); strings.Join(tiers, ",") != "new,resume" {
		t.Errorf("tiers = %v, want new,resume", tiers)
	}
}

// Two prompts race on an unloaded session whose restore gives a value
// back. The restore keeps the session to itself while it sets the value,
// as while it starts the adapter, so the prompts are taken one after the
// other (the second may find the first running: session_busy), never both.
func TestRestoreConfigRacesPrompt(t *testing.T) {
	h := startRig(t, session.Config{})
	h.startAgents(t, "r2", adapterrunner.Agent{ID: "forgets-resume", Command: testAgent, Args: h.forgetting("--resume")})
	if err := h.open(t, "rr", events.AcpOpenSessionRequest{Agent: "forgets-resume"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.setConfig(t, "rr", "model", `"test-large"`); err != nil {
		t.Fatal(err)
	}
	turns := 0
	for i := range iterations(40) {
		h.unload(t, "rr")
		ctx, cancel := context.WithTimeout(t.Context(), testutil.PollTimeout)
		var a, b promptResult
		race(i, func() { a.res, a.err = h.prompt(ctx, "rr", "", "config") }, func() { b.res, b.err = h.prompt(ctx, "rr", "", "config") })
		cancel()
		ok := 0
		for _, r := range []promptResult{a, b} {
			switch {
			case r.err == nil:
				ok++
				if !strings.Contains(string(r.res.Message), "model=test-large") {
					t.Errorf("iteration %d: the agent says %s, want model test-large", i, r.res.Message)
				}
			case code(r.err) != events.CodeSessionBusy:
				t.Fatalf("iteration %d: prompt = %v, want success or %s", i, r.err, events.CodeSessionBusy)
			}
		}
		if ok == 0 {
			t.Fatalf("iteration %d: both prompts busy", i)
		}
		turns += ok
	}
	if log, _ := h.readLog(t, "rr"); len(log.Turns) != turns {
		t.Errorf("%d turns in the log, %d prompts succeeded", len(log.Turns), turns)
	}
}
