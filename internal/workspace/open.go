package workspace

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"skein.dev/pkg/events"
)

// Dir is a directory of a namespace's workspace, resolved once and held
// open (Roots.Open). What the runner does in a session's directory, it
// does through the descriptor: a name can be swapped for a symlink to
// another namespace's directory between any two looks at it, a held
// directory cannot. Path is what it was opened as, for display, logs and
// the ACP cwd, never to be opened again for anything that confines.
type Dir struct {
	f    *os.File
	path string
}

// Path is the directory's absolute path as the kernel saw it when it was
// opened: its real location then, no symlink in it.
func (d *Dir) Path() string { return d.path }

// File is the held directory, opened O_DIRECTORY|O_CLOEXEC.
func (d *Dir) File() *os.File { return d.f }

// ProcPath is /proc/self/fd/N of the held descriptor: a name this process
// opens to reach exactly the held directory, whatever lies at Path now,
// and only while d is open. A child forked while d is open reaches it
// by that name too, until it closes or replaces descriptor N.
func (d *Dir) ProcPath() string { return "/proc/self/fd/" + strconv.Itoa(int(d.f.Fd())) }

// Root opens an os.Root of the held directory: file operations through it
// stay in that directory, never in what its name leads to now.
func (d *Dir) Root() (*os.Root, error) { return os.OpenRoot(d.ProcPath()) }

// Dup returns another Dir holding the same directory, to be closed on its
// own.
func (d *Dir) Dup() (*Dir, error) {
	fd, err := dupCloexec(int(d.f.Fd()))
	if err != nil {
		return nil, err
	}
	return &Dir{f: os.NewFile(uintptr(fd), d.f.Name()), path: d.path}, nil
}

// Close lets the directory go.
func (d *Dir) Close() error { return d.f.Close() }

// checkForm refuses a path no namespace may name, with the messages
// Check gives; it returns the refusal every other reason gets.
func checkForm(ns events.Namespace, what, p string) (refused, err error) {
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s must be an absolute path", what)
	}
	if hasDotDot(p) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s %q must not contain ..", what, trunc(p))
	}
	// One message for every other refusal, whatever made it: see the
	// package comment.
	refused = events.Errorf(events.CodeInvalidRequest, "%s %q is not in the workspace of namespace %s", what, trunc(p), trunc(string(ns)))
	if !ns.Valid() {
		// An empty namespace would make <root>/<namespace> the root.
		return nil, refused
	}
	return refused, nil
}

// anchor is one directory a namespace may work under: its own under a
// root, or one granted to it.
type anchor struct {
	written  string // as configured, with the namespace element for a root
	resolved string // its symlinks resolved (the namespace element not), "" when that failed
	root     string // the root, for a namespace's own directory; "" for a grant
}

// anchors are the directories ns may work under, roots first (Check's
// order).
func (r Roots) anchors(ns events.Namespace, g Grants) []anchor {
	var as []anchor
	for _, root := range r {
		root = filepath.Clean(root)
		a := anchor{written: filepath.Join(root, string(ns)), root: root}
		if rr, err := Resolve(root); err == nil {
			a.resolved = filepath.Join(rr, string(ns))
		}
		as = append(as, a)
	}
	for _, d := range g[ns] {
		d = filepath.Clean(d)
		a := anchor{written: d}
		if rd, err := Resolve(d); err == nil {
			a.resolved = rd
		}
		as = append(as, a)
	}
	return as
}

// candidate is one way to open a path: rel beneath an anchor.
type candidate struct {
	a   anchor
	rel string
}

// lexical returns the anchors p lies under as written or as resolved,
// with p relative to each, without looking at the file system.
func lexical(as []anchor, p string) []candidate {
	var cs []candidate
	for _, a := range as {
		for _, base := range []string{a.written, a.resolved} {
			if base == "" || !Under(p, base) {
				continue
			}
			rel, err := filepath.Rel(base, p)
			if err != nil {
				continue
			}
			cs = append(cs, candidate{a: a, rel: rel})
			break
		}
	}
	return cs
}
