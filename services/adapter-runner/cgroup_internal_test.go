//go:build linux

package adapterrunner

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// On a machine with cgroup v1 alone (no v2 hierarchy to kill with), an
// adapter's processes are frozen, killed and thawed with the freezer:
// a setsid grandchild of the adapter dies with it, and the cgroups go.
func TestFreezerKillsAV1Cgroup(t *testing.T) {
	h := findCgroups(slog.New(slog.NewTextHandler(io.Discard, nil)), cgroupScope(t.TempDir(), "r1"))
	t.Cleanup(h.close)
	if h.v1["freezer"] == "" {
		t.Skip("this machine gives the runner no cgroup v1 freezer")
	}
	if v2 := h.v2; v2 != "" {
		t.Cleanup(func() { _ = os.Remove(v2) })
	}
	h.v2, h.v2Kill = "", false // as a machine without v2 would be
	cg, err := h.open("a-v1", Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "orphan.pid")
	// The shell waits for the file to be written, so that the orphan is
	// forked after the shell joined the cgroups.
	cmd := exec.Command("/bin/sh", "-c", `read go; setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 1000' & exec sleep 1000`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	if err := cg.join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	var orphan int
	deadline := time.Now().Add(10 * time.Second)
	for orphan == 0 || len(cg.procs()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the orphan did not start: procs %v", cg.procs())
		}
		b, _ := os.ReadFile(pidFile)
		orphan, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(5 * time.Millisecond)
	}
	if n := cg.kill(); n < 2 {
		t.Errorf("kill found %d processes, want the shell's and the orphan's", n)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the adapter stand-in outlived the kill")
	}
	if err := cg.remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(orphan) + "/stat"); err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i < 0 || b[i+2] != 'Z' {
			t.Errorf("the orphan %d outlived the freezer's kill", orphan)
		}
	}
	for _, d := range cg.v1 {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s is left: %v", d, err)
		}
	}
}
