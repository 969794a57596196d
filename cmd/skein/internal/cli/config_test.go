package cli_test

import (
	"encoding/json"
	"testing"

	"skein.dev/internal/buildinfo"
	"skein.dev/pkg/events"
)

// The demo agent's config options, as the test agent reports them, and
// what config prints of them.
const (
	demoOptions = `[{"id":"mode","name":"Mode","description":"Session permission mode","category":"mode","type":"select","currentValue":"default","options":[{"value":"default","name":"Default","description":"Ask before running tools"},{"value":"plan","name":"Plan","description":"Plan only, change nothing"},{"value":"yolo","name":"YOLO","description":"Never ask"}]},{"id":"model","name":"Model","description":"Model to use","category":"model","type":"select","currentValue":"test-small","options":[{"value":"test-small","name":"Test Small","description":"Fast and small"},{"value":"test-large","name":"Test Large","description":"Slow and large"}]}]`
	demoConfig  = "mode\tdefault\tdefault,plan,yolo\nmodel\ttest-small\ttest-small,test-large\n"
)

func TestConfig(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "config", "-s", "nobody").err, "session_not_found")
	wantCode(t, e.run(t.Context(), "", "config", "-s", "bad.id").err, "invalid_session_id")

	e.open("main", "demo")
	if r := e.run(t.Context(), "", "config"); r.err != nil || r.stdout != demoConfig {
		t.Errorf("config = %v, printed %q, want %q", r.err, r.stdout, demoConfig)
	}
	req, _ := e.LastRequest(events.OpGetSessionConfig).(*events.AcpGetSessionConfigRequest)
	if req == nil || req.SessionID == nil || *req.SessionID != "main" {
		t.Errorf("config request = %+v, want session main", req)
	}
	if r := e.run(t.Context(), "", "config", "--json"); r.err != nil || r.stdout != `{"revision":1,"options":`+demoOptions+"}\n" {
		t.Errorf("config --json = %v, printed %q", r.err, r.stdout)
	}

	// No options: nothing printed.
	e.open("s1", "plain")
	if r := e.run(t.Context(), "", "config", "-s", "s1"); r.err != nil || r.stdout != "" {
		t.Errorf("config without options = %v, printed %q, want nothing", r.err, r.stdout)
	}
	if r := e.run(t.Context(), "", "config", "extra"); r.err == nil {
		t.Error("config with an argument succeeded")
	}
	e.StopHistory()
	wantCode(t, e.run(t.Context(), "", "config").err, "unavailable")
}

func TestConfigSet(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "config", "set", "mode", "plan", "-s", "nobody").err, "session_not_found")

	e.open("s1", "demo")
	// A string, and the whole new collection printed.
	if r := e.run(t.Context(), "", "config", "set", "mode", "plan", "-s", "s1"); r.err != nil || r.stdout != "mode\tplan\tdefault,plan,yolo\nmodel\ttest-small\ttest-small,test-large\n" {
		t.Errorf("config set mode plan = %v, printed %q", r.err, r.stdout)
	}
	req, _ := e.LastRequest(events.OpSetSessionConfigOption).(*events.AcpSetSessionConfigOptionRequest)
	if req == nil || req.SessionID == nil || *req.SessionID != "s1" || req.ConfigID != "mode" || string(req.Value) != `"plan"` {
		t.Errorf("set request = %+v, want session s1, mode, \"plan\"", req)
	}

	// --json prints the reply.
	r := e.run(t.Context(), "", "config", "set", "model", "test-large", "-s", "s1", "--json")
	var got struct {
		Revision uint64 `json:"revision"`
		Options  []struct {
			ID           string          `json:"id"`
			CurrentValue json.RawMessage `json:"currentValue"`
		} `json:"options"`
	}
	if r.err != nil || json.Unmarshal([]byte(r.stdout), &got) != nil || got.Revision != 3 || len(got.Options) != 2 || string(got.Options[1].CurrentValue) != `"test-large"` {
		t.Errorf("config set model test-large --json = %v, printed %q, want revision 3 and model test-large", r.err, r.stdout)
	}

	// true and false are booleans, and what the agent rejects is
	// adapter_error: the test agent has no boolean option.
	wantCode(t, e.run(t.Context(), "", "config", "set", "mode", "true", "-s", "s1").err, "adapter_error")
	req, _ = e.LastRequest(events.OpSetSessionConfigOption).(*events.AcpSetSessionConfigOptionRequest)
	if req == nil || string(req.Value) != "true" {
		t.Errorf("set request = %+v, want value true", req)
	}
	wantCode(t, e.run(t.Context(), "", "config", "set", "mode", "nope", "-s", "s1").err, "adapter_error")
	// The gateway refuses a bad config ID before NATS.
	calls := e.Calls(events.OpSetSessionConfigOption)
	wantCode(t, e.run(t.Context(), "", "config", "set", "mo de", "plan", "-s", "s1").err, "invalid_request")
	if n := e.Calls(events.OpSetSessionConfigOption); n != calls {
		t.Errorf("a bad config ID reached NATS: %d calls, want %d", n, calls)
	}
	if r := e.run(t.Context(), "", "config", "set", "mode"); r.err == nil {
		t.Error("config set without a value succeeded")
	}
}

