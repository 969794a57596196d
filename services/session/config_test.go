package session_test

import (
	"encoding/json"
	"testing"

	"skein.dev/pkg/events"
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
	return events.Call[events.AcpSessionConfigResponse](t.Context(), h.nc, events.APISubject("default", events.OpSetSessionConfigOption),
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
