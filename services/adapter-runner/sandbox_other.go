//go:build !linux

package adapterrunner

import (
	"errors"
	"os/exec"
)

// Outside Linux there is no Landlock: adapter-runner.sandbox=require
// refuses every adapter, warn runs them unconfined (sandbox.go).

func landlockABI() (int, error) {
	return 0, errors.New("Landlock is Linux only")
}

// launcherCommand is never called: with no Landlock, no adapter is
// started through the launcher.
func launcherCommand(_, path string, args []string) *exec.Cmd { return exec.Command(path, args...) }

// launcherName is the launcher's argv[0] (sandbox_linux.go), which no
// command here has.
const launcherName = "skein-adapter-sandbox"
