package adapterrunner

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"skein.dev/internal/defaults"
	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// Agent is one entry of the agent registry: how to start an ACP adapter.
type Agent struct {
	ID      string            `json:"id"`
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// AuthMethod, when set, is sent as ACP authenticate (one of the
	// agent's advertised authMethods ids, e.g. codex-acp's
	// "openai-api-key") after initialize and before the session opens.
	AuthMethod string `json:"authMethod,omitempty"`
	// AllowEnv names the environment variables a session may set for
	// this agent: names, or prefixes ending in "*" ("MY_*"). A session
	// setting any other is refused invalid_request; none listed means a
	// session sets none (workspace.CheckEnv). Env above is the
	// operator's, not limited by it.
	AllowEnv []string `json:"allowEnv,omitempty"`
	// Sandbox widens what the agent's adapter may reach under the
	// runner's sandbox (sandbox.go): by default only the system, its own
	// executable (or node_modules tree), the scripts Args names (with
	// their packages), and its session's directories.
	Sandbox AgentSandbox `json:"sandbox,omitzero"`
	// Limits, where set, replace the runner's limits for this agent's
	// adapters (cgroup.go): {"memoryBytes", "pids", "cpuWeight",
	// "diskBytes"}.
	Limits Limits `json:"limits,omitzero"`
}

// AgentSandbox is what an agent's adapter may reach beyond the default.
// Paths are absolute, or start with "~/" for the runner user's home (not
// the session's isolated HOME), and are shared by every session of the
// agent: a path that holds one session's state exposes it to the others.
type AgentSandbox struct {
	// Read are files and directories the adapter may read and execute:
	// an install directory outside /usr (node under ~/.nvm, say) or the
	// operator's agent configuration (~/.claude, ~/.codex, ~/.gemini).
	Read []string `json:"read,omitempty"`
	// Write are directories the adapter may also write: state an agent
	// keeps outside its HOME. The runner creates them (0700) if missing.
	Write []string `json:"write,omitempty"`
	// Network, when false, denies the adapter TCP connect and bind (on
	// kernels with Landlock ABI 4 or later; the runner refuses the agent
	// under adapter-runner.sandbox=require on older ones). Unset means
	// allowed: real adapters talk to their model's API.
	Network *bool `json:"network,omitempty"`
	// Bind are the TCP ports the adapter may listen on, each a port
	// ("8080") or a range ("3000-3999"), for agents that run dev servers:
	// by default it may bind none (Landlock ABI 4 and later). UDP is not
	// covered.
	Bind []string `json:"bind,omitempty"`
}

// Registry is the agents file: {"agents":[{"id":…,"command":…,"args":[…],"env":{…},"allowEnv":[…]}]}.
type Registry struct {
	Agents []Agent `json:"agents"`
}

