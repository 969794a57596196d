package adapterrunner

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// group starts sh -c script as the leader of a process group of its own,
// killed when the test ends, and returns it and how a record names it.
// Its stdout goes to cmd.Stdout, a *bytes.Buffer.
func group(t *testing.T, script string) (*exec.Cmd, procID) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = new(bytes.Buffer)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	// Until it is waited for, its stat is there even if it exited.
	st, err := readStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, procID{Pid: cmd.Process.Pid, Start: st.start}
}

// killed waits for cmd, a child of the test, and reports whether SIGKILL
// ended it.
func killed(cmd *exec.Cmd) bool {
	var exit *exec.ExitError
	if !errors.As(cmd.Wait(), &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// running reports whether cmd, a child of the test, runs: one killed is a
// zombie until waited for.
func running(cmd *exec.Cmd) bool {
	st, err := readStat(cmd.Process.Pid)
	return err == nil && st.state != 'Z'
}

// A runner that starts kills the process groups its dead predecessors
// recorded, and only those: not a group whose number names another process
// now, not one of a runner still alive, not one of another boot.
func TestKillLeftovers(t *testing.T) {
	me, err := thisRunner()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, leftoverDir)
	runnerCmd, dead := group(t, "exit 0")
	if err := runnerCmd.Wait(); err != nil {
		t.Fatal(err)
	}
	write := func(l leftover) string {
		t.Helper()
		path, err := writeLeftover(dir, l)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	record := func(runner, adapter procID) string {
		return write(leftover{Boot: me.Boot, Runner: runner, Adapter: adapter, Pgid: adapter.Pid})
	}

	// Left running by a dead runner: killed, with its group.
	leftCmd, left := group(t, "sleep 1000 & exec sleep 1000")
	leftRecord := record(dead, left)
	// Its number is another process's now: that one started later.
	reusedCmd, reused := group(t, "exec sleep 1000")
	reusedRecord := record(dead, procID{Pid: reused.Pid, Start: reused.Start - 1})
	// Its runner lives (this process): that runner's to stop.
	ownedCmd, owned := group(t, "exec sleep 1000")
	ownedRecord := record(me.Runner, owned)
	// Recorded in another boot of the machine.
	bootCmd, boot := group(t, "exec sleep 1000")
	bootRecord := write(leftover{Boot: "another boot", Runner: dead, Adapter: boot, Pgid: boot.Pid})
	// Its leader is gone, what it spawned is not.
	leaderCmd, leader := group(t, "sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
	if err := leaderCmd.Wait(); err != nil {
		t.Fatal(err)
	}
	orphanPid, err := strconv.Atoi(strings.TrimSpace(leaderCmd.Stdout.(*bytes.Buffer).String()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := readStat(orphanPid)
	if err != nil {
		t.Fatal(err)
	}
	orphan := procID{Pid: orphanPid, Start: st.start}
	orphanRecord := record(dead, leader)
	// Cut short by a runner killed while it wrote it.
	brokenRecord := filepath.Join(dir, "1.json")
	if err := os.WriteFile(brokenRecord, []byte(`{"boot":`), 0o600); err != nil {
		t.Fatal(err)
	}

	killLeftovers(slog.New(slog.NewTextHandler(t.Output(), nil)), dataDir)

	if !killed(leftCmd) {
		t.Error("the adapter a dead runner left was not killed")
	}
	// Not a child of the test: its zombie, if any, is init's.
	for deadline := time.Now().Add(20 * time.Second); alive(orphan); {
		if time.Now().After(deadline) {
			t.Fatal("what a dead runner's adapter spawned lives on after the adapter")
		}
		select {
		case <-time.After(time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
	for what, cmd := range map[string]*exec.Cmd{
		"a process that has a recorded number now":            reusedCmd,
		"a live runner's adapter":                             ownedCmd,
		"a process with the number of another boot's adapter": bootCmd,
	} {
		if !running(cmd) {
			t.Errorf("%s was killed", what)
		}
	}
	for _, path := range []string{leftRecord, reusedRecord, bootRecord, brokenRecord, orphanRecord} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record %s: %v, want it cleared", filepath.Base(path), err)
		}
	}
	if _, err := os.Stat(ownedRecord); err != nil {
		t.Errorf("the record of a live runner's adapter: %v, want it kept", err)
	}
}
