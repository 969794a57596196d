package adapterrunner

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"skein.dev/pkg/events"
)

// The sandbox. An adapter runs code a tenant chose (its agent's tools, the
// commands its model asks for) as the runner's user. Without confinement it
// could read every other session's workspace and the runner's data
// directory, which may hold the NATS store and with it every namespace's
// log. On Linux each adapter is therefore confined with Landlock before it
// starts: it may read the system (sandboxSystemPaths), its own executable
// (or node_modules tree), the scripts its registry entry's args name (with
// their packages: scriptPaths) and what its registry entry adds
// (AgentSandbox.Read); it may
// write only its session's working directories, the session's isolated
// HOME and TMPDIR, and what its registry entry adds (AgentSandbox.Write).
// Everything else, the rest of the data directory included, is denied.
//
// Landlock confines the thread that asks and what it then executes, so it
// has to be applied in the child between fork and exec, where Go runs no
// code. The runner therefore starts its own binary again as a launcher
// (sandbox_linux.go): the launcher applies the policy to itself and then
// execs the adapter, which inherits the confinement, as does everything the
// adapter spawns.

// SandboxMode is Config.Sandbox.
type SandboxMode string

// The sandbox modes.
const (
	SandboxRequire SandboxMode = "require"
	SandboxWarn    SandboxMode = "warn"
	SandboxOff     SandboxMode = "off"
)

func (m SandboxMode) validate() error {
	switch m {
	case SandboxRequire, SandboxWarn, SandboxOff:
		return nil
	}
	return fmt.Errorf("sandbox mode %q: want %s, %s or %s", m, SandboxRequire, SandboxWarn, SandboxOff)
}

// sandboxPolicy is what one adapter may reach. The runner hands it to the
// launcher on its command line, as JSON.
type sandboxPolicy struct {
	// Read are files and directories the adapter may read and execute;
	// those missing are skipped.
	Read []string `json:"read"`
	// Write are files and directories it may read, write and execute.
	Write []string `json:"write"`
	// NoNetwork denies TCP connect and bind.
	NoNetwork bool `json:"noNetwork,omitempty"`
	// Bind are the TCP ports the adapter may listen on: with the network
	// allowed, binding any other is denied (Landlock ABI 4 and later).
	Bind []portRange `json:"bind,omitempty"`
	// Cgroups are the cgroup v1 cgroup.procs files the launcher writes
	// itself into before anything else (cgroup v2's is joined at birth).
	Cgroups []string `json:"cgroups,omitempty"`
	// Workdirs are the descriptors of the session's working directories,
	// inherited from the runner, which resolved and held them
	// (Runner.confine): the cwd first, then the additional directories.
	// The launcher enters the first, grants each as Write grants a
	// path, and closes them all at exec.
	Workdirs []int `json:"workdirs,omitempty"`
	// NoLandlock: the kernel has none, and the mode lets the adapter
	// start without it; the launcher's other steps still run.
	NoLandlock bool `json:"noLandlock,omitempty"`
	// UID and GID, when UID is not 0, are the user and group the
	// adapter runs as (Config.AdapterUID): the launcher becomes them
	// once it joined its cgroups.
	UID int `json:"uid,omitempty"`
	GID int `json:"gid,omitempty"`
}

// sandbox is the runner's view of the sandbox: its mode, and the Landlock
// ABI of the kernel it runs on (0 where there is none).
type sandbox struct {
	mode SandboxMode
	abi  int
	lg   *slog.Logger
	// user is who adapters run as (adapteruser.go), the first of
	// users' range where each namespace has its own; uid 0 for the
	// runner's own user.
	user  adapterUser
	users *adapterUsers
	// unreachable says why that user cannot reach the data directory
	// or a workspace root (prepare), nil if it can: every adapter is
	// then refused, saying so.
	unreachable error
}

