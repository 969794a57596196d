package adapterrunner

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// The adapters' user. A runner started as root runs each adapter as
// another user, Config.AdapterUID and AdapterGID (65534, nobody, unless
// configured), which the launcher becomes (privileges_linux.go): root's
// rights over the machine's files are not an agent's. Every adapter of
// the runner is that one user; Landlock keeps them apart.
//
// What the runner makes for a session is then that user's: the session's
// HOME and TMPDIR, its default working directory, a working directory (or
// its missing parents) it creates for a cwd the session names, an agent's
// sandbox write paths it creates, and the uploads' .skein-attachments.
// What existed before (a user's own project named as cwd) keeps its owner
// and mode: Skein never chowns it, and the agent may write there only what
// the adapters' user may. The directories on the way to those (the data
// directory, its namespace and session directories) stay the runner's,
// searchable by the adapters' group, not listable.

// DefaultAdapterUID is Config.AdapterUID's default: nobody, on the usual
// Linux distributions.
const DefaultAdapterUID = 65534

// adapterUser is who adapters run as; the zero value (uid 0) means as the
// runner does, and then nothing is given to anyone.
type adapterUser struct{ uid, gid int }

// adapterUsers are the users the runner's adapters run as: the
// configured ones where the runner is root and the sandbox is on, none
// (the zero user) otherwise.
func (c *Config) adapterUsers() *adapterUsers {
	if os.Geteuid() != 0 || c.Sandbox == SandboxOff {
		return &adapterUsers{}
	}
	return &adapterUsers{
		base: adapterUser{uid: c.AdapterUID, gid: c.AdapterGID}, n: c.AdapterUIDRange,
		claims: filepath.Join(c.DataDir, adapterUIDClaims), byNS: map[events.Namespace]adapterUser{},
	}
}

// adapterUIDClaims is the directory, in the data directory, of the
// namespaces' claims on the uids of Config.AdapterUIDRange: a file per uid
// taken, named for it, holding its namespace.
const adapterUIDClaims = ".adapter-uids"

// adapterUsers gives each namespace its adapters' user: base for every
// one, or, with a range (n > 0), a uid of its own among the n from base's,
// all of base's group (which the directories on the way to theirs let
// search). A namespace's uid is the first free one from base + a hash of
// its name, probing on; the claims, kept in the data directory, make it
// the same across restarts, and two namespaces never share one: with the
// range used up, a new namespace is refused.
type adapterUsers struct {
	base   adapterUser
	n      int
	claims string

	mu   sync.Mutex
	byNS map[events.Namespace]adapterUser
}

// userFor is the user ns's adapters run as.
func (s *sandbox) userFor(ns events.Namespace) (adapterUser, error) {
	if s == nil || s.users == nil {
		return adapterUser{}, nil
	}
	return s.users.forNamespace(ns)
}

func (a *adapterUsers) forNamespace(ns events.Namespace) (adapterUser, error) {
	if a.base.uid == 0 || a.n <= 0 {
		return a.base, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if u, ok := a.byNS[ns]; ok {
		return u, nil
	}
	if err := os.MkdirAll(a.claims, 0o700); err != nil {
		return adapterUser{}, fmt.Errorf("adapter uid claims: %w", err)
	}
	h := fnv.New32a()
	h.Write([]byte(ns))
	start := int(h.Sum32() % uint32(a.n))
	for i := range a.n {
		uid := a.base.uid + (start+i)%a.n
		path := filepath.Join(a.claims, strconv.Itoa(uid))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.WriteString(string(ns))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(path)
				return adapterUser{}, fmt.Errorf("claim adapter uid %d: %w", uid, err)
			}
		} else if !errors.Is(err, fs.ErrExist) {
			return adapterUser{}, fmt.Errorf("claim adapter uid %d: %w", uid, err)
		} else if b, err := os.ReadFile(path); err != nil {
			return adapterUser{}, fmt.Errorf("adapter uid %d's claim: %w", uid, err)
		} else if string(b) != string(ns) {
			continue // another namespace's
		}
		u := adapterUser{uid: uid, gid: a.base.gid}
		a.byNS[ns] = u
		return u, nil
	}
	return adapterUser{}, events.Errorf(events.CodeAgentUnavailable,
		"every one of the %d adapter uids from %d is another namespace's (adapter-runner.adapter-uid-range)", a.n, a.base.uid)
}

