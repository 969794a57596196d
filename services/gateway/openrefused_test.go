package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"skein.dev/internal/stacktest"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// A refused open leaves no session: GET answers session_not_found, the
// list leaves it out, and the same ID then opens with an agent that works.
// Refused before anything is recorded: an agent no runner knows, and one
// whose command does not resolve. Refused after the session was recorded:
// an agent that is installed but exits as it starts.
func TestRefusedOpenLeavesNoSession(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.backend = append(o.backend, stacktest.WithAgents(
			adapterrunner.Agent{ID: "absent", Command: "/nonexistent/skein-absent-agent"},
			adapterrunner.Agent{ID: "broken", Command: "/bin/false"},
		))
	})
	for _, tc := range []struct {
		sid, agent string
		status     int
		code       events.Code
	}{
		{"mj", "nope", http.StatusNotFound, events.CodeUnknownAgent},
		{"mk", "absent", http.StatusServiceUnavailable, events.CodeAgentNotInstalled},
		{"ml", "broken", 0, ""},
	} {
		path := "/v1/sessions/" + tc.sid
		r := e.do(http.MethodPut, path, `{"agent":"`+tc.agent+`"}`)
		switch {
		case tc.code != "":
			wantError(t, r, tc.status, tc.code)
		case r.status == http.StatusOK:
			t.Fatalf("PUT %s with agent %s = 200, want an error", path, tc.agent)
		}
		wantError(t, e.do(http.MethodGet, path, ""), http.StatusNotFound, events.CodeSessionNotFound)
		wantError(t, e.do(http.MethodGet, path+"/history", ""), http.StatusNotFound, events.CodeSessionNotFound)
		if r := e.do(http.MethodGet, "/v1/sessions", ""); r.status != http.StatusOK {
			t.Fatalf("GET /v1/sessions = %d %s", r.status, r.body)
		} else {
			var list struct {
				Sessions []struct {
					SessionID string `json:"sessionId"`
				} `json:"sessions"`
			}
			if err := json.Unmarshal(r.body, &list); err != nil {
				t.Fatal(err)
			}
			for _, s := range list.Sessions {
				if s.SessionID == tc.sid {
					t.Errorf("the list holds %s after its refused open: %s", tc.sid, r.body)
				}
			}
		}
		if r := e.do(http.MethodPut, path, `{"agent":"demo"}`); r.status != http.StatusOK {
			t.Fatalf("PUT %s with agent demo after the refusal = %d %s, want 200", path, r.status, r.body)
		}
		r = e.do(http.MethodGet, path, "")
		var got struct {
			Agent string `json:"agent"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.Agent != "demo" {
			t.Errorf("GET %s = %d %s, want the session of agent demo", path, r.status, r.body)
		}
	}
}
