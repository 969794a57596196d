package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/gateway/gatewaytest"
)

// configBody is the answer of GET and PUT .../config.
type configBody struct {
	Revision uint64 `json:"revision"`
	Options  []struct {
		ID           string          `json:"id"`
		CurrentValue json.RawMessage `json:"currentValue"`
	} `json:"options"`
}

// wantConfig checks that r is 200 with revision and the current values
// given as option ID and raw JSON pairs, and returns the body.
func wantConfig(t *testing.T, r response, revision uint64, current ...[2]string) configBody {
	t.Helper()
	var body configBody
	if err := json.Unmarshal(r.body, &body); err != nil || r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %s (%v), want 200 config", r.status, r.body, err)
	}
	if body.Revision != revision || len(body.Options) != len(current) {
		t.Fatalf("got %s, want revision %d and %d options", r.body, revision, len(current))
	}
	for i, c := range current {
		if o := body.Options[i]; o.ID != c[0] || string(o.CurrentValue) != c[1] {
			t.Errorf("option %d = %s %s, want %s %s", i, o.ID, o.CurrentValue, c[0], c[1])
		}
	}
	return body
}

func TestGetConfig(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody/config", ""), http.StatusNotFound, events.CodeSessionNotFound)

	e.backend.CreateSession(ns, "s1", "demo")
	r := e.do(http.MethodGet, "/v1/sessions/s1/config", "")
	// The options pass through as the service stored them.
	if want := `{"revision":0,"options":` + gatewaytest.DefaultConfigOptions + `}`; r.status != http.StatusOK || string(r.body) != want {
		t.Errorf("GET config = %d %s, want 200 %s", r.status, r.body, want)
	}
	req, _ := e.backend.LastRequest(events.OpGetSessionConfig).(*events.AcpGetSessionConfigRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the history service got %+v, want session s1", req)
	}

	e.backend.SetConfigOptions(ns, "s1", `[{"id":"model","type":"select","currentValue":"m1","options":[{"value":"m1","name":"M1"}],"_meta":{"x":1}}]`)
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/config", ""),
		`{"revision":1,"options":[{"id":"model","type":"select","currentValue":"m1","options":[{"value":"m1","name":"M1"}],"_meta":{"x":1}}]}`)
	// No options at all is [], never null.
	e.backend.SetConfigOptions(ns, "s1", ``)
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/config", ""), `{"revision":2,"options":[]}`)

	// Options that are not JSON are the service's fault, masked.
	e.backend.SetConfigOptions(ns, "s1", `{"id":`)
	if body := wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/config", ""), http.StatusInternalServerError, events.CodeInternal); body.Error.Message != "internal error" {
		t.Errorf("message %q, want a masked one", body.Error.Message)
	}

	wantError(t, e.do(http.MethodGet, "/v1/sessions/a.b/config", ""), http.StatusBadRequest, events.CodeInvalidSessionID)
	if r := e.do(http.MethodPost, "/v1/sessions/s1/config", "{}"); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST config = %d, want 405", r.status)
	}
	if n := e.backend.Calls(events.OpOpenSession) + e.backend.Calls(events.OpPrompt); n != 0 {
		t.Errorf("reading the config opened or prompted: %d calls", n)
	}
	e.backend.StopHistory()
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/config", ""), http.StatusServiceUnavailable, events.CodeUnavailable)
}

