package adapterrunner

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"skein.dev/pkg/events"
)

// cgroupRoot is where a machine mounts its cgroup hierarchies.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupHost is what of cgroups this machine gives the runner, found once
// at start (findCgroups).
type cgroupHost struct {
	lg    *slog.Logger
	scope string
	// v2 is the runner's scope in the cgroup v2 hierarchy, "" without one
	// the runner may write; v2Kill: it has cgroup.kill (Linux 5.14).
	v2     string
	v2Kill bool
	// v2Ctrl are the controllers of v2Limits the adapters' v2 cgroups
	// have (none on a machine that leaves them to v1).
	v2Ctrl map[string]bool
	// v1 is the runner's scope in each cgroup v1 hierarchy it uses, by
	// controller: the limits v2 does not carry, and freezer.
	v1 map[string]string
}

// findCgroups finds the hierarchies this process may make cgroups in, and
// makes its scope in each: in v2 at the hierarchy's root (a cgroup with
// processes, as the runner's own is, cannot have children with
// controllers), else under its own cgroup; in v1 under the runner's own
// cgroup of that controller, so that what limits the runner limits its
// adapters too.
func findCgroups(lg *slog.Logger, scope string) *cgroupHost {
	h := &cgroupHost{lg: lg, scope: scope, v2Ctrl: map[string]bool{}, v1: map[string]string{}}
	mounts, err := cgroupMounts()
	if err != nil {
		lg.Warn("cannot read this process's mounts", events.LogKeyErr, err)
		return h
	}
	own, err := ownCgroups()
	if err != nil {
		lg.Warn("cannot read this process's cgroups", events.LogKeyErr, err)
		return h
	}
	for _, m := range mounts {
		if m.fstype != "cgroup2" || h.v2 != "" {
			continue
		}
		// The hierarchy's root, where root may write; else the runner's
		// own cgroup, which a service manager may have delegated to it
		// (systemd's Delegate=): its scope there gets the kill, though
		// not the limits, a cgroup with processes delegating no
		// controller.
		parents := []string{m.point}
		if rel, err := filepath.Rel(m.root, own[""]); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
			parents = append(parents, filepath.Join(m.point, rel))
		}
		for _, parent := range parents {
			dir := filepath.Join(parent, scope)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				lg.Debug("no cgroup v2 scope", "dir", dir, events.LogKeyErr, err)
				continue
			}
			h.v2 = dir
			_, err := os.Stat(filepath.Join(dir, "cgroup.kill"))
			h.v2Kill = err == nil
			avail := strings.Fields(readString(filepath.Join(parent, "cgroup.controllers")))
			for _, c := range v2Limits {
				if !slices.Contains(avail, c) {
					continue
				}
				// The root is exempt from the rule that a cgroup with
				// processes delegates no controller; the scope has none.
				if enable(parent, c) == nil && enable(dir, c) == nil {
					h.v2Ctrl[c] = true
				}
			}
			break
		}
	}
	for _, c := range append(slices.Clone(v2Limits), "freezer") {
		if h.v2Ctrl[c] {
			continue
		}
		for _, m := range mounts {
			if m.fstype != "cgroup" || !slices.Contains(m.options, c) {
				continue
			}
			rel, err := filepath.Rel(m.root, own[c])
			if err != nil || strings.HasPrefix(rel, "..") {
				rel = "."
			}
			dir := filepath.Join(m.point, rel, scope)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				lg.Debug("no cgroup v1 scope", "controller", c, "dir", dir, events.LogKeyErr, err)
				break
			}
			h.v1[c] = dir
			break
		}
	}
	return h
}