// mkdir makes dir and its missing parents (0700), as os.MkdirAll, and
// gives the ones it made to the adapters' user. Those that existed keep
// their owner.
func (u adapterUser) mkdir(dir string) error {
	made := missing(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return u.own(made...)
}

// openGiving opens a session's working directory at path with open, which
// makes what of it is missing, and gives the adapters' user what it made:
// the directories of path that were not there before it (by the name the
// session gave, below the nearest one that was), the held one itself
// through its descriptor. What existed keeps its owner.
func (u adapterUser) openGiving(path string, open func() (*workspace.Dir, error)) (*workspace.Dir, error) {
	var made []string
	if u.uid != 0 {
		made = missing(path)
	}
	d, err := open()
	if err != nil || len(made) == 0 {
		return d, err
	}
	if err := d.File().Chown(u.uid, u.gid); err != nil {
		_ = d.Close()
		return nil, err
	}
	if err := u.own(made[1:]...); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// missing lists the directories of path that do not exist, path first,
// up to the nearest one that does.
func missing(path string) []string {
	var out []string
	for d := filepath.Clean(path); filepath.IsAbs(d); d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		out = append(out, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	return out
}

// mkdirOwn is mkdir for a directory the registry names the agent's own
// (AgentSandbox.Write): made if missing, and given, itself and not what it
// holds, to the adapters' user if it existed as the runner's. One that is
// already another's stays so: with a uid per namespace, the first
// namespace's; a path every session of the agent shares would otherwise
// be a channel between namespaces.
func (u adapterUser) mkdirOwn(dir string) error {
	if err := u.mkdir(dir); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Geteuid() {
		return u.own(dir)
	}
	return nil
}

// own gives each path, one the runner made for an adapter, to the
// adapters' user. Symbolic links are not followed.
func (u adapterUser) own(paths ...string) error {
	if u.uid == 0 {
		return nil
	}
	for _, p := range paths {
		if err := os.Lchown(p, u.uid, u.gid); err != nil {
			return err
		}
	}
	return nil
}

// searchable lets the adapters' group search each directory, one of the
// runner's on the way to an adapter's: group the adapters' group, and
// g+x, without read (an adapter may pass, not list). A directory others
// may search already is left as it is, and so is one not the runner's.
func (u adapterUser) searchable(dirs ...string) error {
	if u.uid == 0 {
		return nil
	}
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || !ok || fi.Mode().Perm()&0o001 != 0 || int(st.Uid) != os.Geteuid() {
			continue
		}
		if err := os.Lchown(d, -1, u.gid); err != nil {
			return err
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o010); err != nil {
			return err
		}
	}
	return nil
}

// reaches reports why the adapters' user cannot reach path (search every
// directory on the way to it, and path itself if a directory), or nil if
// it can. It reads the modes, which is what the kernel checks (an ACL
// aside).
func (u adapterUser) reaches(path string) error {
	if u.uid == 0 {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for d := abs; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil && fi.IsDir() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && !u.may(st, 0o1) {
				return fmt.Errorf("uid %d cannot search %s (mode %04o, owner %d:%d)", u.uid, d, fi.Mode().Perm(), st.Uid, st.Gid)
			}
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

// may reports whether the adapters' user has the permission bits want
// (of rwx: 4, 2, 1) on a file of st.
func (u adapterUser) may(st *syscall.Stat_t, want uint32) bool {
	mode := uint32(st.Mode)
	switch {
	case int(st.Uid) == u.uid:
		return mode>>6&want == want
	case int(st.Gid) == u.gid:
		return mode>>3&want == want
	}
	return mode&want == want
}

// logPrivileges says, at start, what privileges adapters hold.
func (s *sandbox) logPrivileges() {
	if s.user.uid != 0 {
		s.lg.Info("adapters run as another user than the runner's root, with no capability, no_new_privs and the seccomp filter",
			"adapter_uid", s.user.uid, "adapter_gid", s.user.gid, "adapter_uid_range", s.users.n)
		return
	}
	s.lg.Info("adapters run as the runner's user, with no capability, no_new_privs and the seccomp filter", "uid", os.Geteuid())
}

// prepare makes the data directory and the workspace roots, and lets the
// adapters' user search them. Where that user cannot reach them (a
// directory above them it may not search), no adapter could find its
// HOME or its working directory: the runner says so, loudly, at start,
// and refuses every adapter with it (command).
func (s *sandbox) prepare(dataDir string, roots []string) {
	if s.unreachable = s.user.prepare(dataDir, roots); s.unreachable != nil {
		s.lg.Error("every adapter will be refused: "+s.unreachable.Error(), "adapter_uid", s.user.uid)
	}
}

func (u adapterUser) prepare(dataDir string, roots []string) error {
	if u.uid == 0 {
		return nil
	}
	for _, d := range append([]string{dataDir}, roots...) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := u.searchable(d); err != nil {
			return fmt.Errorf("let the adapters' user search %s: %w", d, err)
		}
		if err := u.reaches(d); err != nil {
			return fmt.Errorf("adapters run as uid %d (adapter-runner.adapter-uid: the runner runs as root), which cannot reach %s: %w; "+
				"let it search that directory (chmod o+x), or place the data directory and the workspace roots elsewhere", u.uid, d, err)
		}
	}
	return nil
}

// canRun reports why the adapters' user cannot execute path, or nil.
func (u adapterUser) canRun(path string) error { return u.can(path, 0o1, "execute") }

// canRead reports why the adapters' user cannot read the file at path,
// or nil.
func (u adapterUser) canRead(path string) error { return u.can(path, 0o4, "read") }

// can reports why the adapters' user may not do what (the permission bit
// perm: 0o1 execute, 0o4 read) to path, or nil: it must reach path's
// directory, and path's mode must allow it.
func (u adapterUser) can(path string, perm uint32, what string) error {
	if u.uid == 0 {
		return nil
	}
	if err := u.reaches(filepath.Dir(path)); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && !u.may(st, perm) {
		return fmt.Errorf("uid %d may not %s %s (mode %04o, owner %d:%d)", u.uid, what, path, fi.Mode().Perm(), st.Uid, st.Gid)
	}
	return nil
}

// ownIn is own for names in root, not following symbolic links.
func (u adapterUser) ownIn(root *os.Root, names ...string) error {
	if u.uid == 0 {
		return nil
	}
	for _, n := range names {
		if err := root.Lchown(n, u.uid, u.gid); err != nil {
			return err
		}
	}
	return nil
}