// LoadRegistry reads an agents file. Unknown fields are errors, so a typo in
// the file does not silently drop a setting.
func LoadRegistry(path string) (Registry, error) {
	f, err := os.Open(path)
	if err != nil {
		return Registry{}, fmt.Errorf("agents file: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var r Registry
	if err := dec.Decode(&r); err != nil {
		return Registry{}, fmt.Errorf("agents file %s: %w", path, err)
	}
	return r, r.validate()
}

func (r Registry) validate() error {
	seen := map[string]bool{}
	for _, a := range r.Agents {
		if !events.SessionID(a.ID).Valid() {
			return fmt.Errorf("agent ID %q must match [A-Za-z0-9_-]{1,128}", a.ID)
		}
		if a.Command == "" {
			return fmt.Errorf("agent %s: empty command", a.ID)
		}
		for _, pat := range a.AllowEnv {
			if name, _ := strings.CutSuffix(pat, "*"); name == "" && pat != "*" || strings.ContainsAny(name, "=*\x00") {
				return fmt.Errorf("agent %s: allowEnv %q must be a variable name, or a prefix ending in *", a.ID, pat)
			}
		}
		for _, p := range append(slices.Clip(a.Sandbox.Read), a.Sandbox.Write...) {
			if !filepath.IsAbs(p) && !strings.HasPrefix(p, "~/") {
				return fmt.Errorf("agent %s: sandbox path %q must be absolute or start with ~/", a.ID, p)
			}
		}
		if _, err := parsePorts(a.Sandbox.Bind); err != nil {
			return fmt.Errorf("agent %s: sandbox bind: %w", a.ID, err)
		}
		if err := a.Limits.validate(); err != nil {
			return fmt.Errorf("agent %s: limits: %w", a.ID, err)
		}
		if seen[a.ID] {
			return fmt.Errorf("agent %s listed twice", a.ID)
		}
		seen[a.ID] = true
	}
	return nil
}

// DefaultCreateTimeout is Config.CreateTimeout's default: half the session
// service's default session.attach-timeout, which must be the longer.
const DefaultCreateTimeout = 30 * time.Second

// DefaultCapacity is the adapters a runner hosts at once unless configured.
// It is the capacity benchmark's knee on the 2-core machines Skein is
// tested on (test BenchmarkCapacitySweep: the most sessions streaming
// 50 chunks a second whose live delta p99 stays under 50 ms, the agents
// running on the same machine), which measured between 40 and 160: past
// it, one more session slows every session on the runner, and refusing it
// (agent_unavailable) sends it to another runner instead. A bigger machine
// raises it with adapter-runner.capacity, after running the benchmark.
const DefaultCapacity = 64

// Config configures a Runner. RegisterFlags holds every default
// (DefaultConfig); New takes them for the fields a Config built in code
// leaves zero (WithDefaults).
type Config struct {
	// ID names this runner on NATS; it must be unique among runners. By
	// default it is the host name, made a valid ID.
	ID string
	// AgentsFile is the registry file (flag adapter-runner.agents, env SKEIN_AGENTS).
	AgentsFile string
	// Builtin agents are known without a registry file; a file entry with
	// the same ID wins. skein wires the test agent here as "test" and "demo".
	Builtin []Agent
	// DataDir holds a directory per session with its isolated HOME and
	// TMPDIR, the default workspace root (WorkspaceRoots), and the record of the adapters
	// running (.adapters), by which a runner started on it after one that
	// was killed kills what that one left running (leftovers.go).
	DataDir string
	// WorkspaceRoots are the directories adapters may work in (flag
	// adapter-runner.workspace-roots, comma-separated; by default
	// <DataDir>/workspaces). A session's cwd and additional directories
	// must lie under <root>/<namespace> for one of them (or a grant),
	// symlinks resolved, or its adapter is not launched
	// (workspace.Roots.Check); a session without a cwd works in
	// <first root>/<namespace>/<session ID>, created at launch.
	WorkspaceRoots workspace.Roots
	// WorkspaceGrants are the directories, per namespace, its sessions
	// may work under besides <root>/<namespace> (flag
	// adapter-runner.workspace-grants, "ns=/dir,ns=/other"). Nothing else
	// lets a session work in the root itself or in another namespace's
	// directory.
	WorkspaceGrants workspace.Grants
	// Labels describe this runner to placement: a session opened with
	// "placement": {"labels": {...}} is pinned to a runner that has them
	// all (flag adapter-runner.label, k=v, repeated or comma-separated).
	Labels map[string]string
	// PlacedOnly makes the runner host only sessions placed on it: an
	// edge runner (skein runner --join) takes no session of the cluster's
	// by default. Such a runner serves no request of the namespaces' API
	// either (list_directories): its workspace is its own machine's, for
	// the sessions placed there.
	PlacedOnly bool
	// JetStreamDomain, when set, is the domain of the cluster's JetStream,
	// for a runner that reaches the cluster through a leaf node (skein
	// runner --join): across a leaf, the cluster answers no JetStream API
	// request and takes no $KV write of the account unless it names the
	// domain. Such a runner checks no stream at start and writes its
	// heartbeat through the domain (events.KVSubjectInDomain); its ACP_IO
	// records are plain publishes, which cross the leaf as they are. No
	// flag sets it.
	JetStreamDomain string
	// Outbox, when set, keeps the runner's records on its own disk until
	// the hub stores them (an edge runner, outbox.go).
	Outbox *OutboxConfig
	// Capacity is how many adapters this runner hosts at once; past it, a
	// create is refused agent_unavailable ("runner r1 full: 64 of 64
	// adapters"), so that a new session goes to another runner rather
	// than slowing every session here. The default, DefaultCapacity, is
	// chosen from what one runner's machine sustains (docs/design/capacity.md).
	Capacity int
	// Heartbeat is how often the runner refreshes its ACP_RUNNERS entry.
	Heartbeat time.Duration
	// StopGrace bounds each step of stopping an adapter: stdin closed, then
	// SIGTERM to its process group, then SIGKILL.
	StopGrace time.Duration
	// CreateTimeout bounds spawning an adapter and opening or restoring
	// its ACP session. It must be shorter than the session service's
	// session.attach-timeout (60 s by default), which bounds the same
	// request from the caller's side: an agent that never answers is then
	// reported by the runner, with what the agent wrote (its first lines
	// that are not ACP, the tail of its stderr), and not as a bare
	// timeout of the request.
	CreateTimeout time.Duration
	// MaxLineBytes is the longest ACP line accepted from an adapter.
	MaxLineBytes int
	// MaxStderrBytes bounds the stderr forwarded per adapter (the rest is
	// counted and dropped).
	MaxStderrBytes int64
	// Replicas of the streams this runner provisions.
	Replicas int
	// IOWindowRecords and IOWindowBytes bound, per adapter, the ACP_IO
	// records handed to NATS and not yet acknowledged as stored, and
	// their payload bytes (iowindow.go). A full window stops the runner
	// reading that adapter's output until the stream stores what it
	// holds: the adapter then blocks on its pipe, and nothing is dropped.
	IOWindowRecords int
	IOWindowBytes   int
	// OSInstructionsFile holds the operator's OS instructions: text every
	// agent is given as appended system prompt, unless its session was
	// opened with skipOsInstructions. Empty means none. New reads it once.
	OSInstructionsFile string
	// Sandbox says what to do about confining adapters (sandbox.go):
	// SandboxRequire confines every adapter with Landlock and refuses to
	// start one where the kernel cannot; SandboxWarn confines them where
	// it can and runs them unconfined, with a warning, where it cannot;
	// SandboxOff runs them unconfined. The flag defaults to require; the
	// zero value, for embedders and tests whose adapters need what the
	// sandbox denies, is off.
	Sandbox SandboxMode
	// AdapterUID and AdapterGID are the user and group a runner started
	// as root runs its adapters as, unless Sandbox is off (adapteruser.go;
	// flags adapter-runner.adapter-uid and adapter-runner.adapter-gid). 0
	// means the default: DefaultAdapterUID, and for the group the uid.
	// A runner not started as root runs them as itself.
	AdapterUID, AdapterGID int
	// AdapterUIDRange, when positive, gives each namespace's adapters a
	// uid of their own among the AdapterUIDRange from AdapterUID (flag
	// adapter-runner.adapter-uid-range; 0, the default: AdapterUID for
	// every namespace).
	AdapterUIDRange int
	// Protected are paths no agent may reach, which the sandbox cannot
	// keep from one whose working directory holds them or lies in them
	// (protect.go): skein dev's data. Such a session is refused, started
	// with a warning or started, as Sandbox says. No flag sets it.
	Protected []string

	// FileMaxBytes bounds one uploaded file, FileTransferTTL how long an
	// upload may go without a write before it is removed, and
	// FileEmbedMaxBytes the largest upload a prompt embeds (files.go,
	// attachments.go). Zero means the default.
	FileMaxBytes      int64
	FileTransferTTL   time.Duration
	FileEmbedMaxBytes int64
	// FileOps and FileOpsPerSession bound the file ops in flight on the
	// runner and per session (a prompt's attachment reads among them),
	// and FileOpTimeout how long a request waits for one (fileops.go).
	// UploadsPerPrincipal and UploadsPerNamespace bound the uploads in
	// progress of one principal and of one namespace (files.go). Zero
	// means the default.
	FileOps             int
	FileOpsPerSession   int
	FileOpTimeout       time.Duration
	UploadsPerPrincipal int
	UploadsPerNamespace int

	// MemoryMaxBytes, PidsMax and CPUWeight limit each adapter's cgroup,
	// with everything it spawns; DiskMaxBytes bounds how much its
	// session's directories may grow while it runs, measured every
	// DiskWatchInterval (cgroup.go). Zero means the default
	// (DefaultMemoryBytes, DefaultPids, CPUWeightNormal,
	// DefaultDiskBytes, 30s); a negative value means no limit. An agent's
	// registry entry may replace them (Agent.Limits).
	MemoryMaxBytes    int64
	PidsMax           int64
	CPUWeight         int64
	DiskMaxBytes      int64
	DiskWatchInterval time.Duration
}

// DefaultDiskWatchInterval is how often a session's directories are
// measured by default: a walk of a large workspace takes a moment of one
// core, and a runaway writing 1 GiB a second still stops within about 30
// GiB past the limit's start.
const DefaultDiskWatchInterval = 30 * time.Second

// limits are the runner's limits, as WithDefaults leaves them.
func (c *Config) limits() Limits {
	pos := func(v int64) int64 { return max(v, 0) }
	return Limits{MemoryBytes: pos(c.MemoryMaxBytes), Pids: pos(c.PidsMax), CPUWeight: pos(c.CPUWeight), DiskBytes: pos(c.DiskMaxBytes)}
}

// RegisterFlags registers the runner's flags in fs, prefixed "adapter-runner.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.ID, "adapter-runner.id", sanitizeID(host), "runner ID, unique among runners")
	fs.StringVar(&c.AgentsFile, "adapter-runner.agents", "", "agent registry file (JSON: {\"agents\":[{\"id\",\"command\",\"args\",\"env\",\"allowEnv\"}]}); env SKEIN_AGENTS")
	fs.StringVar(&c.DataDir, "adapter-runner.data-dir", filepath.Join(os.TempDir(), "skein-runner"), "directory for per-session HOME and TMPDIR, the default workspace root (<data-dir>/workspaces), and the record of running adapters by which a restarted runner kills what a killed one left")
	fs.Var(&c.WorkspaceRoots, "adapter-runner.workspace-roots", "comma-separated directories adapters may work in; a session's cwd and additionalDirectories must lie under <root>/<namespace> for one of them (default <adapter-runner.data-dir>/workspaces)")
	fs.Var(labelsFlag{&c.Labels}, "adapter-runner.label", "a label of this runner for placement, k=v; repeat the flag, or separate labels with commas (a session opened with \"placement\": {\"labels\": {...}} goes to a runner with them all)")
	fs.Var(&c.WorkspaceGrants, "adapter-runner.workspace-grants", "comma-separated namespace=directory pairs: directories a namespace's sessions may work under besides <root>/<namespace> (none by default)")
	fs.Int64Var(&c.FileMaxBytes, "adapter-runner.file-max-bytes", events.DefaultMaxFileBytes, "largest file a session may upload")
	fs.DurationVar(&c.FileTransferTTL, "adapter-runner.file-transfer-ttl", defaultTransferTTL, "an upload not written for this long is abandoned and removed")
	fs.Int64Var(&c.FileEmbedMaxBytes, "adapter-runner.file-embed-max-bytes", events.DefaultEmbedMaxBytes, "largest upload a prompt embeds for an agent that takes embedded context (larger ones go as links)")
	fs.IntVar(&c.FileOps, "adapter-runner.file-ops", DefaultFileOps, "most file ops (list, read, upload chunk, a prompt's attachment read) in flight on the runner; more are refused rate_limited")
	fs.IntVar(&c.FileOpsPerSession, "adapter-runner.file-ops-per-session", DefaultFileOpsPerSession, "most file ops in flight per session; more are refused rate_limited")
	fs.DurationVar(&c.FileOpTimeout, "adapter-runner.file-op-timeout", DefaultFileOpTimeout, "longest a file op is waited for: a slower one is answered timeout (it keeps its slot until it ends), and a prompt's attachment goes as a link")
	fs.IntVar(&c.UploadsPerPrincipal, "adapter-runner.uploads-per-principal", DefaultUploadsPerPrincipal, "most uploads in progress on the runner for one principal (the token's name)")
	fs.IntVar(&c.UploadsPerNamespace, "adapter-runner.uploads-per-namespace", DefaultUploadsPerNamespace, "most uploads in progress on the runner for one namespace")
	fs.IntVar(&c.Capacity, "adapter-runner.capacity", DefaultCapacity, "adapters hosted at once; past it a session is refused agent_unavailable (see docs/design/capacity.md)")
	fs.DurationVar(&c.Heartbeat, "adapter-runner.heartbeat", 5*time.Second, "heartbeat interval in ACP_RUNNERS")
	fs.DurationVar(&c.StopGrace, "adapter-runner.stop-grace", 2*time.Second, "grace for each step of stopping an adapter")
	fs.DurationVar(&c.CreateTimeout, "adapter-runner.create-timeout", DefaultCreateTimeout,
		"bound on spawning an adapter and opening or restoring its ACP session; keep it below session.attach-timeout (60s by default), so that an agent that never answers is reported with what it wrote rather than as a timeout of the caller's request")
	fs.IntVar(&c.MaxLineBytes, "adapter-runner.max-line-bytes", 16<<20, "longest ACP line accepted from an adapter")
	fs.Int64Var(&c.MaxStderrBytes, "adapter-runner.max-stderr-bytes", 1<<20, "stderr forwarded per adapter")
	fs.IntVar(&c.IOWindowRecords, "adapter-runner.io-window-records", DefaultIOWindowRecords, "ACP_IO records per adapter in flight (not yet acknowledged); a full window stops reading that adapter's output")
	fs.IntVar(&c.IOWindowBytes, "adapter-runner.io-window-bytes", DefaultIOWindowBytes, "payload bytes of the ACP_IO records per adapter in flight; a full window stops reading that adapter's output")
	fs.Int64Var(&c.MemoryMaxBytes, "adapter-runner.memory-max-bytes", DefaultMemoryBytes, "memory of each adapter's cgroup, with everything it spawns; past it the kernel OOM-kills one of its processes (-1: no limit)")
	fs.Int64Var(&c.PidsMax, "adapter-runner.pids-max", DefaultPids, "processes and threads of each adapter's cgroup; past it fork fails EAGAIN (-1: no limit)")
	fs.Int64Var(&c.CPUWeight, "adapter-runner.cpu-weight", CPUWeightNormal, "CPU share of each adapter's cgroup, 1 to 10000 (cgroup v2 cpu.weight; 100, the default, is an ordinary process's; v1 gets cpu.shares scaled from it)")
	fs.Int64Var(&c.DiskMaxBytes, "adapter-runner.disk-max-bytes", DefaultDiskBytes, "how much a session's directories may grow while its adapter runs; past it the adapter is stopped (-1: no limit)")
	fs.DurationVar(&c.DiskWatchInterval, "adapter-runner.disk-watch-interval", DefaultDiskWatchInterval, "how often each session's directories are measured against adapter-runner.disk-max-bytes")
	c.Sandbox = SandboxRequire
	fs.Func("adapter-runner.sandbox", "confine adapters with Landlock: require (refuse adapters where the kernel lacks it), warn (run them unconfined there, with a warning) or off (default require)", func(s string) error {
		c.Sandbox = SandboxMode(s)
		return c.Sandbox.validate()
	})
	fs.IntVar(&c.AdapterUID, "adapter-runner.adapter-uid", DefaultAdapterUID, "user ID a runner started as root runs its adapters as (unless adapter-runner.sandbox is off); the directories it makes for a session are theirs, a user's own cwd keeps its owner")
	fs.IntVar(&c.AdapterGID, "adapter-runner.adapter-gid", 0, "group ID of the adapters of a runner started as root (default: adapter-runner.adapter-uid)")
	fs.IntVar(&c.AdapterUIDRange, "adapter-runner.adapter-uid-range", 0, "when positive, each namespace's adapters of a runner started as root run as a uid of their own among this many from adapter-runner.adapter-uid, claimed in the data directory (0: adapter-runner.adapter-uid for all)")
	fs.StringVar(&c.OSInstructionsFile, "adapter-runner.os-instructions-file", "", "file of OS instructions appended to every agent's system prompt unless its session skips them (read at start)")
}

// DefaultConfig returns the configuration RegisterFlags installs before
// any flag is parsed.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("adapter-runner", flag.ContinueOnError))
	return c
}