// enable delegates controller c to the children of cgroup dir.
func enable(dir, c string) error {
	if slices.Contains(strings.Fields(readString(filepath.Join(dir, "cgroup.subtree_control"))), c) {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
}

// contained says how an adapter's processes are killed together: "" when
// they cannot be.
func (h *cgroupHost) contained() string {
	switch {
	case h.v2 != "" && h.v2Kill:
		return "cgroup v2 " + h.v2 + " (cgroup.kill)"
	case h.v1["freezer"] != "":
		return "cgroup v1 " + h.v1["freezer"] + " (frozen, killed, thawed)"
	case h.v2 != "":
		return "cgroup v2 " + h.v2 + " (killed until empty)"
	}
	for _, c := range v2Limits {
		if d := h.v1[c]; d != "" {
			return "cgroup v1 " + d + " (killed until empty)"
		}
	}
	return ""
}

// where names the hierarchy that carries controller c's limit.
func (h *cgroupHost) where(c string) string {
	if h.v2Ctrl[c] {
		return "cgroup v2 " + h.v2
	}
	return "cgroup v1 " + h.v1[c]
}

// limited reports whether the limit of controller c can be set.
func (h *cgroupHost) limited(c string) bool { return h.v2Ctrl[c] || h.v1[c] != "" }

// fromBirth reports whether an adapter is in its cgroups from its first
// instruction, which only v2 gives (clone3's CLONE_INTO_CGROUP); v1
// cgroups are joined by the launcher before it execs the adapter, or,
// with no launcher, by the runner once the adapter started.
func (h *cgroupHost) fromBirth() bool { return h.v2 != "" }

// adapterCgroup is one adapter's cgroups.
type adapterCgroup struct {
	h    *cgroupHost
	name string
	v2   string            // "" without v2
	v1   map[string]string // by controller
	fd   int               // v2's directory, opened for clone3; -1 without
}

// open returns the cgroups of adapter name, empty, made with lim. Any
// left with that name (by a runner killed before it removed them) are
// killed and removed first.
func (h *cgroupHost) open(name string, lim Limits) (*adapterCgroup, error) {
	cg := h.existing(name)
	if cg.dirs() != nil {
		cg.kill()
		if err := cg.remove(); err != nil {
			return nil, err
		}
	}
	cg = &adapterCgroup{h: h, name: name, v1: map[string]string{}, fd: -1}
	fail := func(err error) (*adapterCgroup, error) {
		_ = cg.remove()
		return nil, err
	}
	// A scope removed since the runner started (by hand, by a runner of
	// the same scope stopping) is made again.
	if h.v2 != "" {
		if !isDir(h.v2) && os.Mkdir(h.v2, 0o755) == nil {
			for c := range h.v2Ctrl {
				_ = enable(h.v2, c)
			}
		}
		cg.v2 = filepath.Join(h.v2, name)
		if err := mkdirIn(h.v2, cg.v2); err != nil {
			cg.v2 = ""
			return fail(err)
		}
	}
	for c, scope := range h.v1 {
		dir := filepath.Join(scope, name)
		if err := mkdirIn(scope, dir); err != nil {
			return fail(err)
		}
		cg.v1[c] = dir
	}
	if err := cg.limit(lim); err != nil {
		return fail(err)
	}
	if cg.v2 != "" {
		fd, err := unix.Open(cg.v2, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		cg.fd = fd
	}
	return cg, nil
}

// mkdirIn makes cgroup dir in scope, and scope first where it is missing.
func mkdirIn(scope, dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.Mkdir(scope, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
			err = os.Mkdir(dir, 0o755)
		}
	}
	return err
}

// existing is adapter name's cgroups as they are now, those missing left
// out.
func (h *cgroupHost) existing(name string) *adapterCgroup {
	cg := &adapterCgroup{h: h, name: name, v1: map[string]string{}, fd: -1}
	if h.v2 != "" && isDir(filepath.Join(h.v2, name)) {
		cg.v2 = filepath.Join(h.v2, name)
	}
	for c, scope := range h.v1 {
		if d := filepath.Join(scope, name); isDir(d) {
			cg.v1[c] = d
		}
	}
	return cg
}

// limit writes lim into the controllers that carry it.
func (cg *adapterCgroup) limit(lim Limits) error {
	set := func(c, v2file, v1file, v2val, v1val string) error {
		switch {
		case cg.h.v2Ctrl[c]:
			return os.WriteFile(filepath.Join(cg.v2, v2file), []byte(v2val), 0)
		case cg.v1[c] != "":
			return os.WriteFile(filepath.Join(cg.v1[c], v1file), []byte(v1val), 0)
		}
		return nil
	}
	if lim.MemoryBytes > 0 {
		n := strconv.FormatInt(lim.MemoryBytes, 10)
		if err := set("memory", "memory.max", "memory.limit_in_bytes", n, n); err != nil {
			return fmt.Errorf("memory limit: %w", err)
		}
		// Swap counts with memory, where the kernel accounts it: a
		// runaway must not page the machine to a halt instead.
		if d := cg.v1["memory"]; d != "" {
			_ = os.WriteFile(filepath.Join(d, "memory.memsw.limit_in_bytes"), []byte(n), 0)
		} else if cg.h.v2Ctrl["memory"] {
			_ = os.WriteFile(filepath.Join(cg.v2, "memory.swap.max"), []byte("0"), 0)
		}
	}
	if lim.Pids > 0 {
		n := strconv.FormatInt(lim.Pids, 10)
		if err := set("pids", "pids.max", "pids.max", n, n); err != nil {
			return fmt.Errorf("process limit: %w", err)
		}
	}
	if w := lim.CPUWeight; w > 0 {
		// cpu.shares' normal value is 1024 where cpu.weight's is 100.
		shares := max(2, w*1024/CPUWeightNormal)
		if err := set("cpu", "cpu.weight", "cpu.shares", strconv.FormatInt(w, 10), strconv.FormatInt(shares, 10)); err != nil {
			return fmt.Errorf("CPU weight: %w", err)
		}
	}
	return nil
}

// attach makes the adapter started with attr begin its life in the v2
// cgroup (clone3 with CLONE_INTO_CGROUP).
func (cg *adapterCgroup) attach(attr *syscall.SysProcAttr) {
	if cg.fd >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, cg.fd
	}
}

