package test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"skein.dev/internal/natstest"
)

// Over HTTP, with the services wired as skein runs them: a cwd outside the
// caller's namespace's directory of the workspace roots (the root itself,
// another namespace's) is 400 invalid_request at open, and a session
// opened without one works in <data-dir>/workspaces/<namespace>/<session
// ID>.
func TestWorkspaceRootsOverHTTP(t *testing.T) {
	dataDir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := startStack(t, natstest.Run(t), dataDir)
	outside := t.TempDir()
	for name, body := range map[string]string{
		"cwd outside":   `{"agent":"test","cwd":` + quoteJSON(outside) + `}`,
		"cwd with ..":   `{"agent":"test","cwd":` + quoteJSON(dataDir+"/workspaces/../workspaces") + `}`,
		"cwd the root":  `{"agent":"test","cwd":` + quoteJSON(dataDir+"/workspaces") + `}`,
		"cwd of team-b": `{"agent":"test","cwd":` + quoteJSON(dataDir+"/workspaces/team-b/x") + `}`,
		"dirs outside":  `{"agent":"test","additionalDirectories":[` + quoteJSON(outside) + `]}`,
		"env refused":   `{"agent":"test","env":{"ANY":"x"}}`,
	} {
		status, resp := do(t, http.MethodPut, st.url+"/v1/sessions/refused", body)
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(resp, &e)
		if status != http.StatusBadRequest || e.Error.Code != "invalid_request" {
			t.Errorf("%s: PUT = %d %s, want 400 invalid_request", name, status, resp)
		}
	}
	if status, _ := do(t, http.MethodGet, st.url+"/v1/sessions/refused", ""); status != http.StatusNotFound {
		t.Errorf("GET a session whose opens were refused = %d, want 404", status)
	}

	if status, resp := do(t, http.MethodPut, st.url+"/v1/sessions/w1", `{"agent":"test"}`); status != http.StatusOK {
		t.Fatalf("PUT without cwd = %d %s", status, resp)
	}
	want := filepath.Join(dataDir, "workspaces", "default", "w1")
	status, resp := do(t, http.MethodGet, st.url+"/v1/sessions/w1", "")
	var info struct {
		Cwd string `json:"cwd"`
	}
	if status != http.StatusOK || json.Unmarshal(resp, &info) != nil || info.Cwd != want {
		t.Errorf("GET = %d %s, want cwd %s", status, resp, want)
	}
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
		t.Errorf("default cwd %s: %v", want, err)
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
