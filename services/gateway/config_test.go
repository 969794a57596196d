package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// configBody is the answer of GET and PUT .../config.
type configBody struct {
	Revision uint64 `json:"revision"`
	Options  []struct {
		ID           string          `json:"id"`
		CurrentValue json.RawMessage `json:"currentValue"`
	} `json:"options"`
}

// wantConfig checks that r is 200 with revision (0: any) and the current values
// given as option ID and raw JSON pairs, and returns the body.
func wantConfig(t *testing.T, r response, revision uint64, current ...[2]string) configBody {
	t.Helper()
	var body configBody
	if err := json.Unmarshal(r.body, &body); err != nil || r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %s (%v), want 200 config", r.status, r.body, err)
	}
	if revision != 0 && body.Revision != revision || len(body.Options) != len(current) {
		t.Fatalf("got %s, want revision %d and %d options", r.body, revision, len(current))
	}
	for i, c := range current {
		if o := body.Options[i]; o.ID != c[0] || string(o.CurrentValue) != c[1] {
			t.Errorf("option %d = %s %s, want %s %s", i, o.ID, o.CurrentValue, c[0], c[1])
		}
	}
	return body
}

// storedConfig returns sid's config as the history service answers it on
// NATS: what the gateway must pass on byte for byte.
func (e *env) storedConfig(sid string) *events.AcpSessionConfigResponse {
	e.t.Helper()
	resp, err := rpc.Call[events.AcpSessionConfigResponse](e.t.Context(), e.backend.Conn(), events.APISubject(ns, events.OpGetSessionConfig),
		&events.AcpGetSessionConfigRequest{SessionID: &sid}, nil)
	if err != nil {
		e.t.Fatalf("get_session_config %s: %v", sid, err)
	}
	return resp
}

func TestGetConfig(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody/config", ""), http.StatusNotFound, events.CodeSessionNotFound)

	e.backend.Open("s1", "demo")
	e.backend.Open("s2", "plain")
	calls := e.backend.Calls(events.OpOpenSession) + e.backend.Calls(events.OpPrompt)
	r := e.do(http.MethodGet, "/v1/sessions/s1/config", "")
	// The options pass through as the service stored them.
	stored := e.storedConfig("s1")
	if want := `{"revision":` + jsonNumber(stored.Revision) + `,"options":` + string(stored.Options) + `}`; r.status != http.StatusOK || string(r.body) != want {
		t.Errorf("GET config = %d %s, want 200 %s", r.status, r.body, want)
	}
	wantConfig(t, r, stored.Revision, [2]string{"mode", `"default"`}, [2]string{"model", `"test-small"`})
	req, _ := e.backend.LastRequest(events.OpGetSessionConfig).(*events.AcpGetSessionConfigRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the history service got %+v, want session s1", req)
	}
	// An agent without options has none at all: [], never null.
	if r := e.do(http.MethodGet, "/v1/sessions/s2/config", ""); r.status != http.StatusOK || !strings.HasSuffix(string(r.body), `,"options":[]}`) {
		t.Errorf("GET config without options = %d %s, want 200 with options []", r.status, r.body)
	}

	wantError(t, e.do(http.MethodGet, "/v1/sessions/a.b/config", ""), http.StatusBadRequest, events.CodeInvalidSessionID)
	if r := e.do(http.MethodPost, "/v1/sessions/s1/config", "{}"); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST config = %d, want 405", r.status)
	}
	if n := e.backend.Calls(events.OpOpenSession) + e.backend.Calls(events.OpPrompt) - calls; n != 0 {
		t.Errorf("reading the config opened or prompted: %d calls", n)
	}
	e.backend.StopHistory()
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/config", ""), http.StatusServiceUnavailable, events.CodeUnavailable)
}

