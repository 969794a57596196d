package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// TestOpenWithPlacement: PUT's placement reaches the session service as
// sent, and GET shows the runner the session is pinned to. A placement no
// runner meets is 503 agent_unavailable naming it, a malformed one 400,
// and a reopen with another placement 409.
func TestOpenWithPlacement(t *testing.T) {
	e := newEnv(t)
	wantStatus(t, e.do(http.MethodPut, "/v1/sessions/p1", `{"agent":"demo","placement":{"runner":"r1"}}`), `{}`)
	req, _ := e.backend.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
	if req == nil || req.Placement == nil || deref(req.Placement.Runner) != "r1" || req.Placement.Labels != nil {
		t.Fatalf("the session service got open request %+v, want placement on runner r1", req)
	}
	wantStatus(t, e.do(http.MethodPut, "/v1/sessions/p1", `{"agent":"demo","placement":{"runner":"r1"}}`), `{}`)
	wantStatus(t, e.do(http.MethodPut, "/v1/sessions/free", `{"agent":"demo","placement":null}`), `{}`)
	for sid, want := range map[string]string{"p1": `"r1"`, "free": ""} {
		r := e.do(http.MethodGet, "/v1/sessions/"+sid, "")
		var got map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &got); err != nil || string(got["runner"]) != want {
			t.Errorf("GET %s = %d %s, want runner %s", sid, r.status, r.body, want)
		}
	}

	body := wantError(t, e.do(http.MethodPut, "/v1/sessions/p2", `{"agent":"demo","placement":{"labels":{"where":"laptop"}}}`),
		http.StatusServiceUnavailable, events.CodeAgentUnavailable)
	if !strings.Contains(body.Error.Message, "labels where=laptop") {
		t.Errorf("open with labels no runner has: %q, want it to name the labels", body.Error.Message)
	}
	body = wantError(t, e.do(http.MethodPut, "/v1/sessions/p1", `{"agent":"demo"}`), http.StatusConflict, events.CodeSessionConflict)
	if !strings.Contains(body.Error.Message, "pinned to runner r1") {
		t.Errorf("reopen without the placement: %q, want it to name the runner", body.Error.Message)
	}
	for _, bad := range []string{
		`{"agent":"demo","placement":{}}`,
		`{"agent":"demo","placement":{"runner":"r1","labels":{"a":"b"}}}`,
		`{"agent":"demo","placement":{"runner":"a.b"}}`,
		`{"agent":"demo","placement":{"labels":{"where":1}}}`,
		`{"agent":"demo","placement":{"labels":{"a b":"c"}}}`,
		`{"agent":"demo","placement":{"node":"r1"}}`,
		`{"agent":"demo","placement":"r1"}`,
	} {
		r := e.do(http.MethodPut, "/v1/sessions/p3", bad)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), string(events.CodeInvalidRequest)) {
			t.Errorf("PUT %s = %d %s, want 400 invalid_request", bad, r.status, r.body)
		}
	}
}
