package adapterrunner_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// createWith sends a create request for sid and returns the runner's answer.
func (h *harness) createWith(t *testing.T, sid string, req events.AcpCreateSessionRequest) (*events.AcpSessionCreatedResponse, error) {
	t.Helper()
	if req.AgentType == "" {
		req.AgentType = "test"
	}
	req.ProtocolVersion, req.McpServers = 1, events.JSON("[]")
	return rpc.Call[events.AcpSessionCreatedResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate), &req, header(sid, "p-"+sid))
}

// mkdirs makes each directory, parents included.
func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// The runner launches an adapter only in a directory under its workspace
// roots, symlinks resolved at launch: whatever the session service let
// through (a session opened before the roots changed, a directory swapped
// for a symlink since) is refused invalid_request, and no adapter starts.
func TestLaunchIsConfinedToTheWorkspaceRoots(t *testing.T) {
	h := start(t)
	// The default root's directory of namespace default, which the
	// harness's requests are of.
	root := filepath.Join(h.dataDir, "workspaces", "default")
	out := t.TempDir()
	mkdirs(t, filepath.Join(root, "proj"), filepath.Join(root, "real", "sub"), filepath.Join(out, "sub"))
	if err := os.Symlink(out, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	sid := func(name string) string {
		return "s-" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' {
				return r
			}
			return '-'
		}, name)
	}
	for name, req := range map[string]events.AcpCreateSessionRequest{
		"cwd with ..":                  {Cwd: root + "/proj/../proj"},
		"cwd outside":                  {Cwd: out},
		"cwd a symlink to outside":     {Cwd: root + "/escape"},
		"cwd below a symlinked parent": {Cwd: root + "/escape/sub"},
		"additional directory outside": {Cwd: root + "/proj", AdditionalDirectories: []string{root + "/real", out}},
	} {
		if _, err := h.createWith(t, sid(name), req); events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("%s: create = %v, want %s", name, err, events.CodeInvalidRequest)
		}
	}
	if load := h.runner.Info().Load; load != 0 {
		t.Errorf("after refused creates the runner hosts %d adapters, want 0", load)
	}

	// A directory that passed at open and is a symlink to outside by
	// launch: the runner checks the path resolved now.
	if _, err := h.createWith(t, "swapped", events.AcpCreateSessionRequest{Cwd: root + "/real/sub"}); err != nil {
		t.Fatalf("create in a confined directory: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(root, "real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out, filepath.Join(root, "real")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.createWith(t, "swapped-2", events.AcpCreateSessionRequest{Cwd: root + "/real/sub"}); events.AsError(err).Code != events.CodeInvalidRequest {
		t.Errorf("create in a directory since swapped for a symlink to outside = %v, want %s", err, events.CodeInvalidRequest)
	}
}

// A session without a cwd works in <root>/<namespace>/<session ID>,
// created at launch.
func TestDefaultCwdIsCreatedUnderTheRoot(t *testing.T) {
	h := start(t)
	if _, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	want := filepath.Join(h.dataDir, "workspaces", "default", "s1")
	fi, err := os.Stat(want)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("default cwd %s: %v, %v; want a directory, mode 0700", want, fi, err)
	}
	if runtime.GOOS == "linux" {
		created, err := h.createWith(t, "s2", events.AcpCreateSessionRequest{})
		if err != nil || created.Pid == nil {
			t.Fatalf("create = %+v, %v; want one with the adapter's pid", created, err)
		}
		want := filepath.Join(h.dataDir, "workspaces", "default", "s2")
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", *created.Pid)); err != nil || got != want {
			t.Errorf("adapter's cwd = %q, %v; want %q", got, err, want)
		}
	}
}

// A session sets only the environment variables its agent's allowEnv
// names, and their values are never logged: they may be secrets.
func TestSessionEnvIsAllowedByTheRegistry(t *testing.T) {
	script := fmt.Sprintf(`echo "allowed=$ALLOWED_TOKEN" >&2; exec %q`, testAgent)
	h := start(t, adapterrunner.Agent{ID: "sh", Command: "/bin/sh", Args: []string{"-c", script}, AllowEnv: []string{"ALLOWED_*"}},
		adapterrunner.Agent{ID: "test", Command: testAgent})
	const secret, refusedSecret = "s3cr3t-value-9f2c", "r3fused-value-41aa"
	for _, tc := range []struct{ agent, name string }{{"sh", "OTHER"}, {"sh", "PATH"}, {"test", "ALLOWED_TOKEN"}} {
		_, err := h.createWith(t, "refused-"+tc.agent, events.AcpCreateSessionRequest{AgentType: tc.agent, Env: map[string]string{tc.name: refusedSecret}})
		if events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("agent %s, env %s: create = %v, want %s", tc.agent, tc.name, err, events.CodeInvalidRequest)
		} else if strings.Contains(err.Error(), refusedSecret) {
			t.Errorf("the refusal %q holds the value", err)
		}
	}
	if _, err := h.createWith(t, "ok", events.AcpCreateSessionRequest{AgentType: "sh", Env: map[string]string{"ALLOWED_TOKEN": secret}}); err != nil {
		t.Fatalf("create with an allowed variable: %v", err)
	}
	stderr, _ := until[*events.AcpAgentStderrEvent](t, h)
	if !strings.Contains(string(stderr.Chunk), "allowed="+secret) {
		t.Errorf("adapter stderr = %q, want the allowed variable set", stderr.Chunk)
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "refused-sh") && !strings.Contains(logs, "adapter start failed") {
		t.Fatalf("the runner's log shows no refused start; is it captured?\n%s", logs)
	}
	for _, v := range []string{secret, refusedSecret} {
		if strings.Contains(logs, v) {
			t.Errorf("the runner logged an env value %q:\n%s", v, logs)
		}
	}
}

// An operator's grant lets a namespace work under a directory, root
// included; it widens that namespace only.
func TestLaunchGrants(t *testing.T) {
	base := t.TempDir()
	root, shared := filepath.Join(base, "root"), filepath.Join(base, "shared")
	mkdirs(t, filepath.Join(root, "team-b", "x"), shared)
	h := startWith(t, adapterrunner.Config{WorkspaceRoots: workspace.Roots{root},
		WorkspaceGrants: workspace.Grants{"ops": {root}, "team-a": {shared}}})
	for _, tc := range []struct {
		ns  events.Namespace
		cwd string
		ok  bool
	}{
		{"ops", root, true},
		{"ops", root + "/team-b/x", true},
		{"team-a", shared + "/work", true},
		{"team-a", root + "/team-b/x", false},
		{"team-b", shared, false},
		{"ops", shared, false},
	} {
		_, err := h.createAs(t, tc.ns, string(tc.ns)+"-"+strings.ReplaceAll(filepath.Base(tc.cwd), ".", ""), events.AcpCreateSessionRequest{Cwd: tc.cwd})
		if ok := err == nil; ok != tc.ok {
			t.Errorf("namespace %s, cwd %s: create = %v, want accepted %v", tc.ns, tc.cwd, err, tc.ok)
		} else if !ok && events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("namespace %s, cwd %s: create = %v, want %s", tc.ns, tc.cwd, err, events.CodeInvalidRequest)
		}
	}
}