// newSandbox probes the kernel, says loudly what adapters will get, and
// exports it as acp_runner_sandbox_confined (1 when adapters are confined)
// and acp_runner_sandbox_landlock_abi.
func newSandbox(mode SandboxMode, users *adapterUsers, lg *slog.Logger, reg prometheus.Registerer) *sandbox {
	abi, err := landlockABI()
	s := &sandbox{mode: mode, abi: abi, lg: lg, user: users.base, users: users}
	if mode != SandboxOff {
		s.logPrivileges()
	}
	confined := 0.0
	switch {
	case mode == SandboxOff:
		lg.Info("adapters run unconfined: adapter-runner.sandbox is off")
	case abi > 0:
		confined = 1
		lg.Info("adapters are confined with Landlock", "landlock_abi", abi, "sandbox", string(mode))
	case mode == SandboxRequire:
		lg.Error("this kernel has no Landlock: every adapter will be refused (adapter-runner.sandbox=require); "+
			"enable Landlock (CONFIG_SECURITY_LANDLOCK, lsm=landlock) or run with adapter-runner.sandbox=warn to accept unconfined adapters",
			events.LogKeyErr, err)
	default:
		lg.Error("this kernel has no Landlock: adapters run UNCONFINED, able to read every session's workspace and the runner's data directory (adapter-runner.sandbox=warn)",
			events.LogKeyErr, err)
	}
	if mode != SandboxOff && abi > 0 && abi < landlockNetABI {
		lg.Error("this kernel's Landlock cannot restrict TCP: adapters may listen on any port, where they could take a port Skein or another tenant means to serve on",
			"landlock_abi", abi)
	}
	f := promauto.With(reg)
	f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_sandbox_confined",
		Help: "1 when the runner confines its adapters with Landlock, 0 when they run unconfined or are refused"}).Set(confined)
	f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_sandbox_landlock_abi",
		Help: "the Landlock ABI version of the runner's kernel, 0 when it has none"}).Set(float64(abi))
	return s
}

// command returns the command that starts the adapter at path with args
// under policy: through the launcher unless the mode is off, which runs
// it directly, as the runner runs. Where the kernel has no Landlock and
// the mode lets the adapter run without it, the launcher skips only that
// step: the adapter still holds no privilege, under the seccomp filter.
// It refuses, typed, what the mode requires and the kernel cannot do.
func (s *sandbox) command(agentID, path string, args []string, policy sandboxPolicy) (*exec.Cmd, error) {
	if s == nil || s.mode == SandboxOff {
		return exec.Command(path, args...), nil
	}
	if s.abi == 0 {
		if s.mode == SandboxRequire {
			return nil, events.Errorf(events.CodeAgentUnavailable,
				"agent %s: this runner cannot confine adapters (no Landlock in its kernel) and adapter-runner.sandbox is require", agentID)
		}
		s.lg.Warn("starting an adapter UNCONFINED by Landlock (the kernel has none): it holds no privilege, under the seccomp filter, "+
			"but may read and write whatever its user may", events.LogKeyAgent, agentID)
		policy.NoLandlock, policy.NoNetwork = true, false
	}
	if s.unreachable != nil {
		return nil, events.Errorf(events.CodeAgentUnavailable, "agent %s: %v", agentID, s.unreachable)
	}
	if u := (adapterUser{uid: policy.UID, gid: policy.GID}); u.uid != 0 {
		if err := u.canRun(path); err != nil {
			return nil, events.Errorf(events.CodeAgentUnavailable, "agent %s: its adapter runs as uid %d (adapter-runner.adapter-uid): %v", agentID, u.uid, err)
		}
	}
	if policy.NoNetwork && s.abi < landlockNetABI {
		if s.mode == SandboxRequire {
			return nil, events.Errorf(events.CodeAgentUnavailable,
				"agent %s: its network is denied, which needs Landlock ABI %d; this kernel has %d", agentID, landlockNetABI, s.abi)
		}
		s.lg.Warn("starting an adapter whose network is denied WITH network: the kernel's Landlock cannot restrict it",
			events.LogKeyAgent, agentID, "landlock_abi", s.abi)
		policy.NoNetwork = false
	}
	b, err := json.Marshal(policy)
	if err != nil {
		return nil, err
	}
	return launcherCommand(string(b), path, args), nil
}

