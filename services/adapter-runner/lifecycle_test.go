package adapterrunner_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// waitFor bounds every wait for a process to start or end, or for its
// records to be stored. It is a failure bound, never the expected
// duration: the suite's one bound, wide enough for a loaded machine.
const waitFor = testutil.PollTimeout

// proc names a process by its number and start time, so that a number used
// again by another process is not taken for it.
type proc struct {
	pid   int
	start string
}

// stat returns the state and start time (fields 3 and 22) of process pid.
func stat(pid int) (state, start string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		return "", "", fmt.Errorf("stat of %d: %q", pid, b)
	}
	return f[0], f[19], nil
}

func procOf(t testing.TB, pid int) proc {
	t.Helper()
	_, start, err := stat(pid)
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	return proc{pid, start}
}

// alive reports whether p runs; a zombie is dead.
func (p proc) alive() bool {
	state, start, err := stat(p.pid)
	return err == nil && start == p.start && state != "Z"
}

// waitGone waits until p has died.
func waitGone(t testing.TB, what string, p proc) {
	t.Helper()
	testutil.Eventually(t, what+" to die", func() bool { return !p.alive() })
}

// parentScript is an adapter that starts a child in its process group
// (a tool, say), writes the child's PID to $HOME/child.pid, and then
// becomes the test agent with the arguments after it.
const parentScript = `sleep 1000 </dev/null & echo $! > "$HOME/child.pid"; exec "$@"`

func parent(id string, args ...string) adapterrunner.Agent {
	return adapterrunner.Agent{ID: id, Command: "/bin/sh", Args: append([]string{"-c", parentScript, "sh", testAgent}, args...)}
}

// child returns the child a parent adapter of session sid started.
func child(t testing.TB, dataDir, sid string) proc {
	t.Helper()
	file := filepath.Join(dataDir, "default", sid, "home", "child.pid")
	var pid int
	testutil.Eventually(t, file, func() bool {
		b, err := os.ReadFile(file)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return procOf(t, pid)
}

// records returns the runner's leftover records under dataDir.
func records(t testing.TB, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, ".adapters"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// What an adapter spawned dies with it, however it ends: stopped, exited
// on its own, or stopped with its runner. The runner's record of it goes
// with it.
func TestAdapterProcessGroupDiesWithIt(t *testing.T) {
	h := startWith(t, adapterrunner.Config{}, parent("parent"))

	h.create(t, "stopped", "p1", "parent")
	kid := child(t, h.dataDir, "stopped")
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
		&events.AcpCloseSessionRequest{}, header("stopped", "p1")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the child of a stopped adapter", kid)

	created := h.create(t, "exited", "p2", "parent")
	kid = child(t, h.dataDir, "exited")
	if err := syscall.Kill(int(*created.Pid), syscall.SIGKILL); err != nil { // the adapter alone
		t.Fatal(err)
	}
	until[*events.AcpAgentExitedEvent](t, h)
	waitGone(t, "the child of an adapter that died", kid)

	h.create(t, "shutdown", "p3", "parent")
	kid = child(t, h.dataDir, "shutdown")
	if got := records(t, h.dataDir); len(got) != 1 {
		t.Errorf("leftover records with one adapter running = %v, want one", got)
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the child of an adapter whose runner stopped", kid)
	if got := records(t, h.dataDir); len(got) != 0 {
		t.Errorf("leftover records after every adapter ended = %v, want none", got)
	}
}

// A runner killed with SIGKILL takes its adapters with it (Pdeathsig), and
// the runner started next on its data directory kills what they spawned.
func TestAdaptersDieWithTheirRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills runner processes; skipped in -short")
	}
	bin := filepath.Join(t.TempDir(), "runner")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/runner").CombinedOutput(); err != nil {
		t.Fatalf("build the runner: %v\n%s", err, out)
	}
	ns := natstest.Run(t, natstest.WithListen())
	nc := natstest.Connect(t, ns)
	dataDir := testutil.TempDir(t)
	// Like claude-code-acp and codex-acp, the adapter does not exit when
	// its stdin ends.
	// The runner confines it (adapter-runner.sandbox defaults to
	// require): /bin/sh may exec the test agent only if it may read it.
	stubborn := parent("stubborn", "--exit-on-eof=false")
	stubborn.Sandbox.Read = []string{filepath.Dir(testAgent)}
	registry, err := json.Marshal(adapterrunner.Registry{Agents: []adapterrunner.Agent{stubborn}})
	if err != nil {
		t.Fatal(err)
	}
	agents := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(agents, registry, 0o600); err != nil {
		t.Fatal(err)
	}
	runner := func(id string) *exec.Cmd {
		cmd := exec.Command(bin, "-nats", ns.ClientURL(), "-adapter-runner.id", id, "-adapter-runner.data-dir", dataDir, "-adapter-runner.agents", agents)
		cmd.Stderr = t.Output()
		cmd.WaitDelay = waitFor
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// It serves once it answers: until then nobody does (unavailable).
		testutil.Eventually(t, "runner "+id+" to serve", func() bool {
			_, err := rpc.Call[events.AdapterStatus](t.Context(), nc, events.RunnerSubject(events.RunnerID(id), events.RunnerStatus),
				&events.AcpGetSessionStateRequest{}, header("none", "none"))
			if e := events.AsError(err); e != nil && e.Code != events.CodeUnavailable {
				t.Fatalf("runner %s status: %v", id, err)
			}
			return err == nil
		})
		return cmd
	}

	first := runner("first")
	created, err := rpc.Call[events.AcpSessionCreatedResponse](t.Context(), nc, events.RunnerSubject("first", events.RunnerCreate),
		&events.AcpCreateSessionRequest{AgentType: "stubborn", McpServers: events.JSON("[]")}, header("s1", "p1"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	adapter, kid := procOf(t, int(*created.Pid)), child(t, dataDir, "s1")
	t.Cleanup(func() { // should the test fail: the group's number is theirs while either lives
		if adapter.alive() || kid.alive() {
			_ = syscall.Kill(-adapter.pid, syscall.SIGKILL)
		}
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	waitGone(t, "the adapter of a runner killed with SIGKILL", adapter)
	if !kid.alive() {
		t.Fatal("what the adapter spawned died too: nothing is left for the next runner to find")
	}

	second := runner("second")
	waitGone(t, "what the killed runner's adapter spawned, once a runner started on the same data directory", kid)
	if got := records(t, dataDir); len(got) != 0 {
		t.Errorf("leftover records after the second runner started = %v, want none", got)
	}
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("the second runner, stopped: %v", err)
	}
}