// WithDefaults returns c with RegisterFlags' default in each field left
// zero, and with what follows from other fields where they leave it
// open: the workspace root <DataDir>/workspaces, the adapters' group
// their user's. A zero Sandbox is off (RegisterFlags' is require), and a
// zero DataDir, AgentsFile or OSInstructionsFile stays zero.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	defaults.Set(&c.ID, d.ID)
	defaults.Set(&c.Capacity, d.Capacity)
	defaults.Set(&c.Heartbeat, d.Heartbeat)
	defaults.Set(&c.StopGrace, d.StopGrace)
	defaults.Set(&c.CreateTimeout, d.CreateTimeout)
	defaults.Set(&c.MaxLineBytes, d.MaxLineBytes)
	defaults.Set(&c.MaxStderrBytes, d.MaxStderrBytes)
	defaults.Set(&c.IOWindowRecords, d.IOWindowRecords)
	defaults.Set(&c.IOWindowBytes, d.IOWindowBytes)
	defaults.Set(&c.FileMaxBytes, d.FileMaxBytes)
	defaults.Set(&c.FileTransferTTL, d.FileTransferTTL)
	defaults.Set(&c.FileEmbedMaxBytes, d.FileEmbedMaxBytes)
	defaults.Set(&c.FileOps, d.FileOps)
	defaults.Set(&c.FileOpsPerSession, d.FileOpsPerSession)
	defaults.Set(&c.FileOpTimeout, d.FileOpTimeout)
	defaults.Set(&c.UploadsPerPrincipal, d.UploadsPerPrincipal)
	defaults.Set(&c.UploadsPerNamespace, d.UploadsPerNamespace)
	defaults.Set(&c.MemoryMaxBytes, d.MemoryMaxBytes)
	defaults.Set(&c.PidsMax, d.PidsMax)
	defaults.Set(&c.CPUWeight, d.CPUWeight)
	defaults.Set(&c.DiskMaxBytes, d.DiskMaxBytes)
	defaults.Set(&c.DiskWatchInterval, d.DiskWatchInterval)
	defaults.Set(&c.AdapterUID, d.AdapterUID)
	defaults.Set(&c.AdapterGID, c.AdapterUID)
	defaults.Set(&c.Sandbox, SandboxOff)
	if len(c.WorkspaceRoots) == 0 && c.DataDir != "" {
		if dir, err := filepath.Abs(c.DataDir); err == nil {
			c.WorkspaceRoots = workspace.Roots{filepath.Join(dir, "workspaces")}
		}
	}
	return c
}

