//go:build linux

package adapterrunner_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// nodeAgent copies testdata/nodeagent/agent.mjs to path, readable by
// everyone, and returns the node that runs it; the test is skipped where
// there is no node.
func nodeAgent(t *testing.T, path string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node on PATH (%v): the test runs a node agent", err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "nodeagent", "agent.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b))
	return node
}

// nodeDir is a directory of the test's that the adapters' user can
// search, outside every path the sandbox grants by default.
func nodeDir(t *testing.T) string {
	t.Helper()
	dir := testutil.TempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A registry entry {"command":"node","args":["/…/agent.mjs"]}, the way
// ACP guides run an agent, starts under the sandbox and answers a prompt:
// the script its args name is granted, and so is its package (the nearest
// directory with a package.json), where its own files lie. What lies
// beside the package, or beside a script in no package, stays denied, and
// so does a file a session's own args name.
func TestSecurityNodeScriptAgentStarts(t *testing.T) {
	requireLandlock(t, 1)
	dir := nodeDir(t)
	pkgScript := filepath.Join(dir, "agents", "pkg", "agent.mjs")
	node := nodeAgent(t, pkgScript)
	writeFile(t, filepath.Join(dir, "agents", "pkg", "package.json"), `{"name":"pkg","type":"module"}`)
	inPackage := filepath.Join(dir, "agents", "pkg", "lib", "prompt.txt")
	writeFile(t, inPackage, "in package")
	besidePackage := filepath.Join(dir, "agents", "secret.txt")
	writeFile(t, besidePackage, "secret")
	looseScript := filepath.Join(dir, "loose", "agent.mjs")
	nodeAgent(t, looseScript)
	besideScript := filepath.Join(dir, "loose", "secret.txt")
	writeFile(t, besideScript, "secret")
	sessionArg := filepath.Join(dir, "session-arg.txt")
	writeFile(t, sessionArg, "secret")

	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire},
		adapterrunner.Agent{ID: "pkg", Command: node, Args: []string{pkgScript}},
		adapterrunner.Agent{ID: "loose", Command: node, Args: []string{looseScript}})
	for _, tc := range []struct {
		agent           string
		allowed, denied []string
	}{
		{"pkg", []string{inPackage, pkgScript}, []string{besidePackage, sessionArg}},
		{"loose", []string{looseScript}, []string{besideScript, sessionArg}},
	} {
		if _, err := h.createWith(t, tc.agent, events.AcpCreateSessionRequest{AgentType: tc.agent, Args: []string{sessionArg}}); err != nil {
			t.Fatalf("%s: %v", tc.agent, err)
		}
		var script []string
		for _, p := range append(append([]string{}, tc.allowed...), tc.denied...) {
			script = append(script, "read "+p)
		}
		got := h.probe(t, tc.agent, "t1", script...)
		for _, p := range tc.allowed {
			if r := got["read "+p]; !strings.HasPrefix(r, "ok") {
				t.Errorf("%s: read %s = %q, want ok", tc.agent, p, r)
			}
		}
		for _, p := range tc.denied {
			if r := got["read "+p]; r != "error EACCES" {
				t.Errorf("%s: read %s = %q, want error EACCES", tc.agent, p, r)
			}
		}
	}
}

// An adapter that dies at start on a file the sandbox denies it is
// reported with what to do: the error names the sandbox, the path and the
// registry's sandbox.read, not only node's bare EACCES.
func TestSecurityDeniedReadAtStartNamesSandboxRead(t *testing.T) {
	requireLandlock(t, 1)
	dir := nodeDir(t)
	script := filepath.Join(dir, "agent", "agent.mjs")
	node := nodeAgent(t, script)
	config := filepath.Join(dir, "agent-config", "settings.json")
	writeFile(t, config, "{}")
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire},
		adapterrunner.Agent{ID: "test", Command: node, Args: []string{script}, Env: map[string]string{"READ_AT_START": config}})
	_, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{})
	if err == nil {
		t.Fatal("the agent started, reading a file the sandbox denies it")
	}
	for _, want := range []string{"sandbox", config, "sandbox.read"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start error = %q, want it to name %q", err, want)
		}
	}
}

// Under a runner started as root, adapters run as another user: a script
// the registry entry's args name that this user may not read refuses the
// start, saying so, rather than node's bare EACCES.
func TestSecurityNodeScriptUnreadableToAdaptersUser(t *testing.T) {
	requireLandlock(t, 1)
	if os.Geteuid() != 0 {
		t.Skip("the adapters' user is a root runner's")
	}
	dir := nodeDir(t)
	script := filepath.Join(dir, "agent", "agent.mjs")
	node := nodeAgent(t, script)
	if err := os.Chmod(script, 0o600); err != nil {
		t.Fatal(err)
	}
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire},
		adapterrunner.Agent{ID: "test", Command: node, Args: []string{script}})
	_, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{})
	if err == nil {
		t.Fatal("the agent started, from a script its user may not read")
	}
	for _, want := range []string{"cannot read " + script, "adapter-runner.adapter-uid", "mode 0600"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start error = %q, want it to name %q", err, want)
		}
	}
}
