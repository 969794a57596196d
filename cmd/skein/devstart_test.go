package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/testutil"
)

// skein dev started in a project, with its data directory inside it as
// the tour's .skein, and no state directory to keep it in instead (no
// HOME; TestDevKeepsItsDataOutOfTheAgentsReach has one), so that the data
// stays in the project: its effective configuration (--print-config) shows what the runner
// really runs with; its agents may work in the project, and only there;
// a session working in the project itself, which holds the data directory,
// starts with a warning (the sandbox cannot keep the data from it); and
// the demo agent offers a mode and a model.
func TestDevWorksInItsStartDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs skein dev; skipped in -short")
	}
	project, err := filepath.EvalSymlinks(testutil.TempDir(t)) // searchable by the agents' user, under root
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(project, ".skein")
	if err := os.MkdirAll(filepath.Join(project, "src"), 0o700); err != nil {
		t.Fatal(err)
	}
	var printed testutil.Buffer
	if err := runDev(t.Context(), []string{"--data", data, "--print-config"}, func(string) string { return "" }, project, &printed, &printed); err != nil {
		t.Fatalf("skein dev --print-config: %v\n%s", err, printed.String())
	}
	config := printed.String()
	for _, want := range []string{
		"adapter-runner.data-dir=" + filepath.Join(data, "sessions") + "\n",
		"adapter-runner.id=dev\n",
		"adapter-runner.sandbox=warn\n",
		"adapter-runner.workspace-roots=" + filepath.Join(data, "workspaces") + "\n",
		"adapter-runner.workspace-grants=default=" + project + "\n",
	} {
		if !strings.Contains(config, want) {
			t.Errorf("the effective configuration lacks %q:\n%s", want, config)
		}
	}
	url, stdout, stderr, stop := startDevIn(t, project, func(string) string { return "" }, "--data", data)
	t.Cleanup(stop)

	token, err := os.ReadFile(filepath.Join(data, cli.DevTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		status, b := doAs(t, method, url+path, strings.TrimSpace(string(token)), body)
		return status, string(b)
	}

	// In the project: a directory of it, and the project itself.
	if status, body := call(http.MethodPut, "/v1/sessions/in-src", `{"agent":"demo","cwd":"`+filepath.Join(project, "src")+`"}`); status != http.StatusOK {
		t.Fatalf("open in %s/src = %d %s, want 200", project, status, body)
	}
	if strings.Contains(stderr.String(), "exposes Skein's own data") {
		t.Errorf("a session beside the data directory was warned about:\n%s", stderr)
	}
	if status, body := call(http.MethodPut, "/v1/sessions/in-project", `{"agent":"demo","cwd":"`+project+`"}`); status != http.StatusOK {
		t.Fatalf("open in %s = %d %s, want 200", project, status, body)
	}
	if !strings.Contains(stderr.String(), "exposes Skein's own data") || !strings.Contains(stderr.String(), "session_id=in-project") {
		t.Errorf("no warning for the session whose cwd holds the data directory:\n%s", stderr)
	}
	if !strings.Contains(stdout.String(), "Note: the data directory "+data+" lies in "+project) {
		t.Errorf("the welcome does not say the data directory lies in the workspace:\n%s", stdout)
	}
	if os.Geteuid() == 0 && !strings.Contains(stdout.String(), "Note: skein dev runs as root.") {
		t.Errorf("skein dev runs as root, and its welcome does not say so:\n%s", stdout)
	}
	// Outside the project: refused, as before.
	if status, body := call(http.MethodPut, "/v1/sessions/outside", `{"agent":"demo","cwd":"`+t.TempDir()+`"}`); status != http.StatusBadRequest || !strings.Contains(body, "invalid_request") {
		t.Errorf("open outside the project = %d %s, want 400 invalid_request", status, body)
	}

	// The demo agent's options, for skein config.
	status, body := call(http.MethodGet, "/v1/sessions/in-src/config", "")
	var cfg struct {
		Options []struct {
			ID string `json:"id"`
		} `json:"options"`
	}
	if status != http.StatusOK || json.Unmarshal([]byte(body), &cfg) != nil {
		t.Fatalf("GET config = %d %s", status, body)
	}
	var ids []string
	for _, o := range cfg.Options {
		ids = append(ids, o.ID)
	}
	if strings.Join(ids, ",") != "mode,model" {
		t.Errorf("the demo agent's config options are %v, want mode and model", ids)
	}
	// Its commands, for skein commands: served by the history service,
	// which its NATS user must let answer them. (The list arrives with
	// the agent's first update after the open: wait for it.)
	var commands string
	if err := pollFor(t.Context(), "the demo agent's commands", func() bool {
		status, commands = call(http.MethodGet, "/v1/sessions/in-src/commands", "")
		return status != http.StatusOK || strings.Contains(commands, `"name"`)
	}); err != nil || status != http.StatusOK {
		t.Errorf("GET commands = %d %s, %v; want the demo agent's commands", status, commands, err)
	}
	// An answer to an input request is the session service's, which its
	// NATS user must let answer it: one that names no request is not
	// pending, not unavailable.
	if status, body := call(http.MethodPost, "/v1/sessions/in-src/inputs/nothing", `{"action":"cancel"}`); status != http.StatusOK || !strings.Contains(body, "not_pending") {
		t.Errorf("answer to no input request = %d %s, want 200 not_pending", status, body)
	}
}

