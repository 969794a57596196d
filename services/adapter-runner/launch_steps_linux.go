package adapterrunner

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The launcher's steps (launch, sandbox_linux.go) that are not Landlock's.

// enterCgroups moves this process into the adapter's cgroup v1 cgroups
// (p.Cgroups, their cgroup.procs files), while it may still write them:
// what the adapter then forks starts in them. Its v2 cgroup it was born
// in (cgroup.go).
func enterCgroups(p sandboxPolicy) error {
	for _, f := range p.Cgroups {
		// "0" is the writer: the whole process, every thread of it.
		if err := os.WriteFile(f, []byte("0"), 0); err != nil {
			return err
		}
	}
	return nil
}

// enterWorkdir makes the directory the runner held open this process's
// working directory, by its descriptor (the first of p.Workdirs), and
// marks every inherited working directory close-on-exec: restrict still
// needs them, the adapter must not inherit them.
func enterWorkdir(p sandboxPolicy) error {
	for _, fd := range p.Workdirs {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("working directory descriptor %d is not a directory the runner held (%v)", fd, err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("working directory descriptor %d: %w", fd, err)
		}
	}
	if len(p.Workdirs) == 0 {
		return nil
	}
	return unix.Fchdir(p.Workdirs[0])
}

// dropPrivileges leaves this process no capability and no way to gain one
// (privileges_linux.go).
func dropPrivileges(p sandboxPolicy) error { return dropCapabilities(p) }

// filterSyscalls installs the adapter's seccomp filter (seccomp_linux.go).
func filterSyscalls(sandboxPolicy) error { return installSeccomp() }
