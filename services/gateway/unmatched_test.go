package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// A request no route takes is answered with the JSON error body of every
// other failure: not_found for a path no route has, method_not_allowed
// with the Allow header for a path whose routes take other methods.
func TestUnmatchedRoutesAnswerJSON(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		method, path string
		status       int
		code         events.Code
		allow        []string
	}{
		{http.MethodGet, "/nothing", http.StatusNotFound, events.CodeNotFound, nil},
		{http.MethodGet, "/v2/sessions", http.StatusNotFound, events.CodeNotFound, nil},
		{http.MethodGet, "/v1/sessions/s1/nothing", http.StatusNotFound, events.CodeNotFound, nil},
		{http.MethodPost, "/v1/sessions/s1", http.StatusMethodNotAllowed, events.CodeMethodNotAllowed, []string{"GET", "PUT", "PATCH", "DELETE"}},
		{http.MethodDelete, "/v1/agents", http.StatusMethodNotAllowed, events.CodeMethodNotAllowed, []string{"GET"}},
		{http.MethodGet, "/v1/sessions/s1/prompt", http.StatusMethodNotAllowed, events.CodeMethodNotAllowed, []string{"POST"}},
	} {
		r := e.do(tc.method, tc.path, "")
		body := wantError(t, r, tc.status, tc.code)
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: Content-Type %q, want JSON", tc.method, tc.path, ct)
		}
		if !strings.Contains(body.Error.Message, tc.path) {
			t.Errorf("%s %s: message %q does not name the path", tc.method, tc.path, body.Error.Message)
		}
		allow := r.header.Get("Allow")
		for _, m := range tc.allow {
			if !strings.Contains(allow, m) {
				t.Errorf("%s %s: Allow %q lacks %s", tc.method, tc.path, allow, m)
			}
		}
		if tc.allow == nil && allow != "" {
			t.Errorf("%s %s: Allow %q on a 404", tc.method, tc.path, allow)
		}
	}
	// A route still answers as it did.
	if r := e.do(http.MethodGet, "/healthz", ""); r.status != http.StatusOK {
		t.Errorf("GET /healthz = %d %s, want 200", r.status, r.body)
	}
}
