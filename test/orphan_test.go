//go:build linux

package test

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// startDevOn starts skein dev on HTTP address httpAddr ("127.0.0.1:0"
// for any port), with the registry file agents, flags, no authentication
// and the sandbox off unless flags say otherwise (so that nothing but
// containment stands between an agent and a port); an error if it ended
// at start.
func startDevOn(t *testing.T, data, agents, httpAddr string, flags ...string) (*devProcess, error) {
	t.Helper()
	return startDev(t, devOptions{data: data, agents: agents, http: httpAddr, natsListen: true,
		flags: append([]string{"--log-level", "warn", "--adapter-runner.sandbox=off"}, flags...)})
}

// The attack: an agent leaves a process behind, in a session of its own
// (setsid), that waits for skein dev's HTTP port and binds it once skein
// dev is gone (killed), to catch the bearer tokens of the next curl and
// skein. The skein dev started next kills every process its runner's
// cgroups hold before it binds its own listeners: it starts on its port,
// and the process is dead.
func TestSecurityOrphanCannotTakeSkeinsPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	exe := skeinBin(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	data := testutil.TempDir(t)
	agents := testAgentRegistry(t, exe, map[string]any{"id": "attacker"})
	dev, err := startDevOn(t, data, agents, addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := pollHTTP(t, http.MethodPut, dev.base+"s1", `{"agent":"attacker"}`); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(data, "workspaces", "default", "s1")
	_, port, _ := net.SplitHostPort(addr)
	thief := `$0 = "thief"; open(P, ">orphan.pid"); print P "$$\n"; close P; ` +
		`until ($s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:` + port + `", Listen => 5, ReuseAddr => 1)) { select(undef, undef, undef, 0.01) } ` +
		`open(B, ">bound"); close B; while ($c = $s->accept) { open(F, ">>stolen"); print F <$c>; close F }`
	postPrompt(t.Context(), dev.base+"s1/prompt", "", `sh setsid perl -MIO::Socket::INET -e '`+thief+`' >/dev/null 2>&1 &`)
	var pid int
	if err := pollFor(t.Context(), "the agent's setsid process", func() bool {
		b, err := os.ReadFile(filepath.Join(ws, "orphan.pid"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if processAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	dev.kill()
	if err := pollFor(t.Context(), "the orphan to bind skein dev's port", func() bool {
		_, err := os.Stat(filepath.Join(ws, "bound"))
		return err == nil
	}); err != nil {
		t.Fatal(err)
	}
	dev, err = startDevOn(t, data, agents, addr)
	if err != nil {
		t.Fatalf("skein dev did not start again on its port: %v", err)
	}
	if processAlive(pid) {
		t.Errorf("the agent's orphan %d still runs after skein dev started again", pid)
	}
	if err := pollHTTP(t, http.MethodGet, strings.TrimSuffix(dev.base, "sessions/")+"agents", ""); err != nil {
		t.Errorf("skein dev's API: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "stolen")); err == nil {
		t.Errorf("the orphan caught a request: %q", b)
	}
}

// An agent that meets its process limit is told by the kernel (fork
// fails), and the session's log says so: an AdapterLimitHit record the
// session service appended, as a reader of the log finds it.
func TestSecurityLimitHitInSessionLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	exe := skeinBin(t)
	data := testutil.TempDir(t)
	agents := testAgentRegistry(t, exe, map[string]any{"id": "flooder", "limits": map[string]any{"pids": 48}})
	dev, err := startDevOn(t, data, agents, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := pollHTTP(t, http.MethodPut, dev.base+"s1", `{"agent":"flooder"}`); err != nil {
		t.Fatal(err)
	}
	postPrompt(t.Context(), dev.base+"s1/prompt", "", `sh i=0; while [ $i -lt 100 ]; do sleep 1000 & i=$((i+1)); done >/dev/null 2>&1`)
	js := dev.js(t)
	var hit *events.AdapterLimitHit
	if err := pollFor(t.Context(), "the limit hit in the session's log", func() bool {
		hit, _ = lastRecord[events.AdapterLimitHit](t.Context(), js, "s1")
		return hit != nil
	}); err != nil {
		t.Fatal(err)
	}
	if hit.Kind != events.LimitPids || hit.Limit != 48 || hit.Count == 0 {
		t.Errorf("limit hit = %+v, want pids, 48, a count", hit)
	}
}

// A process an agent started in a session of its own (setsid) dies with
// its session's adapter: when the session is deleted, and when it is
// unloaded. (A restart of skein dev: TestSecurityOrphanCannotTakeSkeinsPort.)
func TestSecurityOrphanDiesWithItsSession(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	exe := skeinBin(t)
	data := testutil.TempDir(t)
	agents := testAgentRegistry(t, exe, map[string]any{"id": "spawner"})
	// Under the sandbox skein dev gives agents by default: the launcher
	// joins the cgroups.
	dev, err := startDevOn(t, data, agents, "127.0.0.1:0", "--adapter-runner.sandbox=warn")
	if err != nil {
		t.Fatal(err)
	}
	orphans := map[string]int{}
	for _, sid := range []string{"deleted", "unloaded"} {
		if err := pollHTTP(t, http.MethodPut, dev.base+sid, `{"agent":"spawner"}`); err != nil {
			t.Fatal(err)
		}
		postPrompt(t.Context(), dev.base+sid+"/prompt", "", `sh setsid sh -c 'echo $$ > orphan.pid; exec sleep 1000' >/dev/null 2>&1 &`)
		file := filepath.Join(data, "workspaces", "default", sid, "orphan.pid")
		if err := pollFor(t.Context(), "the agent's setsid process", func() bool {
			b, err := os.ReadFile(file)
			orphans[sid], _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && orphans[sid] > 0
		}); err != nil {
			t.Fatal(err)
		}
		pid := orphans[sid]
		t.Cleanup(func() {
			if processAlive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	if err := pollHTTP(t, http.MethodDelete, dev.base+"deleted", ""); err != nil {
		t.Fatal(err)
	}
	if err := pollHTTP(t, http.MethodPost, dev.base+"unloaded/unload", ""); err != nil {
		t.Fatal(err)
	}
	for sid, pid := range orphans {
		if err := pollFor(t.Context(), "the "+sid+" session's orphan to die", func() bool { return !processAlive(pid) }); err != nil {
			t.Errorf("the setsid process %d of the %s session: %v", pid, sid, err)
		}
	}
}

// testAgentRegistry writes a registry file of one agent, entry, run as
// the test agent by the skein binary exe, and returns its path.
func testAgentRegistry(t *testing.T, exe string, entry map[string]any) string {
	t.Helper()
	entry["command"], entry["args"] = exe, []string{testAgentCommand}
	registry, err := json.Marshal(map[string]any{"agents": []map[string]any{entry}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(path, registry, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