// landlockNetABI is the first Landlock ABI that restricts TCP.
const landlockNetABI = 4

// policyFor is the policy of an adapter at path (resolved by lookPath)
// that serves a session of agent with spec (confined: spec.cwd resolved)
// and the session's home and tmp. It creates the agent's write paths.
func policyFor(agent Agent, path string, spec spawnSpec, home, tmp string) (sandboxPolicy, error) {
	p := sandboxPolicy{NoNetwork: agent.Sandbox.Network != nil && !*agent.Sandbox.Network}
	p.Bind, _ = parsePorts(agent.Sandbox.Bind) // checked with the registry
	p.Read = append(p.Read, sandboxSystemPaths...)
	p.Read = append(p.Read, installPaths(path)...)
	for _, s := range scriptPaths(agent.Args, append([]string{spec.dataDir}, spec.roots...)) {
		if err := spec.user.canRead(s.file); err != nil {
			return p, events.Errorf(events.CodeAgentUnavailable,
				"agent %s: its adapter runs as uid %d (adapter-runner.adapter-uid), which cannot read %s, named in its args: %v", agent.ID, spec.user.uid, s.file, err)
		}
		p.Read = append(p.Read, s.grant)
	}
	p.Read = append(p.Read, agent.Sandbox.Read...)
	p.Write = append(p.Write, home, tmp)
	p.Workdirs = workdirFDs(len(spec.held))
	p.UID, p.GID = spec.user.uid, spec.user.gid
	for _, d := range agent.Sandbox.Write {
		if err := spec.user.mkdirOwn(d); err != nil {
			return p, events.Errorf(events.CodeAgentUnavailable, "agent %s: its sandbox write path: %v", agent.ID, err)
		}
		p.Write = append(p.Write, d)
	}
	p.Write = append(p.Write, sandboxDevices...)
	return p, nil
}

// installPaths is what of the agent's install it may read: the file its
// executable resolves to, symlinks followed (an npm install links
// bin/claude-agent-acp to lib/node_modules/…/dist/index.js), or, for a file
// inside a node_modules tree, that whole tree, where its package's
// dependencies lie. Not the executable's directory: a binary in /tmp or in
// a home directory would hand the agent everything beside it, the
// runner's data directory and other sessions' workspaces included. The
// interpreter of a script (node) is not found here: it lies under /usr, or
// in the agent's AgentSandbox.Read, as do an install's other files; the
// script itself is among the agent's args (scriptPaths).
func installPaths(path string) []string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	if i := strings.Index(real, string(filepath.Separator)+"node_modules"+string(filepath.Separator)); i >= 0 {
		return []string{real[:i+len("/node_modules")]}
	}
	return []string{real}
}

// script is a file a registry entry's args name, and what of it the
// adapter may read: the file, or its package (scriptPaths).
type script struct {
	file  string // symlinks resolved
	grant string // file, or the directory of its package
}

// scriptPaths is what the adapter may read of the files its registry
// entry's args name, so that {"command":"node","args":["/…/agent.mjs"]}
// starts: each argument that is an absolute path to an existing regular
// file (symlinks followed), with its package root where it has one
// (packageRoot). Only the entry's own args count: they are the
// operator's, where a session's args (spawnSpec.args) are a tenant's, and
// would otherwise name any file for the sandbox to hand over. protected
// are the runner's data directory and its workspace roots.
func scriptPaths(args []string, protected []string) []script {
	var out []script
	for _, a := range args {
		if !filepath.IsAbs(a) {
			continue
		}
		real, err := filepath.EvalSymlinks(a)
		if err != nil {
			continue
		}
		fi, err := os.Stat(real)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, script{file: real, grant: packageRoot(real, protected, homeDirs())})
	}
	return out
}

