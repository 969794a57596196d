package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// POST /v1/sessions/{id}/discard deletes a session opened and never
// prompted, and answers 409 session_not_empty for one that was, changing
// nothing.
func TestDiscard(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("eager", "demo")
	if r := e.do(http.MethodPost, "/v1/sessions/eager/discard", ""); r.status != http.StatusOK || string(r.body) != "{}" {
		t.Fatalf("discard = %d %s, want 200 {}", r.status, r.body)
	}
	wantError(t, e.do(http.MethodGet, "/v1/sessions/eager", ""), http.StatusNotFound, events.CodeSessionNotFound)
	if r := e.do(http.MethodPost, "/v1/sessions/never/discard", "{}"); r.status != http.StatusOK {
		t.Errorf("discard of a missing session = %d %s, want 200", r.status, r.body)
	}

	e.backend.Open("used", "demo")
	e.backend.Say("used", "kept")
	last := e.backend.Last("used")
	wantError(t, e.do(http.MethodPost, "/v1/sessions/used/discard", ""), http.StatusConflict, events.CodeSessionNotEmpty)
	if got := e.backend.Last("used"); got != last {
		t.Errorf("a refused discard wrote to the log: last %d, was %d", got, last)
	}
	if r := e.do(http.MethodGet, "/v1/sessions/used", ""); r.status != http.StatusOK {
		t.Errorf("GET after a refused discard = %d %s", r.status, r.body)
	}
}

// POST /v1/sessions/{id}/fork makes a new session whose first prompt
// brings the agent the source's history up to the sequence, and nothing
// after it; the source is untouched.
func TestFork(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("src", "demo")
	first := e.backend.Say("src", "alpha answer")
	at := first[len(first)-1]
	e.backend.Say("src", "beta answer")
	last := e.backend.Last("src")

	r := e.do(http.MethodPost, "/v1/sessions/src/fork", fmt.Sprintf(`{"sessionId":"branch","atSequence":%d}`, at))
	if r.status != http.StatusOK {
		t.Fatalf("fork = %d %s", r.status, r.body)
	}
	var forked struct {
		SessionID       string `json:"sessionId"`
		SourceSessionID string `json:"sourceSessionId"`
		AtSequence      uint64 `json:"atSequence"`
	}
	if err := json.Unmarshal(r.body, &forked); err != nil || forked.SessionID != "branch" || forked.SourceSessionID != "src" || forked.AtSequence != at {
		t.Fatalf("fork answered %s (%v), want branch of src at %d", r.body, err, at)
	}
	if r := e.do(http.MethodGet, "/v1/sessions/branch", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `"agent":"demo"`) {
		t.Errorf("GET the fork = %d %s, want the source's agent", r.status, r.body)
	}
	r = e.do(http.MethodPost, "/v1/sessions/branch/prompt", `{"content":[{"type":"text","text":"what came before?"}]}`)
	if r.status != http.StatusOK {
		t.Fatalf("the fork's first prompt = %d %s", r.status, r.body)
	}
	if !strings.Contains(string(r.body), "You are continuing a Skein session") || !strings.Contains(string(r.body), "alpha answer") {
		t.Errorf("the fork's first reply = %s; want the preamble with the source's history", r.body)
	}
	if strings.Contains(string(r.body), "beta answer") {
		t.Errorf("the fork's first reply = %s; it holds the source's history after the fork", r.body)
	}
	if got := e.backend.Last("src"); got != last {
		t.Errorf("the fork wrote to its source: last %d, was %d", got, last)
	}

	// Refusals, none of which reaches a log.
	wantError(t, e.do(http.MethodPost, "/v1/sessions/nobody/fork", `{"sessionId":"b2"}`), http.StatusNotFound, events.CodeSessionNotFound)
	wantError(t, e.do(http.MethodPost, "/v1/sessions/src/fork", fmt.Sprintf(`{"sessionId":"b3","atSequence":%d}`, last+100)), http.StatusBadRequest, events.CodeInvalidCursor)
	wantError(t, e.do(http.MethodPost, "/v1/sessions/src/fork", `{"sessionId":"branch"}`), http.StatusConflict, events.CodeSessionConflict)
	for name, body := range map[string]string{
		"no body":          ``,
		"no new ID":        `{}`,
		"null new ID":      `{"sessionId":null}`,
		"bad new ID":       `{"sessionId":"a.b"}`,
		"onto itself":      `{"sessionId":"src"}`,
		"zero sequence":    `{"sessionId":"b4","atSequence":0}`,
		"negative":         `{"sessionId":"b4","atSequence":-1}`,
		"fraction":         `{"sessionId":"b4","atSequence":1.5}`,
		"string sequence":  `{"sessionId":"b4","atSequence":"7"}`,
		"unknown field":    `{"sessionId":"b4","x":1}`,
		"two objects":      `{"sessionId":"b4"}{"sessionId":"b5"}`,
		"invalid UTF-8":    "{\"sessionId\":\"b\xff\"}",
		"an array":         `["b4"]`,
		"source in body":   `{"sessionId":"b4","sourceSessionId":"x"}`,
		"new ID too large": `{"sessionId":"` + strings.Repeat("a", 129) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do(http.MethodPost, "/v1/sessions/src/fork", body)
			if r.status != http.StatusBadRequest {
				t.Errorf("fork with %s = %d %s, want 400", name, r.status, r.body)
			}
		})
	}
	for _, sid := range []string{"b2", "b3", "b4", "b5"} {
		if e.backend.Exists(events.SessionID(sid)) {
			t.Errorf("a refused fork created %s", sid)
		}
	}
}

