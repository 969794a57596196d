//go:build linux

package adapterrunner_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// requireCgroups skips a test of containment on a machine that gives the
// runner no cgroup it may write (a test run as a user without a delegated
// cgroup), where the runner says so at start and there is nothing to test.
func requireCgroups(t *testing.T) {
	t.Helper()
	if len(cgroupScopes(t, t.TempDir())) == 0 {
		t.Skip("this machine gives the runner no cgroup it may write")
	}
}

// cgroupScopes returns the scopes of runner r1 on dataDir, made if
// missing, and removes them at the end of the test (a runner removes its
// own when it stops).
func cgroupScopes(t *testing.T, dataDir string) []string {
	scopes := adapterrunner.CgroupScopes(dataDir, "r1")
	t.Cleanup(func() {
		for _, s := range scopes {
			_ = os.Remove(s)
		}
	})
	return scopes
}

// pidAlive reports whether process pid runs: a zombie, dead and not yet
// reaped by whoever inherited it, does not.
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// eventually waits, for at most 10 s, until cond holds; it reports
// whether it did.
func eventually(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// pidFile waits until the file at path holds a process ID, and returns it.
func pidFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	if !eventually(func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}) {
		t.Fatalf("no process ID in %s", path)
	}
	return pid
}

// spawnOrphan makes session sid's agent start a process in a session of
// its own (setsid), whose parent exits at once, as a shell tool's `setsid
// cmd &` does, and returns its process ID. The test kills it at the end,
// should the runner not have.
func (h *harness) spawnOrphan(t *testing.T, sid, turnID string) int {
	t.Helper()
	cwd := filepath.Join(h.dataDir, "workspaces", "default", sid)
	cmd := `sh setsid sh -c 'echo $$ > orphan.pid; exec sleep 1000' >/dev/null 2>&1 &`
	if got := h.probe(t, sid, turnID, cmd)[cmd]; !strings.HasPrefix(got, "ok") {
		t.Fatalf("spawn = %q", got)
	}
	pid := pidFile(t, filepath.Join(cwd, "orphan.pid"))
	t.Cleanup(func() {
		if pidAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if !pidAlive(pid) {
		t.Fatalf("the agent's setsid process %d is not running", pid)
	}
	return pid
}

// stopAdapter stops session sid's adapter, as delete and unload do.
func (h *harness) stopAdapter(t *testing.T, sid string) {
	t.Helper()
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
		&events.AcpCloseSessionRequest{}, header(sid, "p-"+sid)); err != nil {
		t.Fatal(err)
	}
}

// A process an agent started in a session of its own (setsid), which
// leaves the adapter's process group, dies with the adapter: when the
// adapter is stopped (delete, unload), and when the runner stops (skein dev
// stopped or restarted). Its cgroup goes with it.
func TestSecuritySetsidChildDiesWithItsAdapter(t *testing.T) {
	requireLandlock(t, 1)
	requireCgroups(t)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	scopes := cgroupScopes(t, h.dataDir)
	for _, sid := range []string{"stopped", "at-shutdown"} {
		if _, err := h.createWith(t, sid, events.AcpCreateSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	stopped := h.spawnOrphan(t, "stopped", "t1")
	atShutdown := h.spawnOrphan(t, "at-shutdown", "t1")

	h.stopAdapter(t, "stopped")
	if !eventually(func() bool { return !pidAlive(stopped) }) {
		t.Errorf("the setsid process %d of a stopped adapter is still running", stopped)
	}
	for _, d := range adapterrunner.CgroupOf(scopes, "stopped", "p-stopped") {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the stopped adapter's cgroup %s is left: %v", d, err)
		}
	}
	if !pidAlive(atShutdown) {
		t.Fatalf("stopping one adapter killed another's process %d", atShutdown)
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { return !pidAlive(atShutdown) }) {
		t.Errorf("the setsid process %d of an adapter outlived its runner's stop", atShutdown)
	}
}

// A runner killed with SIGKILL cannot stop its adapters: what they spawned
// in sessions of their own runs on, unrecorded. The next runner on the
// same data directory kills every process in the cgroups of its scope,
// and removes them, before it hosts anything. A leftover is simulated
// with a real process the test puts in a cgroup under the scope.
func TestSecurityRunnerKillsLeftCgroupsAtStart(t *testing.T) {
	requireCgroups(t)
	dataDir := t.TempDir()
	scopes := cgroupScopes(t, dataDir)
	left := adapterrunner.CgroupOf(scopes, "killed", "p-killed")
	for _, d := range left {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(d) }) // after the kill below
	}
	cmd := exec.Command("setsid", "sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	for _, d := range left {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}

	startWith(t, adapterrunner.Config{DataDir: dataDir})
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the process %d left in a cgroup of the runner's scope is still running after the runner started", cmd.Process.Pid)
	}
	for _, d := range left {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the leftover cgroup %s is still there: %v", d, err)
		}
	}
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// An agent may not listen on a TCP port by default, where a process it
// left behind would take a port Skein or another tenant serves on and
// catch their clients' bearer tokens; an agent whose registry entry allows
// the port (or a range holding it) may, and may still connect out.
func TestSecurityAgentCannotBindByDefault(t *testing.T) {
	requireLandlock(t, 4)
	port, other := freePort(t), freePort(t)
	lo, hi := min(port, other), max(port, other)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire},
		adapterrunner.Agent{ID: "plain", Command: testAgent},
		adapterrunner.Agent{ID: "devserver", Command: testAgent, Sandbox: adapterrunner.AgentSandbox{Bind: []string{strconv.Itoa(port)}}},
		adapterrunner.Agent{ID: "ranged", Command: testAgent, Sandbox: adapterrunner.AgentSandbox{Bind: []string{fmt.Sprintf("%d-%d", lo, hi)}}})
	ln := acceptAndClose(t)
	bind := fmt.Sprintf("bind 127.0.0.1:%d", port)
	dial := "dial " + ln.Addr().String()
	for _, tc := range []struct {
		agent, bind string
	}{{"plain", "permission denied"}, {"devserver", "ok"}, {"ranged", "ok"}} {
		if _, err := h.createWith(t, tc.agent, events.AcpCreateSessionRequest{AgentType: tc.agent}); err != nil {
			t.Fatal(err)
		}
		got := h.probe(t, tc.agent, "t1", bind, dial)
		if !strings.Contains(got[bind], tc.bind) {
			t.Errorf("%s: %s = %q, want %q", tc.agent, bind, got[bind], tc.bind)
		}
		if got[dial] != "ok" {
			t.Errorf("%s: %s = %q, want ok", tc.agent, dial, got[dial])
		}
	}
}