// packageRoot is what to grant of file, a script an agent's args name:
// the node_modules tree it lies in, as installPaths grants; else its
// package root, the nearest directory above it holding a package.json,
// where the script's own modules and dependencies lie; else the file
// alone. Never the file's directory for being its directory: the walk up
// stops, and only the file is granted, at the first directory that is or
// contains the runner's data directory or a workspace root (protected),
// that is or contains a home directory (a package.json in $HOME must not
// grant $HOME), that is the temporary directory, or that is /. Those hold
// other sessions' workspaces, the NATS store, the operator's keys. A file
// inside the data directory or a workspace root is granted alone: a
// package.json above it there may be a tenant's.
func packageRoot(file string, protected, homes []string) string {
	for _, p := range protected {
		if p != "" && holds(p, file) {
			return file
		}
	}
	if i := strings.Index(file, string(filepath.Separator)+"node_modules"+string(filepath.Separator)); i >= 0 {
		return file[:i+len("/node_modules")]
	}
	stops := append(append([]string{}, protected...), homes...)
	stops = append(stops, os.TempDir())
	for d := filepath.Dir(file); ; d = filepath.Dir(d) {
		if d == filepath.Dir(d) {
			return file
		}
		for _, s := range stops {
			if s != "" && holds(d, s) {
				return file
			}
		}
		if fi, err := os.Stat(filepath.Join(d, "package.json")); err == nil && fi.Mode().IsRegular() {
			return d
		}
	}
}

// holds reports whether path is dir or lies below it, symlinks of path
// resolved where they can be.
func holds(dir, path string) bool {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// homeDirs are the machine's home directories: the runner's $HOME, /root,
// each directory of /home (users of a directory service are not in
// /etc/passwd), and every user's of /etc/passwd.
func homeDirs() []string {
	homes := []string{"/root"}
	if h, err := os.UserHomeDir(); err == nil {
		homes = append(homes, h)
	}
	if ents, err := os.ReadDir("/home"); err == nil {
		for _, e := range ents {
			homes = append(homes, filepath.Join("/home", e.Name()))
		}
	}
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return homes
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) >= 6 && filepath.IsAbs(f[5]) && f[5] != "/" {
			homes = append(homes, f[5])
		}
	}
	return homes
}

// sandboxSystemPaths are what any adapter may read (and execute): the
// system's programs and libraries, and the few files of /etc that dynamic
// linking, name resolution, TLS and a shell need. /etc as a whole is not
// among them: it holds secrets (shadow, the TLS private keys under
// /etc/ssl/private, the runner's own configuration). Of /proc, only the
// adapter's own directory (/proc/self, opened by the launcher, whose
// process the adapter becomes) and the machine-wide files runtimes read:
// Landlock's ptrace rule keeps another process's memory out of reach, but
// not its environ or cmdline (PTRACE_MODE_READ), which hold the runner's
// and other sessions' secrets. So the processes an adapter spawns cannot
// read their own /proc/<pid> either; /proc/self of a tool it runs is
// denied.
var sandboxSystemPaths = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload",
	"/etc/nsswitch.conf", "/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf",
	"/etc/services", "/etc/protocols", "/etc/passwd", "/etc/group",
	"/etc/localtime", "/etc/timezone", "/etc/os-release", "/etc/mime.types",
	"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/ca-certificates.conf",
	"/etc/pki/tls/certs", "/etc/pki/ca-trust", "/etc/crypto-policies",
	"/etc/alternatives", "/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/inputrc",
	"/etc/gitconfig", "/etc/terminfo",
	"/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/loadavg", "/proc/uptime",
	"/proc/version", "/proc/filesystems", "/proc/sys",
	"/sys/fs/cgroup", "/sys/devices/system/cpu",
}

// sandboxDevices are the device files any adapter may read and write.
// /dev/pts and /dev/shm are not among them: they are shared by every
// process of the machine, a channel between sessions.
var sandboxDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