// TestConfigSetPrintsAnyOption: options of other types than the test
// agent's (a number, a select without choices) are printed as they are. A
// stand-in for the session service gives them.
func TestConfigSetPrintsAnyOption(t *testing.T) {
	e := newEnv(t, withoutBackend)
	e.answerWith(events.OpSetSessionConfigOption, &events.AcpSessionConfigResponse{Revision: 7, Options: events.JSON(
		`[{"id":"effort","type":"select","currentValue":"high","options":[]},{"id":"n","type":"number","currentValue":3}]`)})
	if r := e.run(t.Context(), "", "config", "set", "effort", "high", "-s", "s1"); r.err != nil || r.stdout != "effort\thigh\t\nn\t3\n" {
		t.Errorf("config set effort high = %v, printed %q", r.err, r.stdout)
	}
}

// The test agent's agent info and capabilities, as the demo agent
// reports them.
const (
	demoAgentInfo    = `{"name":"skein-testagent","title":"Skein test agent","version":"1.0.0"}`
	demoCapabilities = `{"loadSession":true,"promptCapabilities":{"image":true,"audio":true,"embeddedContext":true},` +
		`"mcpCapabilities":{"http":false,"sse":false},"sessionCapabilities":{"resume":{},"close":{}}}`
)

func TestInfo(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "info", "-s", "nobody").err, "session_not_found")

	e.open("s1", "demo")
	opens := e.Calls(events.OpOpenSession)
	server := "server: " + e.url + " " + buildinfo.Version() + "\n"
	want := server + "agentInfo: " + demoAgentInfo + "\ncapabilities: " + demoCapabilities + "\n"
	if r := e.run(t.Context(), "", "info", "-s", "s1"); r.err != nil || r.stdout != want {
		t.Errorf("info = %v, printed %q, want %q", r.err, r.stdout, want)
	}
	ai, _ := e.LastRequest(events.OpGetSessionAgentInfo).(*events.AcpGetSessionAgentInfoRequest)
	caps, _ := e.LastRequest(events.OpGetSessionCapabilities).(*events.AcpGetSessionCapabilitiesRequest)
	if ai == nil || caps == nil || ai.SessionID == nil || *ai.SessionID != "s1" || caps.SessionID == nil || *caps.SessionID != "s1" {
		t.Errorf("requests = %+v and %+v, want session s1", ai, caps)
	}
	want = `{"agentInfo":` + demoAgentInfo + `,"capabilities":` + demoCapabilities + `,"server":{"url":"` + e.url + `","version":"` + buildinfo.Version() + `"}}` + "\n"
	if r := e.run(t.Context(), "", "info", "-s", "s1", "--json"); r.err != nil || r.stdout != want {
		t.Errorf("info --json = %v, printed %q, want %q", r.err, r.stdout, want)
	}
	if n := e.Calls(events.OpOpenSession); n != opens {
		t.Errorf("info opened a session: %d open calls, want %d", n, opens)
	}
	e.StopHistory()
	wantCode(t, e.run(t.Context(), "", "info", "-s", "s1").err, "unavailable")
}

// TestInfoUnknown: a session whose agent never said either is printed
// null. A stand-in for the service gives that answer.
func TestInfoUnknown(t *testing.T) {
	e := newEnv(t, withoutBackend)
	e.answerWith(events.OpGetSessionAgentInfo, &events.AcpSessionAgentInfoResponse{})
	e.answerWith(events.OpGetSessionCapabilities, &events.AcpSessionCapabilitiesResponse{})
	if r := e.run(t.Context(), "", "info", "-s", "s1"); r.err != nil || r.stdout != "server: "+e.url+" "+buildinfo.Version()+"\nagentInfo: null\ncapabilities: null\n" {
		t.Errorf("info without either = %v, printed %q", r.err, r.stdout)
	}
}
