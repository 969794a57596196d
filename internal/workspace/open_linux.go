package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"skein.dev/pkg/events"
)

// Open resolves p once and returns it held open, or the refusal Check
// gives when p is not confined to namespace ns's directories under r, or
// to those g grants it. With create, the directories missing on the way
// are made (0700), each in a directory already held beneath the
// namespace's.
//
// The open is anchored at the namespace's own directory, never at p: each
// root (operator-configured, symlinks followed) is opened, then its
// namespace element with no symlink followed at all (a namespace
// directory swapped for a symlink confines to nothing), and a grant as
// the operator wrote it. p is then opened relative to that anchor with
// openat2's RESOLVE_BENEATH: no "..", absolute symlink or relative
// symlink climbing out of the anchor is followed, whatever is swapped in
// meanwhile, and no magic link (/proc/<pid>/fd/…) at all. A symlink that
// stays inside the anchor is followed, as Check accepts it.
//
// Which anchor, and p relative to it, is chosen by name: the anchors p
// lies under as written or resolved, and otherwise the anchors p lies
// under with its symlinks resolved (a path through a link outside every
// anchor, as the .skein link skein dev makes to its data directory,
// whose workspaces directory is the root). Resolving only chooses: the
// open is beneath one of ns's anchors all the same, so a symlink swapped
// meanwhile can only make it fail, never reach another namespace's
// directory.
func (r Roots) Open(ns events.Namespace, g Grants, what, p string, create bool) (*Dir, error) {
	refused, err := checkForm(ns, what, p)
	if err != nil {
		return nil, err
	}
	p = filepath.Clean(p)
	as := r.anchors(ns, g)
	tried := map[candidate]bool{}
	try := func(cs []candidate) *Dir {
		for _, c := range cs {
			if tried[c] {
				continue
			}
			tried[c] = true
			if d, err := c.open(ns, create); err == nil {
				return d
			}
		}
		return nil
	}
	if d := try(lexical(as, p)); d != nil {
		return d, nil
	}
	if resolved, err := Resolve(p); err == nil {
		var cs []candidate
		for _, a := range as {
			if a.resolved == "" || !Under(resolved, a.resolved) {
				continue
			}
			if rel, err := filepath.Rel(a.resolved, resolved); err == nil {
				cs = append(cs, candidate{a: a, rel: rel})
			}
		}
		if d := try(cs); d != nil {
			return d, nil
		}
	}
	return nil, refused
}

// open opens c.rel beneath its anchor.
func (c candidate) open(ns events.Namespace, create bool) (*Dir, error) {
	afd, err := c.a.open(ns, create)
	if err != nil {
		return nil, err
	}
	defer unix.Close(afd)
	fd, err := beneath(afd, c.rel, create)
	if err != nil {
		return nil, err
	}
	base := c.a.resolved
	if base == "" {
		base = c.a.written
	}
	path := filepath.Join(base, c.rel)
	if real, err := os.Readlink(procFD(fd)); err == nil && filepath.IsAbs(real) && !strings.HasSuffix(real, " (deleted)") {
		path = real
	}
	return &Dir{f: os.NewFile(uintptr(fd), path), path: path}, nil
}

// open opens the anchor (O_PATH): a grant as written, a root as written
// and then the namespace element in it with no symlink followed. With
// create, what is missing is made: a root or a grant by name (the
// operator's), the namespace element in the opened root.
func (a anchor) open(ns events.Namespace, create bool) (int, error) {
	openDir := func(p string) (int, error) {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err := os.MkdirAll(p, 0o700); err != nil {
				return -1, err
			}
			fd, err = unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		return fd, err
	}
	if a.root == "" {
		return openDir(a.written)
	}
	rfd, err := openDir(a.root)
	if err != nil {
		return -1, err
	}
	defer unix.Close(rfd)
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := openat2(rfd, string(ns), &how)
	if errors.Is(err, unix.ENOENT) && create {
		if err := unix.Mkdirat(rfd, string(ns), 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		fd, err = openat2(rfd, string(ns), &how)
	}
	return fd, err
}

// beneath opens the directory rel beneath the directory afd. With create
// it makes each missing element in the directory before it, held open
// beneath afd, and opens the path so far beneath afd again.
func beneath(afd int, rel string, create bool) (int, error) {
	fd, err := openBeneath(afd, rel)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) || rel == "." {
		return fd, err
	}
	parts := strings.Split(rel, string(filepath.Separator))
	parent := -1
	defer func() {
		if parent >= 0 {
			unix.Close(parent)
		}
	}()
	for i, el := range parts {
		at := strings.Join(parts[:i+1], string(filepath.Separator))
		fd, err := openBeneath(afd, at)
		if errors.Is(err, unix.ENOENT) {
			in := afd
			if parent >= 0 {
				in = parent
			}
			if err := unix.Mkdirat(in, el, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, err
			}
			fd, err = openBeneath(afd, at)
		}
		if err != nil {
			return -1, err
		}
		if parent >= 0 {
			unix.Close(parent)
		}
		parent = fd
	}
	fd, parent = parent, -1
	return fd, nil
}

// openBeneath opens the directory rel beneath afd for reading: nothing on
// the way may lead out of afd, and no magic link is followed.
func openBeneath(afd int, rel string) (int, error) {
	return openat2(afd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// openat2 is unix.Openat2, tried again when the kernel asks (EAGAIN: a
// rename anywhere during a lookup of ".." under RESOLVE_BENEATH; EINTR)
// at most maxOpenAgain times.
func openat2(dirfd int, p string, how *unix.OpenHow) (int, error) {
	for again := 0; ; again++ {
		fd, err := unix.Openat2(dirfd, p, how)
		if (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)) && again < maxOpenAgain {
			continue
		}
		return fd, err
	}
}

const maxOpenAgain = 16

func dupCloexec(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
