//go:build linux

package test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// orphanDev is `skein dev` run as a process of the test binary.
type orphanDev struct {
	cmd    *exec.Cmd
	base   string // http://…/v1/sessions/
	exited chan struct{}
}

// kill kills skein dev with SIGKILL: nothing is cleaned up.
func (d *orphanDev) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// startDevOn starts `skein dev` as a process on HTTP address httpAddr,
// with flags,
// the sandbox off (so that nothing but containment stands between an
// agent and a port), and returns it once it printed its welcome, or the
// output it ended with. Its output goes to a file, which a process it
// left behind may hold open without keeping the test waiting.
func startDevOn(t *testing.T, exe, data, agents, httpAddr string, flags ...string) (*orphanDev, error) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "dev-out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(exe, "dev", "--data", data, "--http", httpAddr, "--nats-listen", "127.0.0.1:0", "--agents", agents,
		"--log-level", "warn", "--gateway.insecure-no-auth", "--adapter-runner.sandbox=off")
	cmd.Args = append(cmd.Args, flags...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &orphanDev{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		// Stopped, not killed: a killed skein dev leaves its adapters'
		// cgroups, and what they hold, to the next one on its data
		// directory, which a test's never has.
		_ = cmd.Process.Signal(os.Interrupt)
		<-d.exited
	})
	output := func() string {
		b, _ := os.ReadFile(out.Name())
		return string(b)
	}
	for {
		if u := welcomeURL(output(), "HTTP"); u != "" {
			d.base = u + "/v1/sessions/"
			return d, nil
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("skein dev on %s ended at start: %s", httpAddr, output())
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
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
	dev, err := startDevOn(t, exe, data, agents, addr)
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
	dev, err = startDevOn(t, exe, data, agents, addr)
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
	dev, err := startDevOn(t, exe, data, agents, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := pollHTTP(t, http.MethodPut, dev.base+"s1", `{"agent":"flooder"}`); err != nil {
		t.Fatal(err)
	}
	postPrompt(t.Context(), dev.base+"s1/prompt", "", `sh i=0; while [ $i -lt 100 ]; do sleep 1000 & i=$((i+1)); done >/dev/null 2>&1`)
	js := (&devProcess{natsURL: devUserURL(t, data, devAdminUser)}).js(t)
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
	dev, err := startDevOn(t, exe, data, agents, "127.0.0.1:0", "--adapter-runner.sandbox=warn")
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
// the test agent by this test binary exe, and returns its path.
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
