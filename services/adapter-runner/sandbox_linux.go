package adapterrunner

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// launcherName is the argv[0] by which the runner's binary, started again
// as /proc/self/exe, knows it is to be the launcher of a confined adapter:
// argv is [launcherName, policy JSON, adapter path, adapter args...]. No
// user types it, and /proc/self/exe is the runner's binary even if the
// file was replaced since it started.
const launcherName = "skein-adapter-sandbox"

// init makes every binary that links the runner a launcher when started
// as one: skein, and each test binary that runs a runner, with no wiring in
// their main or TestMain. One that forgot the wiring would otherwise run
// itself, a whole skein or test suite, where an adapter was meant to
// start. It runs before main, in a fresh process that has no other job.
func init() {
	if len(os.Args) < 3 || os.Args[0] != launcherName {
		return
	}
	err := launch(os.Args[1], os.Args[2], os.Args[2:])
	// launch returns only on failure. The runner reads this from the
	// adapter's stderr, and reports it with the failed start.
	fmt.Fprintf(os.Stderr, "%s: %v\n", launcherName, err)
	os.Exit(126) // as a shell for a command it found but could not run
}

// launcherCommand is the command that starts the adapter at path with args
// confined by policy (JSON).
func launcherCommand(policy, path string, args []string) *exec.Cmd {
	return &exec.Cmd{Path: "/proc/self/exe", Args: append([]string{launcherName, policy, path}, args...)}
}

// launch applies the policy to this process and replaces it with the
// adapter (argv: its path first, as exec.Command gives it), keeping the
// process ID, process group and parent death signal the runner set up.
func launch(policyJSON, path string, argv []string) error {
	var p sandboxPolicy
	if err := json.Unmarshal([]byte(policyJSON), &p); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	// Capabilities and no_new_privs are each thread's: every step, and
	// the exec, on this one.
	runtime.LockOSThread()
	// The steps run in this order, each needing what the one before it
	// left: the cgroups are joined while this process may still write
	// them, the working directory is entered through the descriptor the
	// runner held, the privileges are dropped before the rules that
	// need no_new_privs, and the seccomp filter comes last, so that it
	// need not allow what the steps before it do.
	if err := enterCgroups(p); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if err := enterWorkdir(p); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if err := dropPrivileges(p); err != nil {
		return fmt.Errorf("privileges: %w", err)
	}
	// Where the runner found no Landlock and its mode lets the adapter
	// run without it (sandbox.command), every other step still runs.
	if !p.NoLandlock {
		abi, err := landlockABI()
		if err != nil || abi == 0 {
			return fmt.Errorf("no Landlock in this kernel: %v", err)
		}
		if err := restrict(p, abi); err != nil {
			return fmt.Errorf("confine: %w", err)
		}
	}
	if err := filterSyscalls(p); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	// The adapter inherits its standard streams and nothing else: not
	// the held directories, nor a descriptor the runner itself inherited
	// without close-on-exec (from whatever started it), which exec would
	// otherwise pass on.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close-on-exec: %w", err)
	}
	return syscall.Exec(path, argv, os.Environ())
}

// landlockVersions are the configurations of each ABI this launcher
// knows, handling every access right of its version. ABI 7 and later add
// only audit logging, which changes nothing of what is allowed.
var landlockVersions = []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6}

// restrict confines this process, and what it executes, to p, with all
// the kernel's Landlock version handles: strictly, so that a rule the
// kernel cannot enforce is an error, never a silent gap. From ABI 6 on
// this includes the scopes: the adapter cannot signal, nor connect to the
// abstract UNIX sockets of, processes outside its own sandbox (the runner,
// other sessions' adapters).
func restrict(p sandboxPolicy, abi int) error {
	cfg := landlockVersions[min(abi, len(landlockVersions))-1]
	// The network: with NoNetwork every TCP connect and bind is handled,
	// and none allowed. Otherwise only bind is handled, where the ABI
	// has it: connecting stays free (agents talk to their model's API),
	// and the adapter may listen only on the ports of p.Bind, so that a
	// process it left behind cannot take a port Skein or another tenant
	// serves on, and catch their clients' requests.
	var net []landlock.Rule
	switch {
	case p.NoNetwork:
	case abi >= landlockNetABI:
		cfg.HandledAccessNet = llsys.AccessNetBindTCP
		for _, r := range p.Bind {
			for port := int(r[0]); port <= int(r[1]); port++ {
				net = append(net, landlock.BindTCP(uint16(port)))
			}
		}
	default:
		cfg.HandledAccessNet = 0 // nothing handled: every TCP use allowed
	}
	var roDirs, roFiles, rwDirs, rwFiles []string
	sortPaths := func(paths []string, dirs, files *[]string) {
		for _, path := range paths {
			fi, err := os.Stat(path)
			switch {
			case err != nil: // missing: nothing to allow
			case fi.IsDir():
				*dirs = append(*dirs, path)
			default:
				*files = append(*files, path)
			}
		}
	}
	sortPaths(p.Read, &roDirs, &roFiles)
	sortPaths(p.Write, &rwDirs, &rwFiles)
	// The working directories the runner held, by their descriptors:
	// opening /proc/self/fd/N (as the rule does, O_PATH) reaches exactly
	// the inode the runner resolved, whatever its name leads to now. A
	// process may always look up its own descriptors, whatever its
	// user and dumpable state.
	for _, fd := range p.Workdirs {
		rwDirs = append(rwDirs, "/proc/self/fd/"+strconv.Itoa(fd))
	}
	rw := landlock.RWDirs(rwDirs...)
	if abi >= 2 {
		// Moving and linking files between the writable directories,
		// as mv and git do; Landlock checks that nothing gains rights
		// on the way. Without it (ABI 1) the kernel denies them all.
		rw = rw.WithRefer()
	}
	// Between the check above and the rules, a path may vanish; the
	// rules skip what is missing rather than fail the start.
	return cfg.Restrict(append([]landlock.Rule{
		landlock.RODirs(roDirs...).IgnoreIfMissing(),
		landlock.ROFiles(roFiles...).IgnoreIfMissing(),
		rw.IgnoreIfMissing(),
		landlock.RWFiles(rwFiles...).WithIoctlDev().IgnoreIfMissing(),
	}, net...)...)
}

// landlockABI returns the Landlock ABI version of the running kernel, 0
// (and why) where it has none or it is disabled.
func landlockABI() (int, error) {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0, err
	}
	return v, nil
}
