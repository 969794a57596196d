//go:build !linux

package adapterrunner

import (
	"errors"
	"os/exec"
	"syscall"
)

// Outside Linux (a developer's machine) an adapter still leads a process
// group of its own, killed on every exit path the runner sees, but nothing
// kills it when the runner is killed: there is no Pdeathsig, and no /proc
// to record leftovers by (see process_linux.go).

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func startCommand(cmd *exec.Cmd) error { return cmd.Start() }

func commandReaped() {}

func awaitExit(int) error { return errors.ErrUnsupported }

type procStat struct {
	pgid  int
	start uint64
	state byte
}

func readStat(int) (procStat, error) { return procStat{}, errors.ErrUnsupported }

func bootID() (string, error) { return "", errors.ErrUnsupported }

func processes() ([]int, error) { return nil, errors.ErrUnsupported }