func TestSetConfig(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodPut, "/v1/sessions/nobody/config/mode", `{"value":"plan"}`), http.StatusNotFound, events.CodeSessionNotFound)

	e.backend.Open("s1", "demo")
	rev := e.storedConfig("s1").Revision
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/unload", ""), `{}`)
	// A select takes one of its values; the answer is the whole
	// collection with a new revision.
	got := wantConfig(t, e.do(http.MethodPut, "/v1/sessions/s1/config/mode", `{"value":"plan"}`), 0, [2]string{"mode", `"plan"`}, [2]string{"model", `"test-small"`})
	if got.Revision <= rev {
		t.Errorf("revision after a change = %d, want more than %d", got.Revision, rev)
	}
	rev = got.Revision
	req, _ := e.backend.LastRequest(events.OpSetSessionConfigOption).(*events.AcpSetSessionConfigOptionRequest)
	if req == nil || deref(req.SessionID) != "s1" || req.ConfigID != "mode" || string(req.Value) != `"plan"` {
		t.Errorf("the session service got %+v, want session s1, mode, \"plan\"", req)
	}
	if e.backend.Unloaded("s1") {
		t.Error("s1 is still unloaded: setting an option restores it")
	}
	got = wantConfig(t, e.do(http.MethodPut, "/v1/sessions/s1/config/model", ` { "value" : "test-large" } `), 0, [2]string{"mode", `"plan"`}, [2]string{"model", `"test-large"`})
	if got.Revision <= rev {
		t.Errorf("revision after a change = %d, want more than %d", got.Revision, rev)
	}
	rev = got.Revision
	wantConfig(t, e.do(http.MethodGet, "/v1/sessions/s1/config", ""), rev, [2]string{"mode", `"plan"`}, [2]string{"model", `"test-large"`})

	// The agent validates: what it rejects is adapter_error, and changes
	// nothing.
	for _, tt := range []struct{ path, body string }{
		{"/v1/sessions/s1/config/mode", `{"value":"nope"}`},
		{"/v1/sessions/s1/config/mode", `{"value":false}`},
		{"/v1/sessions/s1/config/nope", `{"value":"x"}`},
	} {
		wantError(t, e.do(http.MethodPut, tt.path, tt.body), http.StatusBadGateway, events.CodeAdapterError)
	}
	wantConfig(t, e.do(http.MethodGet, "/v1/sessions/s1/config", ""), rev, [2]string{"mode", `"plan"`}, [2]string{"model", `"test-large"`})
}

// TestConfigServiceAnswers: answers the real services give only with an
// agent or a fault the tests cannot call up (options that are not JSON,
// an agent that dies while it sets an option, no runner), from a
// stand-in.
func TestConfigServiceAnswers(t *testing.T) {
	const set = `{"value":"plan"}`
	checkAnswers(t, newEnv(t, withoutBackend), []serviceAnswer{
		{events.OpGetSessionConfig, http.MethodGet, "/config", "", &events.AcpSessionConfigResponse{Revision: 2}, 200, `{"revision":2,"options":[]}`},
		{events.OpGetSessionConfig, http.MethodGet, "/config", "", &events.AcpSessionConfigResponse{Revision: 3, Options: events.JSON(`{"id":`)}, 500, string(events.CodeInternal)},
		{events.OpSetSessionConfigOption, http.MethodPut, "/config/x", `{"value":"é"}`,
			&events.AcpSessionConfigResponse{Revision: 9, Options: events.JSON(`[{"id":"x","type":"select","currentValue":"é"}]`)},
			200, `{"revision":9,"options":[{"id":"x","type":"select","currentValue":"é"}]}`},
		{events.OpSetSessionConfigOption, http.MethodPut, "/config/mode", set, events.Errorf(events.CodeAdapterExited, "agent died"), 502, string(events.CodeAdapterExited)},
		{events.OpSetSessionConfigOption, http.MethodPut, "/config/mode", set, events.Errorf(events.CodeAgentUnavailable, "no runner"), 503, string(events.CodeAgentUnavailable)},
		{events.OpSetSessionConfigOption, http.MethodPut, "/config/mode", set, errors.New("disk on fire"), 500, string(events.CodeInternal)},
		{events.OpGetSessionCapabilities, http.MethodGet, "/capabilities", "", &events.AcpSessionCapabilitiesResponse{}, 200, `{"capabilities":null}`},
		{events.OpGetSessionCapabilities, http.MethodGet, "/capabilities", "", &events.AcpSessionCapabilitiesResponse{Capabilities: events.JSON(`{"loadSession":`)}, 500, string(events.CodeInternal)},
		{events.OpGetSessionAgentInfo, http.MethodGet, "/agent-info", "", &events.AcpSessionAgentInfoResponse{}, 200, `{"agentInfo":null}`},
	})
}

func TestSetConfigRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	const ok = `{"value":"plan"}`
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		code   events.Code
	}{
		{"long config ID", "/v1/sessions/s1/config/" + strings.Repeat("c", 257), ok, 400, events.CodeInvalidRequest},
		{"space in config ID", "/v1/sessions/s1/config/mo%20de", ok, 400, events.CodeInvalidRequest},
		{"control character in config ID", "/v1/sessions/s1/config/mode%01", ok, 400, events.CodeInvalidRequest},
		{"DEL in config ID", "/v1/sessions/s1/config/mode%7F", ok, 400, events.CodeInvalidRequest},
		{"non-ASCII config ID", "/v1/sessions/s1/config/mod%C3%A9", ok, 400, events.CodeInvalidRequest},
		{"no value", "/v1/sessions/s1/config/mode", `{}`, 400, events.CodeInvalidRequest},
		{"null value", "/v1/sessions/s1/config/mode", `{"value":null}`, 400, events.CodeInvalidRequest},
		{"number value", "/v1/sessions/s1/config/mode", `{"value":1}`, 400, events.CodeInvalidRequest},
		{"array value", "/v1/sessions/s1/config/mode", `{"value":["code"]}`, 400, events.CodeInvalidRequest},
		{"object value", "/v1/sessions/s1/config/mode", `{"value":{"v":"code"}}`, 400, events.CodeInvalidRequest},
		{"invalid UTF-8 value", "/v1/sessions/s1/config/mode", "{\"value\":\"\xff\"}", 400, events.CodeInvalidRequest},
		{"unknown field", "/v1/sessions/s1/config/mode", `{"value":"code","persist":true}`, 400, events.CodeInvalidRequest},
		{"config ID in body", "/v1/sessions/s1/config/mode", `{"value":"code","configId":"mode"}`, 400, events.CodeInvalidRequest},
		{"trailing data", "/v1/sessions/s1/config/mode", ok + `x`, 400, events.CodeInvalidRequest},
		{"bare value", "/v1/sessions/s1/config/mode", `"code"`, 400, events.CodeInvalidRequest},
		{"empty body", "/v1/sessions/s1/config/mode", ``, 400, events.CodeInvalidRequest},
		{"malformed", "/v1/sessions/s1/config/mode", `{"value":`, 400, events.CodeInvalidRequest},
		{"oversize body", "/v1/sessions/s1/config/mode", `{"value":"` + strings.Repeat("v", 64<<10) + `"}`, 413, events.CodePayloadTooLarge},
		{"bad session ID", "/v1/sessions/a*b/config/mode", ok, 400, events.CodeInvalidSessionID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(http.MethodPut, tt.path, tt.body), tt.status, tt.code)
		})
	}
	if r := e.do(http.MethodPut, "/v1/sessions/s1/config/", ok); r.status != http.StatusNotFound {
		t.Errorf("empty config ID = %d %s, want 404", r.status, r.body)
	}
	if n := e.backend.Calls(events.OpSetSessionConfigOption); n != 0 {
		t.Errorf("bad input reached NATS: %d set_session_config_option calls, want 0", n)
	}

	// The longest valid config ID gets through, byte for byte.
	configID := "cfg_" + strings.Repeat("~", 252)
	wantError(t, e.do(http.MethodPut, "/v1/sessions/s1/config/"+configID, ok), http.StatusBadGateway, events.CodeAdapterError)
	req, _ := e.backend.LastRequest(events.OpSetSessionConfigOption).(*events.AcpSetSessionConfigOptionRequest)
	if req == nil || req.ConfigID != configID {
		t.Errorf("the session service got %+v, want the 256-byte config ID", req)
	}
}

func TestCapabilities(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody/capabilities", ""), http.StatusNotFound, events.CodeSessionNotFound)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/a.b/capabilities", ""), http.StatusBadRequest, events.CodeInvalidSessionID)

	e.backend.Open("s1", "demo")
	sid := "s1"
	stored, err := rpc.Call[events.AcpSessionCapabilitiesResponse](t.Context(), e.backend.Conn(), events.APISubject(ns, events.OpGetSessionCapabilities),
		&events.AcpGetSessionCapabilitiesRequest{SessionID: &sid}, nil)
	if err != nil || !strings.Contains(string(stored.Capabilities), `"loadSession":true`) {
		t.Fatalf("get_session_capabilities = %+v, %v; want the demo agent's, which loads sessions", stored, err)
	}
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/capabilities", ""), `{"capabilities":`+string(stored.Capabilities)+`}`)
	req, _ := e.backend.LastRequest(events.OpGetSessionCapabilities).(*events.AcpGetSessionCapabilitiesRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the history service got %+v, want session s1", req)
	}

	e.backend.StopHistory()
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/capabilities", ""), http.StatusServiceUnavailable, events.CodeUnavailable)
}

func TestAgentInfo(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody/agent-info", ""), http.StatusNotFound, events.CodeSessionNotFound)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/a.b/agent-info", ""), http.StatusBadRequest, events.CodeInvalidSessionID)

	e.backend.Open("s1", "demo")
	opens := e.backend.Calls(events.OpOpenSession)
	r := e.do(http.MethodGet, "/v1/sessions/s1/agent-info", "")
	if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), `{"agentInfo":{`) || !strings.Contains(string(r.body), `"name":"skein-testagent"`) {
		t.Errorf("GET agent-info = %d %s, want 200 with the test agent's agentInfo", r.status, r.body)
	}
	req, _ := e.backend.LastRequest(events.OpGetSessionAgentInfo).(*events.AcpGetSessionAgentInfoRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the history service got %+v, want session s1", req)
	}
	if n := e.backend.Calls(events.OpOpenSession) - opens; n != 0 {
		t.Errorf("reading agent info opened the session: %d calls", n)
	}
	e.backend.StopHistory()
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/agent-info", ""), http.StatusServiceUnavailable, events.CodeUnavailable)
}