// procsFiles are the v1 cgroup.procs files the launcher writes itself into.
func (cg *adapterCgroup) procsFiles() []string {
	var out []string
	for _, d := range cg.v1 {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	slices.Sort(out)
	return out
}

// join moves process pid into the v1 cgroups, where it is not already
// (the launcher put it there).
func (cg *adapterCgroup) join(pid int) error {
	for _, f := range cg.procsFiles() {
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join %s: %w", f, err)
		}
	}
	return nil
}

// dirs are the cgroup's directories, nil when none exists.
func (cg *adapterCgroup) dirs() []string {
	var out []string
	if cg.v2 != "" {
		out = append(out, cg.v2)
	}
	for _, d := range cg.v1 {
		out = append(out, d)
	}
	return out
}

// procs lists the processes in the cgroup, in any hierarchy.
func (cg *adapterCgroup) procs() []int {
	var pids []int
	for _, d := range cg.dirs() {
		for f := range strings.FieldsSeq(readString(filepath.Join(d, "cgroup.procs"))) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// kill kills every process in the cgroup, and returns how many there were:
// at once with v2's cgroup.kill; else, with v1's freezer, frozen (none can
// fork while they are killed one by one), killed and thawed (a frozen
// process does not die until thawed); else killed one by one until none is
// left.
func (cg *adapterCgroup) kill() int {
	n := len(cg.procs())
	if n == 0 {
		return 0
	}
	switch {
	case cg.v2 != "" && cg.h.v2Kill:
		if err := os.WriteFile(filepath.Join(cg.v2, "cgroup.kill"), []byte("1"), 0); err != nil {
			cg.h.lg.Warn("cannot kill an adapter's cgroup", "cgroup", cg.v2, events.LogKeyErr, err)
		}
	case cg.v1["freezer"] != "":
		cg.freezeKill(cg.v1["freezer"])
	}
	// What the way above missed, or all where there was none.
	for range 100 {
		pids := cg.procs()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
	return n
}

// freezeKill freezes the v1 freezer cgroup dir, kills its processes and
// thaws it.
func (cg *adapterCgroup) freezeKill(dir string) {
	state := filepath.Join(dir, "freezer.state")
	if err := os.WriteFile(state, []byte("FROZEN"), 0); err != nil {
		cg.h.lg.Warn("cannot freeze an adapter's cgroup", "cgroup", dir, events.LogKeyErr, err)
		return
	}
	// FREEZING until every task stopped; a task in an uninterruptible
	// sleep may take a moment.
	for i := 0; i < 1000 && readString(state) != "FROZEN"; i++ {
		time.Sleep(time.Millisecond)
	}
	for f := range strings.FieldsSeq(readString(filepath.Join(dir, "cgroup.procs"))) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := os.WriteFile(state, []byte("THAWED"), 0); err != nil {
		cg.h.lg.Warn("cannot thaw an adapter's cgroup", "cgroup", dir, events.LogKeyErr, err)
	}
}

// cgroupRemoveWait bounds waiting for a killed cgroup to empty: the
// kernel takes its processes down asynchronously, in microseconds.
const cgroupRemoveWait = 5 * time.Second

// remove removes the cgroup, once its processes have gone (kill first).
func (cg *adapterCgroup) remove() error {
	if cg.fd >= 0 {
		_ = unix.Close(cg.fd)
		cg.fd = -1
	}
	deadline := time.Now().Add(cgroupRemoveWait)
	for _, d := range cg.dirs() {
		for {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", d, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// hits returns the kernel's counts of the cgroup's limit hits, by kind:
// processes the OOM killer ended (memory) and forks refused (pids).
func (cg *adapterCgroup) hits() map[string]uint64 {
	out := map[string]uint64{}
	switch {
	case cg.h.v2Ctrl["memory"]:
		out[limitMemory] = keyed(filepath.Join(cg.v2, "memory.events"), "oom_kill")
	case cg.v1["memory"] != "":
		out[limitMemory] = keyed(filepath.Join(cg.v1["memory"], "memory.oom_control"), "oom_kill")
	}
	switch {
	case cg.h.v2Ctrl["pids"]:
		out[limitPids] = keyed(filepath.Join(cg.v2, "pids.events"), "max")
	case cg.v1["pids"] != "":
		out[limitPids] = keyed(filepath.Join(cg.v1["pids"], "pids.events"), "max")
	}
	return out
}

// reap kills and removes every cgroup under the runner's scope: those a
// runner killed before it could stop its adapters left. It returns the
// processes killed.
func (h *cgroupHost) reap() (cgroups, procs int) {
	names := map[string]bool{}
	for _, scope := range append(slices.Collect(mapValues(h.v1)), h.v2) {
		if scope == "" {
			continue
		}
		entries, _ := os.ReadDir(scope)
		for _, e := range entries {
			if e.IsDir() {
				names[e.Name()] = true
			}
		}
	}
	for name := range names {
		cg := h.existing(name)
		procs += cg.kill()
		if err := cg.remove(); err != nil {
			h.lg.Warn("cannot remove a leftover cgroup", events.LogKeyErr, err)
			continue
		}
		cgroups++
	}
	return cgroups, procs
}

// mapValues yields m's values.
func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// keyed reads the value of key in a flat keyed file ("key value" lines),
// 0 where it is missing.
func keyed(path, key string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		k, v, ok := strings.Cut(strings.TrimSpace(string(line)), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// cgroupMount is one cgroup hierarchy mounted in this process's view.
type cgroupMount struct {
	point   string   // where it is mounted
	root    string   // the cgroup of the hierarchy mounted there
	fstype  string   // cgroup or cgroup2
	options []string // super options: a v1 hierarchy's controllers among them
}

// cgroupMounts reads the cgroup hierarchies of /proc/self/mountinfo
// (proc_pid_mountinfo(5)) mounted under cgroupRoot, cgroupRoot itself first.
func cgroupMounts() ([]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 5 || len(b) < 3 || (b[0] != "cgroup" && b[0] != "cgroup2") {
			continue
		}
		point := unescapeMount(a[4])
		if point != cgroupRoot && !strings.HasPrefix(point, cgroupRoot+"/") {
			continue
		}
		out = append(out, cgroupMount{point: point, root: unescapeMount(a[3]), fstype: b[0], options: strings.Split(b[2], ",")})
	}
	slices.SortStableFunc(out, func(x, y cgroupMount) int { return len(x.point) - len(y.point) })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroups reads /proc/self/cgroup: this process's cgroup in each v1
// hierarchy by controller name, and in v2 under "".
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		for c := range strings.SplitSeq(f[1], ",") {
			out[c] = f[2]
		}
	}
	return out, nil
}

// close removes the runner's scopes, empty once its adapters are gone;
// one still in use (by a runner of the same scope, which there should not
// be) stays.
func (h *cgroupHost) close() {
	for _, scope := range append(slices.Collect(mapValues(h.v1)), h.v2) {
		if scope != "" {
			_ = unix.Rmdir(scope)
		}
	}
}
