package adapterrunner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// An adapter dies with its runner. Each one leads a process group of its
// own (so that what it spawns, the tools a coding agent runs, can be killed
// with it), and is started with Pdeathsig SIGKILL, so that the kernel kills
// it when the runner dies, even by SIGKILL, when nothing in the runner can
// stop it. What the adapter spawned does not inherit Pdeathsig: a runner
// that starts again kills those groups from its record (leftovers.go).
//
// The known caveat of Pdeathsig (prctl(2), PR_SET_PDEATHSIG): the signal
// is sent when the *thread* that forked the child exits, not the process.
// Go ends an OS thread while the process lives whenever a goroutine locked
// to it (runtime.LockOSThread) returns without unlocking; any code in the
// binary doing that on a thread that once forked an adapter would kill the
// adapter. So adapters are forked from one thread that a goroutine holds
// locked while any adapter it forked lives (adapterThread). The goroutine
// returns, still locked, which ends the thread, only once the last of them
// has been reaped.

func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// adapterThread is the one thread this OS process forks adapters from.
var adapterThread spawner

// spawner starts processes from one locked OS thread, held while any
// process it started is not reaped.
type spawner struct {
	mu   sync.Mutex
	reqs chan spawnRequest // nil while no thread is held
	// ended is closed once the goroutine holding the thread has returned.
	ended chan struct{}
	live  int // processes started (or starting) from the thread and not reaped
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan<- error
}

// start runs cmd.Start on the spawner's thread. A successful start must be
// followed by one call of reaped, after the process has been waited for.
func (s *spawner) start(cmd *exec.Cmd) error {
	s.mu.Lock()
	if s.reqs == nil {
		s.reqs, s.ended = make(chan spawnRequest), make(chan struct{})
		go hold(s.reqs, s.ended)
	}
	s.live++ // before the request, so the thread is not let go under it
	reqs := s.reqs
	s.mu.Unlock()
	done := make(chan error, 1)
	reqs <- spawnRequest{cmd: cmd, done: done}
	err := <-done
	if err != nil {
		s.reaped()
	}
	return err
}

// reaped lets the thread go once no process it started is left, and then
// returns once its goroutine has: the process watcher that reaps the last
// adapter, which its runner's Run waits for, is then the last to know of
// the thread, so that nothing a runner started outlives its Run. (Runners
// share the thread; while another one's adapters live, it stays.)
func (s *spawner) reaped() {
	s.mu.Lock()
	s.live--
	var ended chan struct{}
	if s.live == 0 {
		close(s.reqs)
		s.reqs, ended = nil, s.ended
	}
	s.mu.Unlock()
	if ended != nil {
		<-ended
	}
}

// hold serves reqs on a locked thread until reqs is closed, and then ends
// the thread: it never unlocks it, so no other goroutine runs on a thread
// that adapters may still be the children of.
func hold(reqs <-chan spawnRequest, ended chan<- struct{}) {
	runtime.LockOSThread()
	defer close(ended)
	for r := range reqs {
		r.done <- r.cmd.Start()
	}
}

func startCommand(cmd *exec.Cmd) error { return adapterThread.start(cmd) }

func commandReaped() { adapterThread.reaped() }

// awaitExit returns once process pid (a child of this process) has exited,
// without reaping it: until it is waited for, its zombie keeps its process
// ID, and with it the ID of its process group, from being used again, so
// the group can still be killed safely.
func awaitExit(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// procStat is what /proc/<pid>/stat says about a process.
type procStat struct {
	pgid  int
	start uint64 // clock ticks after boot
	state byte   // R, S, D, Z, ...
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// parseStat parses proc_pid_stat(5): "pid (comm) state ppid pgrp ...".
// comm may hold spaces and parentheses, so the fields are counted from the
// last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("stat %q: no command", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("stat %q: too few fields", b)
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return procStat{}, fmt.Errorf("stat pgrp: %w", err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("stat starttime: %w", err)
	}
	return procStat{pgid: pgid, start: start, state: f[0][0]}, nil
}

// bootID names this boot of the machine: start times count from it.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b)), err
}

// processes lists the IDs of every process on the machine (in this PID
// namespace).
func processes() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