// skein dev keeps a data directory it makes inside its start directory
// out of the agents' reach: the directory is made under the user's state
// directory, and the path given (the tour's .skein) is a symlink to it.
// An agent working in the project itself then cannot read the dev token
// (with which it could answer its own permission requests) through the
// symlink, while the CLI's path to it works; a restart finds the same
// data.
func TestDevKeepsItsDataOutOfTheAgentsReach(t *testing.T) {
	if testing.Short() {
		t.Skip("runs skein dev; skipped in -short")
	}
	project, err := filepath.EvalSymlinks(testutil.TempDir(t)) // searchable by the agents' user, under root
	if err != nil {
		t.Fatal(err)
	}
	state := testutil.TempDir(t)
	getenv := func(k string) string {
		if k == "XDG_STATE_HOME" {
			return state
		}
		return ""
	}
	// Readable by others, as a project's files are: under root the agent
	// runs as another user, and Skein leaves the project's files as they are.
	if err := os.WriteFile(filepath.Join(project, "README.md"), []byte("the project's own"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(project, ".skein")
	url, stdout, stderr, stop := startDevIn(t, project, getenv, "--data", ".skein")
	kept, err := os.Readlink(data)
	if err != nil || !strings.HasPrefix(kept, filepath.Join(state, "skein", "dev")+string(filepath.Separator)) {
		t.Fatalf("%s links to %q (%v), want a directory under %s", data, kept, err, filepath.Join(state, "skein", "dev"))
	}
	if strings.Contains(stdout.String(), "Note: the data directory") || !strings.Contains(stdout.String(), "kept in "+kept) {
		t.Errorf("the welcome does not say where the data is kept, or warns of it:\n%s", stdout)
	}
	token, err := os.ReadFile(filepath.Join(data, cli.DevTokenFile)) // as the CLI reads it
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		status, b := doAs(t, method, url+path, strings.TrimSpace(string(token)), body)
		return status, string(b)
	}
	if status, body := call(http.MethodPut, "/v1/sessions/in-project", `{"agent":"demo","cwd":"`+project+`"}`); status != http.StatusOK {
		t.Fatalf("open in %s = %d %s, want 200", project, status, body)
	}
	prompt := func(text string) string {
		t.Helper()
		status, body := call(http.MethodPost, "/v1/sessions/in-project/prompt", `{"content":[{"type":"text","text":"`+text+`"}]}`)
		if status != http.StatusOK {
			t.Fatalf("prompt %q = %d %s", text, status, body)
		}
		return body
	}
	if got := prompt("read " + filepath.Join(project, "README.md")); !strings.Contains(got, "ok the project's own") {
		t.Errorf("the agent reads its project's file: %s", got)
	}
	if strings.Contains(stderr.String(), "adapters are confined with Landlock") {
		for _, f := range []string{filepath.Join(data, cli.DevTokenFile), filepath.Join(kept, cli.DevTokenFile)} {
			if got := prompt("read " + f); !strings.Contains(got, "permission denied") || strings.Contains(got, strings.TrimSpace(string(token))) {
				t.Errorf("the agent's read of %s: %s, want permission denied", f, got)
			}
		}
	} else {
		t.Logf("this kernel has no Landlock: the agent's reads are not checked")
	}
	if strings.Contains(stderr.String(), "exposes Skein's own data") {
		t.Errorf("a session in the project was warned about, though the data is kept elsewhere:\n%s", stderr)
	}
	stop()

	// Started again: the same data, through the same link.
	_, _, _, stop = startDevIn(t, project, getenv, "--data", ".skein")
	defer stop()
	if again, err := os.Readlink(data); err != nil || again != kept {
		t.Errorf("after a restart %s links to %q (%v), want %q", data, again, err, kept)
	}
	if again, err := os.ReadFile(filepath.Join(data, cli.DevTokenFile)); err != nil || string(again) != string(token) {
		t.Errorf("after a restart the token is %q (%v), want the same", again, err)
	}
}

// startDevIn runs skein dev started in project, with getenv as its
// environment, args and a free HTTP port, until stop; it returns once the
// welcome names the gateway's URL.
func startDevIn(t *testing.T, project string, getenv func(string) string, args ...string) (url string, stdout, stderr *testutil.Buffer, stop func()) {
	t.Helper()
	testutil.SearchableAbove(project) // and so the test's other temporary directories: for the agents' user, under root
	ctx, cancel := context.WithCancel(t.Context())
	stdout, stderr = &testutil.Buffer{}, &testutil.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- runDev(ctx, append(args, "--http", "127.0.0.1:0"), getenv, project, stdout, stderr)
	}()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("skein dev: %v\n%s", err, stderr)
		}
	})
	if err := pollFor(t.Context(), "skein dev's welcome", func() bool {
		url = welcomeURL(stdout.String(), "HTTP")
		return url != ""
	}); err != nil {
		stop()
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	return url, stdout, stderr, stop
}