// Validate reports every invalid field; it changes nothing. New validates
// c.WithDefaults().
func (c *Config) Validate() error {
	var errs []error
	if !events.RunnerID(c.ID).Valid() {
		errs = append(errs, fmt.Errorf("adapter-runner.id %q must match [A-Za-z0-9_-]{1,128}", c.ID))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("adapter-runner.data-dir must be set"))
	}
	if len(c.WorkspaceRoots) == 0 {
		errs = append(errs, errors.New("adapter-runner.workspace-roots must name a directory (by default <adapter-runner.data-dir>/workspaces)"))
	} else if err := c.WorkspaceRoots.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("adapter-runner.workspace-roots: %w", err))
	}
	if err := c.WorkspaceGrants.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("adapter-runner.workspace-grants: %w", err))
	}
	for k, v := range c.Labels {
		if err := checkLabel(k, v); err != nil {
			errs = append(errs, fmt.Errorf("adapter-runner.label: %w", err))
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"capacity", int64(c.Capacity)},
		{"max-line-bytes", int64(c.MaxLineBytes)},
		{"max-stderr-bytes", c.MaxStderrBytes},
		{"io-window-records", int64(c.IOWindowRecords)},
		{"io-window-bytes", int64(c.IOWindowBytes)},
		{"file-max-bytes", c.FileMaxBytes},
		{"file-embed-max-bytes", c.FileEmbedMaxBytes},
		{"file-ops", int64(c.FileOps)},
		{"file-ops-per-session", int64(c.FileOpsPerSession)},
		{"uploads-per-principal", int64(c.UploadsPerPrincipal)},
		{"uploads-per-namespace", int64(c.UploadsPerNamespace)},
	} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("adapter-runner.%s must be positive, got %d", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"heartbeat", c.Heartbeat},
		{"stop-grace", c.StopGrace},
		{"create-timeout", c.CreateTimeout},
		{"file-transfer-ttl", c.FileTransferTTL},
		{"file-op-timeout", c.FileOpTimeout},
		{"disk-watch-interval", c.DiskWatchInterval},
	} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("adapter-runner.%s must be positive, got %v", f.name, f.v))
		}
	}
	if err := c.limits().validate(); err != nil {
		errs = append(errs, fmt.Errorf("adapter-runner limits: %w", err))
	}
	if err := c.Sandbox.validate(); err != nil {
		errs = append(errs, fmt.Errorf("adapter-runner.sandbox: %w", err))
	}
	switch {
	case c.AdapterUID <= 0 || c.AdapterGID <= 0 || c.AdapterUIDRange < 0:
		errs = append(errs, fmt.Errorf("adapter-runner.adapter-uid %d, adapter-gid %d and adapter-uid-range %d: want the uid and gid positive, the range not negative", c.AdapterUID, c.AdapterGID, c.AdapterUIDRange))
	case c.AdapterUID+max(c.AdapterUIDRange, 1)-1 > math.MaxUint32-1: // (uid_t)-1 is no uid
		errs = append(errs, fmt.Errorf("adapter-runner.adapter-uid %d with adapter-uid-range %d passes the last uid", c.AdapterUID, c.AdapterUIDRange))
	}
	return errors.Join(errs...)
}