func TestSetConfig(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodPut, "/v1/sessions/nobody/config/mode", `{"value":"code"}`), http.StatusNotFound, events.CodeSessionNotFound)

	e.backend.CreateSession(ns, "s1", "demo")
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/unload", ""), `{}`)
	// A select takes one of its values, grouped ones included; the answer
	// is the whole collection with a new revision.
	wantConfig(t, e.do(http.MethodPut, "/v1/sessions/s1/config/mode", `{"value":"code"}`), 1, [2]string{"mode", `"code"`}, [2]string{"web_search", "false"})
	req, _ := e.backend.LastRequest(events.OpSetSessionConfigOption).(*events.AcpSetSessionConfigOptionRequest)
	if req == nil || deref(req.SessionID) != "s1" || req.ConfigID != "mode" || string(req.Value) != `"code"` {
		t.Errorf("the session service got %+v, want session s1, mode, \"code\"", req)
	}
	if e.backend.Unloaded(ns, "s1") {
		t.Error("s1 is still unloaded: setting an option restores it")
	}
	wantConfig(t, e.do(http.MethodPut, "/v1/sessions/s1/config/web_search", ` { "value" : true } `), 2, [2]string{"mode", `"code"`}, [2]string{"web_search", "true"})
	req, _ = e.backend.LastRequest(events.OpSetSessionConfigOption).(*events.AcpSetSessionConfigOptionRequest)
	if req == nil || string(req.Value) != `true` {
		t.Errorf("the session service got %+v, want value true", req)
	}
	wantConfig(t, e.do(http.MethodGet, "/v1/sessions/s1/config", ""), 2, [2]string{"mode", `"code"`}, [2]string{"web_search", "true"})

	// The agent validates: what it rejects is adapter_error, and changes
	// nothing.
	for _, tt := range []struct{ path, body string }{
		{"/v1/sessions/s1/config/mode", `{"value":"yolo"}`},
		{"/v1/sessions/s1/config/mode", `{"value":false}`},
		{"/v1/sessions/s1/config/web_search", `{"value":"true"}`},
		{"/v1/sessions/s1/config/nope", `{"value":"x"}`},
	} {
		wantError(t, e.do(http.MethodPut, tt.path, tt.body), http.StatusBadGateway, events.CodeAdapterError)
	}
	if rev, _ := e.backend.ConfigRevision(ns, "s1"); rev != 2 {
		t.Errorf("revision after rejected values = %d, want 2", rev)
	}

	// A scripted answer passes through as it is.
	e.backend.OnSetConfig(func(_ context.Context, _ events.Namespace, req *events.AcpSetSessionConfigOptionRequest) (*events.AcpSessionConfigResponse, error) {
		return &events.AcpSessionConfigResponse{Revision: 9, Options: events.JSON(`[{"id":"` + req.ConfigID + `","type":"select","currentValue":` + string(req.Value) + `}]`)}, nil
	})
	wantStatus(t, e.do(http.MethodPut, "/v1/sessions/s1/config/x", `{"value":"é"}`), `{"revision":9,"options":[{"id":"x","type":"select","currentValue":"é"}]}`)
	e.backend.OnSetConfig(nil)

	e.backend.Fail(events.OpSetSessionConfigOption, events.Errorf(events.CodeAdapterExited, "agent died"))
	wantError(t, e.do(http.MethodPut, "/v1/sessions/s1/config/mode", `{"value":"ask"}`), http.StatusBadGateway, events.CodeAdapterExited)
	e.backend.Fail(events.OpSetSessionConfigOption, events.Errorf(events.CodeAgentUnavailable, "no runner"))
	wantError(t, e.do(http.MethodPut, "/v1/sessions/s1/config/mode", `{"value":"ask"}`), http.StatusServiceUnavailable, events.CodeAgentUnavailable)
	e.backend.Fail(events.OpSetSessionConfigOption, errors.New("disk on fire"))
	if body := wantError(t, e.do(http.MethodPut, "/v1/sessions/s1/config/mode", `{"value":"ask"}`), http.StatusInternalServerError, events.CodeInternal); strings.Contains(body.Error.Message, "disk") {
		t.Errorf("message %q leaks the internal error", body.Error.Message)
	}
}

func TestSetConfigRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "demo")
	const ok = `{"value":"code"}`
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

	e.backend.CreateSession(ns, "s1", "demo")
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/capabilities", ""), `{"capabilities":`+gatewaytest.DefaultCapabilities+`}`)
	req, _ := e.backend.LastRequest(events.OpGetSessionCapabilities).(*events.AcpGetSessionCapabilitiesRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the history service got %+v, want session s1", req)
	}
	// Unknown: null.
	e.backend.SetCapabilities(ns, "s1", "")
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/capabilities", ""), `{"capabilities":null}`)
	e.backend.SetCapabilities(ns, "s1", `{"loadSession":`)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/capabilities", ""), http.StatusInternalServerError, events.CodeInternal)

	e.backend.StopHistory()
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/capabilities", ""), http.StatusServiceUnavailable, events.CodeUnavailable)
}

func TestAgentInfo(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody/agent-info", ""), http.StatusNotFound, events.CodeSessionNotFound)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/a.b/agent-info", ""), http.StatusBadRequest, events.CodeInvalidSessionID)

	e.backend.CreateSession(ns, "s1", "demo")
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/agent-info", ""), `{"agentInfo":`+gatewaytest.DefaultAgentInfo+`}`)
	req, _ := e.backend.LastRequest(events.OpGetSessionAgentInfo).(*events.AcpGetSessionAgentInfoRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the history service got %+v, want session s1", req)
	}
	e.backend.SetAgentInfo(ns, "s1", "")
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/agent-info", ""), `{"agentInfo":null}`)

	if n := e.backend.Calls(events.OpOpenSession); n != 0 {
		t.Errorf("reading agent info opened the session: %d calls", n)
	}
	e.backend.StopHistory()
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/agent-info", ""), http.StatusServiceUnavailable, events.CodeUnavailable)
}
