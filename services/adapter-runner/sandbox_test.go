//go:build linux

package adapterrunner_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// requireLandlock skips a test of the sandbox on a kernel that has no
// Landlock (or one older than abi), where there is nothing to test.
func requireLandlock(t *testing.T, abi int) {
	t.Helper()
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < abi {
		t.Skipf("this kernel has Landlock ABI %d (%v); the sandbox test needs %d", v, err, abi)
	}
}

// probe runs script (testagent's read, write and dial commands) as one
// turn of session sid, and returns what each command reported, by its
// "<command> <target>" prefix.
func (h *harness) probe(t *testing.T, sid, turnID string, script ...string) map[string]string {
	t.Helper()
	h.prompt(t, sid, "p-"+sid, turnID, strings.Join(script, "\n"))
	res, before := until[*events.AdapterPromptResult](t, h)
	if res.StopReason != "end_turn" {
		t.Fatalf("probe turn = %+v, want end_turn", res)
	}
	out := map[string]string{}
	for _, text := range updateTexts(before) {
		k, v, ok := strings.Cut(text, ": ")
		if !ok {
			t.Fatalf("probe reply %q is no probe's", text)
		}
		out[k] = v
	}
	if len(out) != len(script) {
		t.Fatalf("probe replies = %q, want one per command of %q", out, script)
	}
	return out
}

// writeFile writes a file of the test's own, readable by everyone (0644),
// as a test run as root could read anything whatever its mode.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// An agent confined by the sandbox cannot read another session's
// workspace or HOME, another namespace's workspace, the runner's data
// directory (where a dev stack keeps its NATS store), a file outside every
// allowed path (an /etc/shadow stand-in the test user can read), or the
// runner's environment; nor write outside its own directories. Inside its
// cwd, an additional directory, its TMPDIR and its HOME it reads and
// writes.
func TestSecurityAgentIsConfinedToItsSession(t *testing.T) {
	requireLandlock(t, 1)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	victim, err := h.createWith(t, "victim", events.AcpCreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(h.dataDir, "workspaces")
	victimFile := filepath.Join(ws, "default", "victim", "notes.md")
	victimHome := filepath.Join(h.dataDir, "default", "victim", "home", ".claude.json")
	otherNS := filepath.Join(ws, "team-b", "s9", "notes.md")
	store := filepath.Join(h.dataDir, "nats", "jetstream", "ACP_LOG", "msgs", "1.blk")
	shadow := filepath.Join(t.TempDir(), "shadow")
	for _, f := range []string{victimFile, victimHome, otherNS, store, shadow} {
		writeFile(t, f, "secret")
	}
	extra := filepath.Join(ws, "default", "shared")
	mkdirs(t, extra)
	giveToAdapters(t, extra) // a user's own directory, which Skein does not chown
	if _, err := h.createWith(t, "attacker", events.AcpCreateSessionRequest{AdditionalDirectories: []string{extra}}); err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(ws, "default", "attacker")
	tmp := filepath.Join(h.dataDir, "default", "attacker", "tmp")
	home := filepath.Join(h.dataDir, "default", "attacker", "home")
	planted := []string{
		filepath.Join(ws, "default", "victim", "AGENTS.md"),
		filepath.Join(h.dataDir, "planted"),
		filepath.Join(t.TempDir(), "planted"),
	}
	denied := []string{
		"read " + victimFile, "read " + victimHome, "read " + otherNS, "read " + store, "read " + shadow,
		fmt.Sprintf("read /proc/%d/environ", os.Getpid()), // the runner's: this test's process
		fmt.Sprintf("read /proc/%d/environ", *victim.Pid), // another session's adapter
		"write " + planted[0], "write " + planted[1], "write " + planted[2],
	}
	if _, err := os.ReadFile("/etc/shadow"); err == nil { // the test runs as root
		denied = append(denied, "read /etc/shadow")
	}
	allowed := []string{
		"write " + filepath.Join(cwd, "a.txt"), "read " + filepath.Join(cwd, "a.txt"), "write b.txt", "read b.txt",
		"write " + filepath.Join(extra, "c.txt"), "read " + filepath.Join(extra, "c.txt"),
		"write " + filepath.Join(tmp, "d.txt"), "read " + filepath.Join(tmp, "d.txt"),
		"write " + filepath.Join(home, "e.txt"), "read " + filepath.Join(home, "e.txt"),
		"read /etc/passwd", "read /proc/self/status",
	}
	var script []string
	for _, c := range append(append([]string{}, denied...), allowed...) {
		if strings.HasPrefix(c, "write ") {
			c += " written"
		}
		script = append(script, c)
	}
	got := h.probe(t, "attacker", "t1", script...)
	for _, c := range denied {
		if r := got[c]; !strings.HasPrefix(r, "error ") || !strings.Contains(r, "permission denied") {
			t.Errorf("%s = %q, want permission denied", c, r)
		}
	}
	for _, c := range allowed {
		if r := got[c]; !strings.HasPrefix(r, "ok") {
			t.Errorf("%s = %q, want ok", c, r)
		} else if strings.HasPrefix(c, "read "+h.dataDir) && r != "ok written" {
			t.Errorf("%s = %q, want what the agent wrote", c, r)
		}
	}
	for _, p := range planted {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the agent wrote %s", p)
		}
	}
}

