package test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"skein.dev/internal/natstest"
)

// A session's title on the real stack: derived from the first message,
// replaced by the agent's, then by skein rename, which the agent no longer
// overrides; GET and the session list both show it.
func TestTitlesEndToEnd(t *testing.T) {
	ns := natstest.Run(t)
	st := startStack(t, ns, t.TempDir())
	base := st.url + "/v1/sessions/titled"
	title := func() string {
		t.Helper()
		code, body := do(t, http.MethodGet, base, "")
		if code != http.StatusOK {
			t.Fatalf("GET = %d %s", code, body)
		}
		var s struct {
			Title *string `json:"title"`
		}
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatal(err)
		}
		if s.Title == nil {
			return ""
		}
		return *s.Title
	}
	prompt := func(text string) {
		t.Helper()
		if code, body := do(t, http.MethodPost, base+"/prompt", promptBody(text)); code != http.StatusOK {
			t.Fatalf("prompt %q = %d %s", text, code, body)
		}
	}
	if code, body := do(t, http.MethodPut, base, `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("PUT = %d %s", code, body)
	}
	prompt("Please   look at\nthe   failing tests")
	if got := title(); got != "Please look at the failing tests" {
		t.Errorf("title after the first message = %q", got)
	}
	prompt("title Failing tests")
	if got := title(); got != "Failing tests" {
		t.Errorf("title after the agent's = %q", got)
	}

	code, stdout, stderr := runSkein(t, map[string]string{envServer: st.url}, "rename", "-s", "titled", "Flaky", "tests")
	if code != 0 {
		t.Fatalf("skein rename = %d, stderr %s", code, stderr)
	}
	if stdout != "session titled is now \"Flaky tests\"\n" {
		t.Errorf("skein rename printed %q", stdout)
	}
	prompt("title The agent insists")
	if got := title(); got != "Flaky tests" {
		t.Errorf("title after a rename and the agent's = %q, want the rename's", got)
	}
	if code, body := do(t, http.MethodPatch, base, `{"title":"a\u0007b"}`); code != http.StatusBadRequest || !strings.Contains(string(body), "invalid_request") {
		t.Errorf("PATCH with a control character = %d %s, want 400 invalid_request", code, body)
	}
	code, body := do(t, http.MethodPatch, base, `{"title":"Renamed over HTTP"}`)
	if code != http.StatusOK || !strings.Contains(string(body), `"title":"Renamed over HTTP"`) {
		t.Errorf("PATCH = %d %s, want 200 and the session renamed", code, body)
	}
	// The list is an index the history service keeps from the projection's
	// changes: it shows the rename once it has seen it.
	if err := pollFor(t.Context(), "the session listed with its new title", func() bool {
		code, body = do(t, http.MethodGet, st.url+"/v1/sessions", "")
		return code == http.StatusOK && strings.Contains(string(body), `"title":"Renamed over HTTP"`)
	}); err != nil {
		t.Errorf("%v: GET /v1/sessions = %d %s", err, code, body)
	}
}
