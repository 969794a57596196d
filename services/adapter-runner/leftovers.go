package adapterrunner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"skein.dev/pkg/events"
)

// A runner killed with SIGKILL cannot stop its adapters. Pdeathsig kills
// each adapter with it (process_linux.go), but not what an adapter spawned:
// the tools of a coding agent, which would run on unsupervised. So a
// runner records every adapter it starts, and the runner that starts next
// on the same data directory kills the process groups of those its dead
// predecessor left behind.
//
// The record is a directory, Config.DataDir/.adapters (no namespace, hence
// no session directory, starts with a dot), holding one small JSON file per
// adapter process alive, <pid>.json, written once the adapter started and
// removed once its process group was killed, just before the adapter is
// reaped. A file per adapter needs no rewriting of shared state, and a
// runner killed at any moment leaves whole files behind (a file it could
// not finish is unreadable, and dropped).
//
// A process ID is used again once its process is gone (pid_max is 32768 by
// default), so a record names each process with its start time (field 22
// of /proc/<pid>/stat, clock ticks since boot) and the boot it started in,
// and nothing is killed unless it can be shown to be the group recorded:
//
//   - records of another boot are dropped: nothing of them runs;
//   - records of a runner still alive (several runners may share a data
//     directory) are left to that runner;
//   - a group whose leader is the recorded process (same start time; a
//     zombie counts) is killed;
//   - a group whose leader is gone is killed when no process has taken the
//     leader's number and processes that started after the leader are
//     still in it: a process group's number is not given to another
//     process while the group has members. The one case this cannot tell
//     apart is the number coming round (pid_max processes started while no
//     runner ran) to a new group leader that has since exited too, leaving
//     members behind.
//
// Outside Linux there is no /proc: nothing is recorded.

// leftoverDir is the record's directory under Config.DataDir.
const leftoverDir = ".adapters"

// procID names one process: its number and its start time, which tell it
// from any later process given the same number.
type procID struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// leftover is the record of one adapter process.
type leftover struct {
	Boot    string `json:"boot"`    // the boot both processes started in
	Runner  procID `json:"runner"`  // the runner that started the adapter
	Adapter procID `json:"adapter"` // the adapter, its group's leader
	Pgid    int    `json:"pgid"`
}

// thisRunner is this process as records name it, and the machine's boot.
var thisRunner = sync.OnceValues(func() (leftover, error) {
	boot, err := bootID()
	if err != nil {
		return leftover{}, err
	}
	st, err := readStat(os.Getpid())
	if err != nil {
		return leftover{}, err
	}
	return leftover{Boot: boot, Runner: procID{Pid: os.Getpid(), Start: st.start}}, nil
})

// recordAdapter records adapter process pid under dataDir and returns the
// record's path, "" when there is nothing to record by (not Linux).
func recordAdapter(dataDir string, pid int) (string, error) {
	l, err := thisRunner()
	if errors.Is(err, errors.ErrUnsupported) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("record adapter: %w", err)
	}
	st, err := readStat(pid)
	if err != nil {
		return "", fmt.Errorf("record adapter: %w", err)
	}
	l.Adapter, l.Pgid = procID{Pid: pid, Start: st.start}, st.pgid
	return writeLeftover(filepath.Join(dataDir, leftoverDir), l)
}

// writeLeftover writes l into the record dir, whole or not at all.
func writeLeftover(dir string, l leftover) (string, error) {
	data, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("record adapter: %w", err)
	}
	path := filepath.Join(dir, strconv.Itoa(l.Adapter.Pid)+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return "", fmt.Errorf("record adapter: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("record adapter: %w", err)
	}
	return path, nil
}

// killLeftovers kills the process groups of the adapters that runners no
// longer alive recorded under dataDir, and clears their records.
func killLeftovers(lg *slog.Logger, dataDir string) {
	me, err := thisRunner()
	if errors.Is(err, errors.ErrUnsupported) {
		return
	}
	if err != nil {
		lg.Warn("cannot look for leftover adapters", events.LogKeyErr, err)
		return
	}
	dir := filepath.Join(dataDir, leftoverDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		lg.Warn("cannot look for leftover adapters", events.LogKeyErr, err)
		return
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		var l leftover
		data, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(data, &l)
		}
		switch {
		case err != nil:
			// Cut short by a runner killed while it wrote it: that adapter
			// dies by Pdeathsig, having had no time to spawn anything.
			lg.Warn("unreadable leftover record dropped", "file", path, events.LogKeyErr, err)
		case l.Boot != me.Boot:
			// The machine has restarted since: nothing recorded runs.
		case alive(l.Runner):
			continue // its runner's to stop
		case l.groupAlive():
			if err := syscall.Kill(-l.Pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				lg.Warn("cannot kill leftover adapter", "pid", l.Adapter.Pid, "pgid", l.Pgid, events.LogKeyErr, err)
				continue
			}
			lg.Warn("killed an adapter a dead runner left running, with its process group", "pid", l.Adapter.Pid, "pgid", l.Pgid, "runner_pid", l.Runner.Pid)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			lg.Warn("cannot clear leftover record", "file", path, events.LogKeyErr, err)
		}
	}
}

// alive reports whether process p runs (a zombie does not).
func alive(p procID) bool {
	st, err := readStat(p.Pid)
	return err == nil && st.start == p.Start && st.state != 'Z'
}

// groupAlive reports whether the process group l recorded has members, and
// is still that group (see the rules above).
func (l leftover) groupAlive() bool {
	if st, err := readStat(l.Pgid); err == nil {
		// The number is taken: by the recorded leader (or its zombie), or
		// by a process that got it after the group was gone.
		return l.Pgid == l.Adapter.Pid && st.start == l.Adapter.Start
	}
	pids, err := processes()
	if err != nil {
		return false
	}
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil && st.pgid == l.Pgid && st.start >= l.Adapter.Start && st.state != 'Z' {
			return true
		}
	}
	return false
}

// KillLeftovers kills what a runner of cfg's data directory and ID that
// was killed left running: the process groups it recorded, and every
// process in the cgroups of its scope (contain.go). Run does it before it
// hosts anything; skein dev does it first of all, before it binds its
// listeners, so that no such process holds one of Skein's ports.
func KillLeftovers(cfg Config, lg *slog.Logger) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	killLeftovers(lg, cfg.DataDir)
	c := &containment{host: findCgroups(lg, cgroupScope(cfg.DataDir, cfg.ID)), lg: lg}
	c.reap()
	c.close()
	return nil
}