// limitHit waits for the next AdapterLimitHit on ACP_IO.
func limitHit(t *testing.T, h *harness) *events.AdapterLimitHit {
	t.Helper()
	hit, _ := until[*events.AdapterLimitHit](t, h)
	return hit
}

// hitsCounted is acp_runner_limit_hits_total{kind}.
func hitsCounted(t *testing.T, h *harness, kind string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "acp_runner_limit_hits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// An agent that starts processes without end is stopped at its process
// limit: the kernel refuses its forks (EAGAIN), and the runner records the
// hit in the session's log (AdapterLimitHit on ACP_IO) and counts it.
// Stopping the adapter then kills every process it made.
func TestSecurityProcessFloodStopsAtPidsLimit(t *testing.T) {
	requireLandlock(t, 1)
	requireCgroups(t)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire, PidsMax: 64})
	if _, err := h.createWith(t, "flood", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	// A fork bomb bounded by count, so that the machine survives the run
	// without the limit: 200 processes, each of which stays.
	h.prompt(t, "flood", "p-flood", "t1", `sh i=0; while [ $i -lt 200 ]; do sleep 1000 & i=$((i+1)); done >/dev/null 2>&1; echo started $i`)
	hit := limitHit(t, h)
	if hit.Kind != events.LimitPids || hit.Limit != 64 || hit.Count == 0 {
		t.Errorf("limit hit = %+v, want pids, limit 64, a count", hit)
	}
	if n := hitsCounted(t, h, events.LimitPids); n < 1 {
		t.Errorf("acp_runner_limit_hits_total{kind=pids} = %v, want at least 1", n)
	}
	scopes := cgroupScopes(t, h.dataDir)
	h.stopAdapter(t, "flood")
	for _, d := range adapterrunner.CgroupOf(scopes, "flood", "p-flood") {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the flooded adapter's cgroup %s is left: %v", d, err)
		}
	}
}

