package adapterrunner

import (
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// containment is the runner's view of its adapters' cgroups (cgroup.go):
// what the machine gives, the runner's limits, and the count of hits.
type containment struct {
	host      *cgroupHost
	lg        *slog.Logger
	limits    Limits
	diskEvery time.Duration
	hitsTotal *prometheus.CounterVec
}

// newContainment finds the machine's cgroups, says plainly what adapters
// will be contained and limited by and what not, and exports it as
// acp_runner_cgroup_contained (1 when an adapter's processes are killed
// together, setsid or not) and acp_runner_cgroup_limits{kind} (1 for each
// limit that can be set).
func newContainment(lg *slog.Logger, cfg Config, reg prometheus.Registerer) *containment {
	scope := cgroupScope(cfg.DataDir, cfg.ID)
	c := &containment{host: findCgroups(lg, scope), lg: lg, limits: cfg.limits(), diskEvery: cfg.DiskWatchInterval}
	f := promauto.With(reg)
	c.hitsTotal = f.NewCounterVec(prometheus.CounterOpts{Name: "acp_runner_limit_hits_total",
		Help: "Limits adapters met, by kind: memory (processes the OOM killer ended in an adapter's cgroup), pids (forks refused at the process limit), disk (sessions whose directories grew past the watched size; the adapter is stopped)."},
		[]string{"kind"})
	for _, k := range limitKinds {
		c.hitsTotal.WithLabelValues(k)
	}
	contained := 0.0
	if how := c.host.contained(); how != "" {
		contained = 1
		lg.Info("each adapter runs in cgroups of its own: stopping it kills every process it spawned, and a runner started after one that was killed kills what that one left",
			"kill", how, "scope", scope)
		if !c.host.fromBirth() {
			lg.Warn("adapters join their cgroups just after they start (cgroup v1 only): a process an adapter forks in its first instant escapes them; with the sandbox on, the launcher joins them before the adapter runs")
		}
	} else {
		lg.Error("adapters are NOT contained: this machine gives the runner no cgroup it may write. " +
			"A process an adapter spawns in a session of its own (setsid) outlives the adapter, its session and the runner; " +
			"only the adapter's process group is killed, and a runner killed with SIGKILL leaves what it recorded to the next (leftovers.go)")
	}
	limits := f.NewGaugeVec(prometheus.GaugeOpts{Name: "acp_runner_cgroup_limits",
		Help: "1 for each limit the runner can set on its adapters' cgroups (memory, pids, cpu), 0 for one this machine does not give."},
		[]string{"kind"})
	var missing, where []string
	for _, k := range v2Limits {
		v := 0.0
		if c.host.limited(k) {
			v = 1
			where = append(where, k+" in "+c.host.where(k))
		} else {
			missing = append(missing, k)
		}
		limits.WithLabelValues(k).Set(v)
	}
	if len(missing) > 0 {
		lg.Error("adapters run WITHOUT some limits: this machine gives the runner no cgroup controller for them", "missing", strings.Join(missing, ","))
	}
	lg.Info("adapter limits", "set_in", strings.Join(where, ", "), "memory_bytes", c.limits.MemoryBytes, "pids", c.limits.Pids, "cpu_weight", c.limits.CPUWeight,
		"disk_bytes", c.limits.DiskBytes, "disk_watch_interval", c.diskEvery)
	f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_cgroup_contained",
		Help: "1 when each adapter runs in cgroups of its own, killed as a whole (setsid children included) when it stops; 0 when only its process group is."}).Set(contained)
	return c
}

// reap kills and removes the cgroups a runner of the same scope, killed,
// left behind.
func (c *containment) reap() {
	if c == nil {
		return
	}
	n, procs := c.host.reap()
	if n > 0 {
		c.lg.Warn("killed what a runner that was killed left running in its adapters' cgroups", "cgroups", n, "processes", procs)
	}
}

// close removes the runner's scope, once its adapters are gone.
func (c *containment) close() {
	if c != nil {
		c.host.close()
	}
}

// open makes the cgroups of adapter process id of session sid with
// agent's limits; nil,
// and no error, where the machine has none.
func (c *containment) open(agent Agent, ns events.Namespace, sid events.SessionID, id string) (*adapterCgroup, Limits, error) {
	if c == nil {
		return nil, Limits{}, nil
	}
	lim := c.limits.over(agent.Limits)
	if c.host.contained() == "" {
		return nil, lim, nil
	}
	cg, err := c.host.open(cgroupName(ns, sid, id), lim)
	if err != nil {
		// A machine that had cgroups at start and has none for this
		// adapter must not run it unseen.
		return nil, lim, events.Errorf(events.CodeAgentUnavailable, "agent %s: its cgroup: %v", agent.ID, err)
	}
	return cg, lim, nil
}

// limitPoll is how often the runner reads an adapter's limit counters
// while it runs; each is read once more when it ends.
const limitPoll = time.Second