// An agent whose registry entry denies it the network cannot open a TCP
// connection; the same agent with the default can.
func TestSecurityAgentWithoutNetwork(t *testing.T) {
	requireLandlock(t, 4)
	ln := acceptAndClose(t)
	no := false
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire},
		adapterrunner.Agent{ID: "offline", Command: testAgent, Sandbox: adapterrunner.AgentSandbox{Network: &no}},
		adapterrunner.Agent{ID: "online", Command: testAgent})
	dial := "dial " + ln.Addr().String()
	for _, tc := range []struct {
		agent string
		want  string
	}{{"offline", "permission denied"}, {"online", "ok"}} {
		if _, err := h.createWith(t, tc.agent, events.AcpCreateSessionRequest{AgentType: tc.agent}); err != nil {
			t.Fatal(err)
		}
		if got := h.probe(t, tc.agent, "t1", dial)[dial]; !strings.Contains(got, tc.want) {
			t.Errorf("%s: %s = %q, want %q", tc.agent, dial, got, tc.want)
		}
	}
}

// What a registry entry grants beyond the default, it grants: a read path
// is readable, a write path is created and writable, and what neither
// names stays denied.
func TestSecurityAgentSandboxPaths(t *testing.T) {
	requireLandlock(t, 1)
	config := filepath.Join(t.TempDir(), "agent-config")
	writeFile(t, filepath.Join(config, "settings.json"), "settings")
	state := filepath.Join(t.TempDir(), "agent-state")
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire},
		adapterrunner.Agent{ID: "test", Command: testAgent, Sandbox: adapterrunner.AgentSandbox{Read: []string{config}, Write: []string{state}}})
	if _, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	read, write, planted := "read "+filepath.Join(config, "settings.json"), "write "+filepath.Join(state, "x"), "write "+filepath.Join(config, "planted")
	got := h.probe(t, "s1", "t1", read, write+" x", planted+" x")
	if got[read] != "ok settings" || got[write] != "ok" || !strings.Contains(got[planted], "permission denied") {
		t.Errorf("probes = %q, want the read path readable only, the write path writable", got)
	}
}

// An agent's executable may lie in a directory that holds much else: a
// binary in /tmp or in a home directory, beside the runner's data. The
// sandbox grants the executable, not its directory: under skein dev with
// the skein binary in /tmp, the demo agent once read every session's
// workspace and the dev token through the grant of /tmp.
func TestSecurityAgentExecutableDirIsNotGranted(t *testing.T) {
	requireLandlock(t, 1)
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent")
	b, err := os.ReadFile(testAgent)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(dir, "dev-token")
	below := filepath.Join(dir, "data", "workspaces", "team-b", "s9", "notes.md")
	writeFile(t, beside, "secret")
	writeFile(t, below, "secret")
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire}, adapterrunner.Agent{ID: "test", Command: bin})
	if _, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	got := h.probe(t, "s1", "t1", "read "+beside, "read "+below, "read "+bin)
	for _, c := range []string{"read " + beside, "read " + below} {
		if !strings.Contains(got[c], "permission denied") {
			t.Errorf("%s = %q, want permission denied", c, got[c])
		}
	}
	if !strings.HasPrefix(got["read "+bin], "ok") {
		t.Errorf("the agent cannot read its own executable: %q", got["read "+bin])
	}
}

// acceptAndClose listens on a loopback port and closes every connection
// it accepts: a peer an agent's connect reaches, until the test ends.
func acceptAndClose(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln
}