// GET /v1/directories lists folders of the caller's workspace only:
// never files, never outside the namespace.
func TestDirectories(t *testing.T) {
	e := newEnv(t, withConfig(withTokens))
	proj := e.backend.WorkDir("proj")
	e.backend.WorkDir("proj/sub")
	if err := os.WriteFile(filepath.Join(proj, "notes.txt"), []byte("private contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	home := filepath.Dir(proj) // <root>/default
	type listing struct {
		Path        string `json:"path"`
		Parent      string `json:"parent"`
		Directories []struct {
			Name string `json:"name"`
			Path string `json:"path"`
		} `json:"directories"`
	}
	list := func(query string, token string) (listing, response) {
		t.Helper()
		r := e.send(http.MethodGet, "/v1/directories"+query, "", bearer(token))
		var l listing
		if r.status == http.StatusOK {
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatalf("GET /v1/directories%s: %s: %v", query, r.body, err)
			}
		}
		return l, r
	}
	paths := func(l listing) []string {
		var out []string
		for _, d := range l.Directories {
			out = append(out, d.Path)
		}
		return out
	}

	top, r := list("", userToken)
	if r.status != http.StatusOK || !slices.Equal(paths(top), []string{home}) || top.Path != "" {
		t.Fatalf("GET /v1/directories = %d %s, want the namespace's directory %s", r.status, r.body, home)
	}
	l, r := list("?path="+url.QueryEscape(home), userToken)
	if r.status != http.StatusOK || !slices.Equal(paths(l), []string{proj}) || l.Path != home || l.Parent != "" {
		t.Errorf("GET ?path=%s = %d %s, want proj, no parent", home, r.status, r.body)
	}
	l, r = list("?path="+url.QueryEscape(proj), readToken) // a read may list
	if r.status != http.StatusOK || !slices.Equal(paths(l), []string{filepath.Join(proj, "sub")}) || l.Parent != home {
		t.Errorf("GET ?path=%s = %d %s, want sub, parent %s", proj, r.status, r.body, home)
	}
	if strings.Contains(string(r.body), "notes") || strings.Contains(string(r.body), "private") {
		t.Errorf("the listing tells of a file: %s", r.body)
	}

	// Another namespace sees its own directory, and is refused this one's
	// exactly as a path that is not there.
	other, r := list("", otherToken)
	if r.status != http.StatusOK || len(other.Directories) != 1 || other.Directories[0].Name != string(otherNS) {
		t.Errorf("GET /v1/directories as %s = %d %s, want its own directory", otherNS, r.status, r.body)
	}
	_, theirs := list("?path="+url.QueryEscape(proj), otherToken)
	_, nothing := list("?path="+url.QueryEscape(filepath.Join(filepath.Dir(home), "nothing")), otherToken)
	wantError(t, theirs, http.StatusBadRequest, events.CodeInvalidRequest)
	wantError(t, nothing, http.StatusBadRequest, events.CodeInvalidRequest)
	var e1, e2 apiError
	_ = json.Unmarshal(theirs.body, &e1)
	_ = json.Unmarshal(nothing.body, &e2)
	if strings.Replace(e1.Error.Message, proj, "P", 1) != strings.Replace(e2.Error.Message, filepath.Join(filepath.Dir(home), "nothing"), "P", 1) {
		t.Errorf("refusals differ by what is there: %q and %q", e1.Error.Message, e2.Error.Message)
	}

	for name, query := range map[string]string{
		"the root":       "?path=" + url.QueryEscape(filepath.Dir(home)),
		"outside":        "?path=/etc",
		"relative":       "?path=proj",
		"dot-dot":        "?path=" + url.QueryEscape(proj+"/../../"+string(otherNS)),
		"a file":         "?path=" + url.QueryEscape(filepath.Join(proj, "notes.txt")),
		"twice":          "?path=" + url.QueryEscape(home) + "&path=" + url.QueryEscape(home),
		"unknown":        "?depth=2",
		"NUL":            "?path=" + url.QueryEscape(home+"\x00x"),
		"invalid UTF-8":  "?path=%2F%FF",
		"too long":       "?path=" + url.QueryEscape("/"+strings.Repeat("a", events.MaxDirectoryPathBytes)),
		"empty path":     "?path=",
		"namespace path": "?path=" + url.QueryEscape(filepath.Join(filepath.Dir(home), string(otherNS))),
	} {
		t.Run(name, func(t *testing.T) {
			_, r := list(query, userToken)
			if r.status != http.StatusBadRequest && r.status != http.StatusRequestEntityTooLarge {
				t.Errorf("GET /v1/directories%s = %d %s, want 400", query, r.status, r.body)
			}
		})
	}
}