// agents merges the built-in agents with the registry file.
func (c *Config) agents() (map[string]Agent, error) {
	out := map[string]Agent{}
	for _, a := range c.Builtin {
		out[a.ID] = a
	}
	if c.AgentsFile != "" {
		r, err := LoadRegistry(c.AgentsFile)
		if err != nil {
			return nil, err
		}
		for _, a := range r.Agents {
			out[a.ID] = a
		}
	}
	home, _ := os.UserHomeDir()
	for id, a := range out {
		a.Sandbox.Read = expandHome(home, a.Sandbox.Read)
		a.Sandbox.Write = expandHome(home, a.Sandbox.Write)
		out[id] = a
	}
	return out, nil
}

// osInstructions reads the OS instructions file: its text without leading
// and trailing white space (a file's final newline is no instruction).
func (c *Config) osInstructions() (string, error) {
	if c.OSInstructionsFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.OSInstructionsFile)
	if err != nil {
		return "", fmt.Errorf("adapter-runner.os-instructions-file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// lookPath resolves a's command as the runner starts it: a name on the
// runner's PATH, or a path to an executable file. An error means the agent
// is not installed on this machine.
func (a Agent) lookPath() (string, error) { return exec.LookPath(a.Command) }

// installed reports whether a's command resolves on this machine.
func installed(a Agent) bool {
	_, err := a.lookPath()
	return err == nil
}

// expandHome returns paths with a leading "~/" replaced by home, the
// runner user's home directory. Without a home, "~/" paths are dropped:
// they name nothing the sandbox could grant.
func expandHome(home string, paths []string) []string {
	var out []string
	for _, p := range paths {
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			if home == "" {
				continue
			}
			p = filepath.Join(home, rest)
		}
		out = append(out, filepath.Clean(p))
	}
	return out
}

func sanitizeID(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "runner"
	}
	if len(b) > 128 {
		b = b[:128]
	}
	return string(b)
}