// limitWatch follows one adapter's limits: the kernel's counters of its
// cgroup, and the size of its session's directories.
type limitWatch struct {
	p   *process
	c   *containment
	cg  *adapterCgroup
	lim Limits
	// dirs are the session's directories: its held working directories
	// (duplicates of the runner's, closed at end), by a name that
	// reaches exactly them whatever the agent renames, then HOME and
	// TMPDIR.
	dirs    []string
	held    []*workspace.Dir
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	seen    map[string]uint64
	base    int64 // the directories' size when the adapter started, -1 before it is known
	hitDisk bool
}

func newLimitWatch(p *process, c *containment, cg *adapterCgroup, lim Limits, held []*workspace.Dir, home, tmp string) *limitWatch {
	w := &limitWatch{p: p, c: c, cg: cg, lim: lim, stop: make(chan struct{}), done: make(chan struct{}),
		seen: map[string]uint64{}, base: -1}
	if lim.DiskBytes <= 0 || c == nil || c.diskEvery <= 0 {
		return w
	}
	for _, d := range held {
		dup, err := d.Dup()
		if err != nil {
			p.lg.Warn("the disk watch cannot hold a working directory", events.LogKeyErr, err)
			continue
		}
		w.held = append(w.held, dup)
		// "/." past the descriptor's name: the walk starts in the
		// directory the link leads to, not at the link.
		w.dirs = append(w.dirs, dup.ProcPath()+"/.")
	}
	w.dirs = append(w.dirs, home, tmp)
	return w
}

// run polls until end is called.
func (w *limitWatch) run() {
	defer close(w.done)
	defer func() {
		for _, d := range w.held {
			_ = d.Close()
		}
	}()
	if len(w.dirs) > 0 {
		size := diskUsage(w.dirs, w.stop)
		w.mu.Lock()
		w.base = size
		w.mu.Unlock()
	}
	poll := time.NewTicker(limitPoll)
	defer poll.Stop()
	var disk <-chan time.Time
	if w.base >= 0 {
		t := time.NewTicker(w.c.diskEvery)
		defer t.Stop()
		disk = t.C
	}
	for {
		select {
		case <-w.stop:
			return
		case <-poll.C:
			w.check()
		case <-disk:
			w.checkDisk()
		}
	}
}

// end stops the polling, and reads the counters once more: the hits of
// an adapter the OOM killer ended are counted before its exit.
func (w *limitWatch) end() {
	if w == nil {
		return
	}
	close(w.stop)
	<-w.done
	w.check()
}

// check records the kernel's counts that rose since the last check.
func (w *limitWatch) check() {
	if w.cg == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for kind, n := range w.cg.hits() {
		if n <= w.seen[kind] {
			continue
		}
		d := n - w.seen[kind]
		w.seen[kind] = n
		var limit int64
		var msg string
		switch kind {
		case limitMemory:
			limit = w.lim.MemoryBytes
			msg = fmt.Sprintf("the agent's processes met their memory limit (%d bytes): the kernel's OOM killer ended %d of them", limit, d)
		case limitPids:
			limit = w.lim.Pids
			msg = fmt.Sprintf("the agent's processes met their process limit (%d): the kernel refused %d forks (EAGAIN)", limit, d)
		}
		w.hit(kind, limit, d, msg)
	}
}

// checkDisk measures the session's directories, and stops the adapter the
// first time they grew past the limit: nothing else keeps a runaway from
// filling the disk every session shares.
func (w *limitWatch) checkDisk() {
	size := diskUsage(w.dirs, w.stop)
	w.mu.Lock()
	over := !w.hitDisk && size-w.base > w.lim.DiskBytes
	if over {
		w.hitDisk = true
	}
	w.mu.Unlock()
	if !over {
		return
	}
	w.hit(limitDisk, w.lim.DiskBytes, 1, fmt.Sprintf("the session's directories grew by %d bytes since the agent started, past the watched size (%d bytes): the agent is stopped", size-w.base, w.lim.DiskBytes))
	w.p.kill()
}

func (w *limitWatch) hit(kind string, limit int64, n uint64, msg string) {
	if w.c != nil {
		w.c.hitsTotal.WithLabelValues(kind).Add(float64(n))
	}
	w.p.lg.Warn("adapter met a limit", "kind", kind, "limit", limit, "count", n)
	w.p.publish(&events.AdapterLimitHit{Kind: kind, Limit: limit, Count: n, Message: msg})
}

// diskUsage is the disk space the files under dirs take, in bytes (their
// blocks: a sparse file counts what it holds), each file counted once
// however many of the directories hold it. It gives up, returning what it
// counted, once stop is closed.
func diskUsage(dirs []string, stop <-chan struct{}) int64 {
	type ino struct{ dev, ino uint64 }
	// Directories, each walked once however many of dirs lead to it
	// (an additional directory inside the cwd), and files of several
	// links, each counted once.
	seen := map[ino]bool{}
	var total int64
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			select {
			case <-stop:
				return filepath.SkipAll
			default:
			}
			if err != nil {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				total += fi.Size()
				return nil
			}
			if d.IsDir() || st.Nlink > 1 {
				k := ino{uint64(st.Dev), uint64(st.Ino)}
				if seen[k] {
					if d.IsDir() {
						return filepath.SkipDir
					}
					return nil
				}
				seen[k] = true
			}
			total += st.Blocks * 512
			return nil
		})
	}
	return total
}