// An agent that takes more memory than its limit has a process ended by
// the kernel's OOM killer, and the runner records and counts the hit.
func TestSecurityMemoryLimitHit(t *testing.T) {
	requireLandlock(t, 1)
	requireCgroups(t)
	const limit = 96 << 20
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire, MemoryMaxBytes: limit})
	if _, err := h.createWith(t, "hog", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	// 256 MB in one shell variable.
	h.prompt(t, "hog", "p-hog", "t1", `sh x=$(head -c 268435456 /dev/zero | tr '\0' a); echo ${#x}`)
	hit := limitHit(t, h)
	if hit.Kind != events.LimitMemory || hit.Limit != limit || hit.Count == 0 {
		t.Errorf("limit hit = %+v, want memory, limit %d, a count", hit, limit)
	}
	if n := hitsCounted(t, h, events.LimitMemory); n < 1 {
		t.Errorf("acp_runner_limit_hits_total{kind=memory} = %v, want at least 1", n)
	}
}

// An agent whose session's directories grow past the watched size is
// stopped, and the hit recorded before its exit.
func TestSecurityDiskWatchStopsAGrowingWorkspace(t *testing.T) {
	h := startWith(t, adapterrunner.Config{DiskMaxBytes: 1 << 20, DiskWatchInterval: 20 * time.Millisecond})
	if _, err := h.createWith(t, "filler", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.prompt(t, "filler", "p-filler", "t1", `sh head -c 4000000 /dev/urandom > big; echo written`)
	hit := limitHit(t, h)
	if hit.Kind != events.LimitDisk || hit.Limit != 1<<20 {
		t.Errorf("limit hit = %+v, want disk, limit %d", hit, 1<<20)
	}
	exit, _ := until[*events.AcpAgentExitedEvent](t, h)
	if exit.ProcessID != "p-filler" {
		t.Errorf("exit = %+v, want p-filler's", exit)
	}
	if n := hitsCounted(t, h, events.LimitDisk); n != 1 {
		t.Errorf("acp_runner_limit_hits_total{kind=disk} = %v, want 1", n)
	}
}

// cgroupValue reads file of the first of dirs that has it.
func cgroupValue(t *testing.T, dirs []string, file string) string {
	t.Helper()
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("no %s in %q", file, dirs)
	return ""
}

// The runner's limits reach each adapter's cgroup, with an agent's own
// where its registry entry sets them: memory, processes and CPU weight
// (cpu.weight in v2; v1's cpu.shares, scaled from it).
func TestAdapterCgroupsCarryTheirLimits(t *testing.T) {
	requireCgroups(t)
	h := startWith(t, adapterrunner.Config{MemoryMaxBytes: 512 << 20, PidsMax: 300, CPUWeight: 50},
		adapterrunner.Agent{ID: "test", Command: testAgent},
		adapterrunner.Agent{ID: "own", Command: testAgent, Limits: adapterrunner.Limits{Pids: 77, CPUWeight: 200}})
	scopes := cgroupScopes(t, h.dataDir)
	for _, tc := range []struct {
		agent             string
		mem, pids, weight int64
	}{{"test", 512 << 20, 300, 50}, {"own", 512 << 20, 77, 200}} {
		if _, err := h.createWith(t, tc.agent, events.AcpCreateSessionRequest{AgentType: tc.agent}); err != nil {
			t.Fatal(err)
		}
		dirs := adapterrunner.CgroupOf(scopes, tc.agent, "p-"+tc.agent)
		if _, err := os.Stat(filepath.Join(dirs[0], "memory.max")); err == nil {
			if got := cgroupValue(t, dirs, "memory.max"); got != strconv.FormatInt(tc.mem, 10) {
				t.Errorf("%s: memory.max = %s, want %d", tc.agent, got, tc.mem)
			}
			if got := cgroupValue(t, dirs, "cpu.weight"); got != strconv.FormatInt(tc.weight, 10) {
				t.Errorf("%s: cpu.weight = %s, want %d", tc.agent, got, tc.weight)
			}
		} else {
			if got := cgroupValue(t, dirs, "memory.limit_in_bytes"); got != strconv.FormatInt(tc.mem, 10) {
				t.Errorf("%s: memory.limit_in_bytes = %s, want %d", tc.agent, got, tc.mem)
			}
			if got := cgroupValue(t, dirs, "cpu.shares"); got != strconv.FormatInt(tc.weight*1024/100, 10) {
				t.Errorf("%s: cpu.shares = %s, want %d", tc.agent, got, tc.weight*1024/100)
			}
		}
		if got := cgroupValue(t, dirs, "pids.max"); got != strconv.FormatInt(tc.pids, 10) {
			t.Errorf("%s: pids.max = %s, want %d", tc.agent, got, tc.pids)
		}
	}
}
