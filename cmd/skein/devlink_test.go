package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cwd written through the .skein link that skein dev makes in its start
// directory, <project>/.skein/workspaces/<namespace>/x, is the namespace's
// own directory under the workspace root, and is accepted as the README
// promises, for a namespace with no grant (not only default, granted the
// project): at open, by the session service, and at launch, by the
// runner; /v1/directories lists through it. The same link into another
// namespace's directory is refused.
func TestSecurityDevCwdThroughTheDataLink(t *testing.T) {
	if testing.Short() {
		t.Skip("runs skein dev; skipped in -short")
	}
	project, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_STATE_HOME" {
			return state
		}
		return ""
	}
	const token = "alice-token-for-the-link-test"
	sum := sha256.Sum256([]byte(token))
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`[{"sha256":"`+hex.EncodeToString(sum[:])+`","principal":"alice","namespaces":["team-a"],"role":"user"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, _, stop := startDevIn(t, project, getenv, "--data", ".skein", "--gateway.tokens-file", tokens)
	defer stop()
	call := func(method, path, body string) (int, string) {
		t.Helper()
		status, b := doAs(t, method, base+path, token, body)
		return status, string(b)
	}
	link := filepath.Join(project, ".skein", "workspaces")
	mine, theirs := filepath.Join(link, "team-a", "x"), filepath.Join(link, "team-b", "y")
	if status, body := call(http.MethodPut, "/v1/sessions/through-link", `{"agent":"demo","cwd":"`+mine+`"}`); status != http.StatusOK {
		t.Fatalf("open with cwd %s = %d %s, want 200", mine, status, body)
	}
	if status, body := call(http.MethodPost, "/v1/sessions/through-link/prompt", `{"content":[{"type":"text","text":"hello"}]}`); status != http.StatusOK {
		t.Errorf("prompt in %s = %d %s, want 200 (the runner launched the agent there)", mine, status, body)
	}
	if fi, err := os.Stat(mine); err != nil || !fi.IsDir() {
		t.Errorf("the cwd through the link was not made: %v", err)
	}
	if status, body := call(http.MethodGet, "/v1/directories?path="+url.QueryEscape(filepath.Dir(mine)), ""); status != http.StatusOK || !strings.Contains(body, `"x"`) {
		t.Errorf("directories of %s = %d %s, want x listed", filepath.Dir(mine), status, body)
	}
	if status, body := call(http.MethodPut, "/v1/sessions/into-b", `{"agent":"demo","cwd":"`+theirs+`"}`); status != http.StatusBadRequest || !strings.Contains(body, "not in the workspace") {
		t.Errorf("open with cwd %s = %d %s, want 400 not in the workspace", theirs, status, body)
	}
}
