package adapterrunner

// The launcher's steps (launch, sandbox_linux.go) that are not Landlock's.
// Each is filled in by the part of the sandbox it belongs to; until then
// it does nothing.

// enterCgroups moves this process into the adapter's cgroups.
func enterCgroups(sandboxPolicy) error { return nil }

// enterWorkdir makes the directory the runner held open this process's
// working directory.
func enterWorkdir(sandboxPolicy) error { return nil }

// dropPrivileges leaves this process no capability and no way to gain one
// (privileges_linux.go).
func dropPrivileges(p sandboxPolicy) error { return dropCapabilities(p) }

// filterSyscalls installs the adapter's seccomp filter (seccomp_linux.go).
func filterSyscalls(sandboxPolicy) error { return installSeccomp() }