// labelsFlag is adapter-runner.label: each k=v it is given, alone or in
// a comma-separated list, is added to the map (a key given twice keeps
// its last value).
type labelsFlag struct{ m *map[string]string }

func (f labelsFlag) String() string {
	if f.m == nil {
		return ""
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(*f.m)) {
		out = append(out, k+"="+(*f.m)[k])
	}
	return strings.Join(out, ",")
}

func (f labelsFlag) Set(list string) error {
	for kv := range strings.SplitSeq(list, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return fmt.Errorf("label %q: want key=value", kv)
		}
		if err := checkLabel(k, v); err != nil {
			return err
		}
		if *f.m == nil {
			*f.m = map[string]string{}
		}
		(*f.m)[k] = v
	}
	return nil
}

// checkLabel refuses a label a flag could not give back: an empty key,
// or one holding '=', a comma or white space, and a value holding a comma
// or a control character. What a placement may ask for is the session
// service's to say; this keeps only the runner's own flag unambiguous.
func checkLabel(k, v string) error {
	if k == "" || strings.ContainsFunc(k, func(r rune) bool { return r == '=' || r == ',' || unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return fmt.Errorf("label key %q: want a word without '=', ',' or white space", k)
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r == ',' || unicode.IsControl(r) }) {
		return fmt.Errorf("label %s: value %q holds a comma or a control character", k, v)
	}
	return nil
}
