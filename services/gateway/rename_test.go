package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// PATCH /v1/sessions/{id} renames the session and answers it as GET shows
// it; GET then shows the title.
func TestRename(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	r := e.do(http.MethodPatch, "/v1/sessions/s1", `{"title":"  Fix the build  "}`)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("PATCH = %d %s, want 200 application/json", r.status, r.body)
	}
	var renamed struct {
		SessionID string  `json:"sessionId"`
		Title     *string `json:"title"`
		State     struct {
			Status string `json:"status"`
		} `json:"state"`
	}
	if err := json.Unmarshal(r.body, &renamed); err != nil {
		t.Fatalf("PATCH body %s: %v", r.body, err)
	}
	if renamed.SessionID != "s1" || deref(renamed.Title) != "Fix the build" || renamed.State.Status != "idle" {
		t.Errorf("PATCH answered %s, want session s1, idle, titled %q", r.body, "Fix the build")
	}
	req, _ := e.backend.LastRequest(events.OpRenameSession).(*events.RenameSessionRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Fatalf("the session service got %+v, want a rename of s1", req)
	}
	r = e.do(http.MethodGet, "/v1/sessions/s1", "")
	var got struct {
		Title *string `json:"title"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil || deref(got.Title) != "Fix the build" {
		t.Errorf("GET after the rename = %s (%v), want title %q", r.body, err, "Fix the build")
	}
}

// A title or body that breaks the rules is 400 invalid_request, and never
// reaches the session service; an unknown session is 404.
func TestRenameRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	for name, body := range map[string]string{
		"empty title":        `{"title":""}`,
		"blank title":        `{"title":" \t\n "}`,
		"121 characters":     `{"title":"` + strings.Repeat("é", events.MaxTitleRunes+1) + `"}`,
		"newline inside":     `{"title":"a\nb"}`,
		"escape character":   `{"title":"\u001b[31mred"}`,
		"C1 control":         `{"title":"a\u0085b"}`,
		"line separator":     `{"title":"a\u2028b"}`,
		"invalid UTF-8":      "{\"title\":\"a\xffb\"}",
		"no title":           `{}`,
		"null title":         `{"title":null}`,
		"not a string":       `{"title":7}`,
		"unknown field":      `{"title":"ok","x":1}`,
		"not an object":      `"ok"`,
		"no body":            ``,
		"two objects":        `{"title":"a"}{"title":"b"}`,
		"other session's ID": `{"title":"ok","sessionId":"s2"}`,
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, e.do(http.MethodPatch, "/v1/sessions/s1", body), http.StatusBadRequest, events.CodeInvalidRequest)
		})
	}
	if n := e.backend.Calls(events.OpRenameSession); n != 0 {
		t.Errorf("the session service got %d renames, want none", n)
	}
	wantError(t, e.do(http.MethodPatch, "/v1/sessions/a.b", `{"title":"ok"}`), http.StatusBadRequest, events.CodeInvalidSessionID)
	wantError(t, e.do(http.MethodPatch, "/v1/sessions/nobody", `{"title":"ok"}`), http.StatusNotFound, events.CodeSessionNotFound)
	r := e.do(http.MethodGet, "/v1/sessions/s1", "")
	if strings.Contains(string(r.body), `"title"`) {
		t.Errorf("GET after rejected renames = %s, want no title", r.body)
	}
}
