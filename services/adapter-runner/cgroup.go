package adapterrunner

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"skein.dev/pkg/events"
)

// Containment. Each adapter runs in cgroups of its own, named under a
// directory scoped to its runner (cgroupScope), so that everything it
// spawns, setsid or not, is found again and killed with it: when it is
// stopped (delete, unload, the runner's stop), when it exits, and, should
// the runner be killed, by the next runner started on the same data
// directory with the same ID, which kills and removes every cgroup of its
// scope before it hosts anything. The same cgroups carry the adapter's
// limits (Limits): memory, processes and CPU weight. The kernel tells an
// agent that meets one (fork fails EAGAIN, the OOM killer), and the runner
// records it in the session's log (AdapterLimitHit) and counts it
// (acp_runner_limit_hits_total).
//
// A machine offers cgroup v2, v1, or both (cgroup_linux.go finds what):
// v2's cgroup.kill ends a cgroup's processes at once; on v1 they are frozen
// (freezer), killed and thawed. The limits go wherever their controller
// is: v2 (memory.max, pids.max, cpu.weight) or v1 (memory.limit_in_bytes,
// pids.max, cpu.shares). What cannot be had is said at start, and exported
// as acp_runner_cgroup_contained and acp_runner_cgroup_limits{kind}.

// Limits are what one adapter, with everything it spawns, may use. Zero
// means no limit (CPUWeight: the normal share).
type Limits struct {
	// MemoryBytes bounds the memory of the adapter's cgroup: past it,
	// the kernel reclaims, then OOM-kills a process of the cgroup.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// Pids bounds its processes and threads: past it, fork and clone fail
	// EAGAIN.
	Pids int64 `json:"pids,omitempty"`
	// CPUWeight is its share of CPU time against other cgroups (cgroup
	// v2's cpu.weight, 1 to 10000; CPUWeightNormal is the share every
	// process of the machine has by default).
	CPUWeight int64 `json:"cpuWeight,omitempty"`
	// DiskBytes bounds how much its session's directories (working
	// directory, additional directories, HOME, TMPDIR) may grow while it
	// runs; the runner measures them every DiskWatchInterval, and stops
	// an adapter past it (disk.go).
	DiskBytes int64 `json:"diskBytes,omitempty"`
}

// The default limits, each far past what a coding agent running a real
// build meets and well short of what a runaway takes a machine down with.
const (
	// DefaultMemoryBytes: a large TypeScript or Rust build with its
	// language server peaks at a few GiB.
	DefaultMemoryBytes = 8 << 30
	// DefaultPids: make -j with compilers, a test runner's workers and a
	// node process's threads stay in the low hundreds.
	DefaultPids = 1024
	// CPUWeightNormal is cgroup v2's default cpu.weight (v1's cpu.shares
	// 1024): an adapter competes for CPU as one ordinary process tree
	// would, never ahead of the runner.
	CPUWeightNormal = 100
	// DefaultDiskBytes: a workspace with its dependencies and a build's
	// output (node_modules, a Rust target directory of a large project)
	// grows by a few GiB, rarely past 10; 32 GiB written in one adapter's
	// life is a runaway.
	DefaultDiskBytes = 32 << 30
)

// The kinds of limit hits: the values of acp_runner_limit_hits_total's
// kind label and of AdapterLimitHit.Kind.
const (
	limitMemory = events.LimitMemory
	limitPids   = events.LimitPids
	limitDisk   = events.LimitDisk
)

var limitKinds = []string{limitMemory, limitPids, limitDisk}

// v2Limits are the controllers the runner sets limits with, as cgroup v2
// names them; v1 names them the same.
var v2Limits = []string{"memory", "pids", "cpu"}

// over returns lim with each field of o that is set in place of its own:
// a registry entry's limits over the runner's.
func (lim Limits) over(o Limits) Limits {
	if o.MemoryBytes != 0 {
		lim.MemoryBytes = o.MemoryBytes
	}
	if o.Pids != 0 {
		lim.Pids = o.Pids
	}
	if o.CPUWeight != 0 {
		lim.CPUWeight = o.CPUWeight
	}
	if o.DiskBytes != 0 {
		lim.DiskBytes = o.DiskBytes
	}
	return lim
}

func (lim Limits) validate() error {
	switch {
	case lim.MemoryBytes < 0:
		return fmt.Errorf("memory limit %d: want a size in bytes, or 0 for none", lim.MemoryBytes)
	case lim.Pids < 0:
		return fmt.Errorf("process limit %d: want a count, or 0 for none", lim.Pids)
	case lim.CPUWeight < 0 || lim.CPUWeight > 10000:
		return fmt.Errorf("CPU weight %d: want 1 to 10000 (%d is the normal share)", lim.CPUWeight, CPUWeightNormal)
	case lim.DiskBytes < 0:
		return fmt.Errorf("disk limit %d: want a size in bytes, or 0 for none", lim.DiskBytes)
	}
	return nil
}

// cgroupScope names the directory, in each cgroup hierarchy, under which a
// runner makes its adapters' cgroups: one per data directory and runner
// ID, so that runners and test runs sharing a machine never touch each
// other's, while a runner started again after being killed finds its
// predecessor's.
func cgroupScope(dataDir, runnerID string) string {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		dir = dataDir
	}
	sum := sha256.Sum256([]byte(dir + "\x00" + runnerID))
	return "skein-" + hex.EncodeToString(sum[:8])
}

// cgroupName is the name of an adapter's cgroup inside its runner's
// scope: a digest of its session and process ID (the session service
// chooses process IDs per session, so that two sessions' adapters may
// share one).
func cgroupName(ns events.Namespace, sid events.SessionID, processID string) string {
	sum := sha256.Sum256([]byte(string(ns) + "\x00" + string(sid) + "\x00" + processID))
	return "a-" + hex.EncodeToString(sum[:12])
}
