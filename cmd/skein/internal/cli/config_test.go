package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/gateway/gatewaytest"
)

func TestConfig(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "config", "-s", "nobody").err, "session_not_found")
	wantCode(t, e.run(t.Context(), "", "config", "-s", "bad.id").err, "invalid_session_id")

	e.backend.CreateSession(ns, "main", "demo")
	const initial = "mode\task\task,code\nweb_search\tfalse\n"
	if r := e.run(t.Context(), "", "config"); r.err != nil || r.stdout != initial {
		t.Errorf("config = %v, printed %q, want %q", r.err, r.stdout, initial)
	}
	req, _ := e.backend.LastRequest(events.OpGetSessionConfig).(*events.AcpGetSessionConfigRequest)
	if req == nil || req.SessionID == nil || *req.SessionID != "main" {
		t.Errorf("config request = %+v, want session main", req)
	}
	if r := e.run(t.Context(), "", "config", "--json"); r.err != nil || r.stdout != `{"revision":0,"options":`+gatewaytest.DefaultConfigOptions+"}\n" {
		t.Errorf("config --json = %v, printed %q", r.err, r.stdout)
	}

	// No options: nothing printed.
	e.backend.CreateSession(ns, "s1", "demo")
	e.backend.SetConfigOptions(ns, "s1", `[]`)
	if r := e.run(t.Context(), "", "config", "-s", "s1"); r.err != nil || r.stdout != "" {
		t.Errorf("config without options = %v, printed %q, want nothing", r.err, r.stdout)
	}
	if r := e.run(t.Context(), "", "config", "extra"); r.err == nil {
		t.Error("config with an argument succeeded")
	}
	e.backend.StopHistory()
	wantCode(t, e.run(t.Context(), "", "config").err, "unavailable")
}

func TestConfigSet(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "config", "set", "mode", "code", "-s", "nobody").err, "session_not_found")

	e.backend.CreateSession(ns, "s1", "demo")
	// A string, and the whole new collection printed.
	if r := e.run(t.Context(), "", "config", "set", "mode", "code", "-s", "s1"); r.err != nil || r.stdout != "mode\tcode\task,code\nweb_search\tfalse\n" {
		t.Errorf("config set mode code = %v, printed %q", r.err, r.stdout)
	}
	req, _ := e.backend.LastRequest(events.OpSetSessionConfigOption).(*events.AcpSetSessionConfigOptionRequest)
	if req == nil || req.SessionID == nil || *req.SessionID != "s1" || req.ConfigID != "mode" || string(req.Value) != `"code"` {
		t.Errorf("set request = %+v, want session s1, mode, \"code\"", req)
	}

	// true and false are booleans; --json prints the reply.
	r := e.run(t.Context(), "", "config", "set", "web_search", "true", "-s", "s1", "--json")
	var got struct {
		Revision uint64 `json:"revision"`
		Options  []struct {
			ID           string          `json:"id"`
			CurrentValue json.RawMessage `json:"currentValue"`
		} `json:"options"`
	}
	if r.err != nil || json.Unmarshal([]byte(r.stdout), &got) != nil || got.Revision != 2 || len(got.Options) != 2 || string(got.Options[1].CurrentValue) != "true" {
		t.Errorf("config set web_search true --json = %v, printed %q, want revision 2 and web_search true", r.err, r.stdout)
	}
	req, _ = e.backend.LastRequest(events.OpSetSessionConfigOption).(*events.AcpSetSessionConfigOptionRequest)
	if req == nil || string(req.Value) != "true" {
		t.Errorf("set request = %+v, want value true", req)
	}

	// What the agent rejects is adapter_error.
	wantCode(t, e.run(t.Context(), "", "config", "set", "web_search", "yes", "-s", "s1").err, "adapter_error")
	wantCode(t, e.run(t.Context(), "", "config", "set", "mode", "false", "-s", "s1").err, "adapter_error")
	// A scripted answer is printed as it is.
	e.backend.OnSetConfig(func(context.Context, events.Namespace, *events.AcpSetSessionConfigOptionRequest) (*events.AcpSessionConfigResponse, error) {
		return &events.AcpSessionConfigResponse{Revision: 7, Options: events.JSON(`[{"id":"effort","type":"select","currentValue":"high","options":[]},{"id":"n","type":"number","currentValue":3}]`)}, nil
	})
	if r := e.run(t.Context(), "", "config", "set", "effort", "high", "-s", "s1"); r.err != nil || r.stdout != "effort\thigh\t\nn\t3\n" {
		t.Errorf("config set effort high = %v, printed %q", r.err, r.stdout)
	}
	// The gateway refuses a bad config ID before NATS.
	calls := e.backend.Calls(events.OpSetSessionConfigOption)
	wantCode(t, e.run(t.Context(), "", "config", "set", "mo de", "code", "-s", "s1").err, "invalid_request")
	if n := e.backend.Calls(events.OpSetSessionConfigOption); n != calls {
		t.Errorf("a bad config ID reached NATS: %d calls, want %d", n, calls)
	}
	if r := e.run(t.Context(), "", "config", "set", "mode"); r.err == nil {
		t.Error("config set without a value succeeded")
	}
}

func TestInfo(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "info", "-s", "nobody").err, "session_not_found")

	e.backend.CreateSession(ns, "s1", "demo")
	want := "agentInfo: " + gatewaytest.DefaultAgentInfo + "\ncapabilities: " + gatewaytest.DefaultCapabilities + "\n"
	if r := e.run(t.Context(), "", "info", "-s", "s1"); r.err != nil || r.stdout != want {
		t.Errorf("info = %v, printed %q, want %q", r.err, r.stdout, want)
	}
	ai, _ := e.backend.LastRequest(events.OpGetSessionAgentInfo).(*events.AcpGetSessionAgentInfoRequest)
	caps, _ := e.backend.LastRequest(events.OpGetSessionCapabilities).(*events.AcpGetSessionCapabilitiesRequest)
	if ai == nil || caps == nil || ai.SessionID == nil || *ai.SessionID != "s1" || caps.SessionID == nil || *caps.SessionID != "s1" {
		t.Errorf("requests = %+v and %+v, want session s1", ai, caps)
	}
	want = `{"agentInfo":` + gatewaytest.DefaultAgentInfo + `,"capabilities":` + gatewaytest.DefaultCapabilities + "}\n"
	if r := e.run(t.Context(), "", "info", "-s", "s1", "--json"); r.err != nil || r.stdout != want {
		t.Errorf("info --json = %v, printed %q, want %q", r.err, r.stdout, want)
	}

	// Unknown: null.
	e.backend.SetAgentInfo(ns, "s1", "")
	e.backend.SetCapabilities(ns, "s1", "")
	if r := e.run(t.Context(), "", "info", "-s", "s1"); r.err != nil || r.stdout != "agentInfo: null\ncapabilities: null\n" {
		t.Errorf("info without either = %v, printed %q", r.err, r.stdout)
	}
	if n := e.backend.Calls(events.OpOpenSession); n != 0 {
		t.Errorf("info opened a session: %d open calls", n)
	}
	e.backend.StopHistory()
	wantCode(t, e.run(t.Context(), "", "info", "-s", "s1").err, "unavailable")
}
