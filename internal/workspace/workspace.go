// Package workspace confines the working directories of agent adapters to
// their own namespace's directory under configured roots.
//
// A session names the directories its agent works in: its cwd and its
// additionalDirectories. An adapter runs with the runner's user, so a path
// is the whole of what keeps one session's agent out of another's files
// and out of the machine's. The roots are shared by every namespace; each
// namespace owns <root>/<namespace> and nothing else under them, neither
// the root itself (which holds every namespace) nor another namespace's
// directory. An operator may grant a namespace more, explicitly (Grants);
// nothing widens it implicitly.
//
// Check is the one rule, applied twice: by the session service when a
// session is opened (nothing is recorded for a path it refuses) and by
// the adapter-runner, which applies it by opening the directory (Open)
// and does everything else there through the descriptor it holds: the
// agent's working directory, its sandbox, file operations and listings.
// The runner's is the one that counts: the roots may have changed since
// the session was opened, and a directory may have been replaced by a
// symlink, at any instant, by an agent that works beside it.
//
// A path is confined when it is absolute, has no ".." element, and, with
// every symlink resolved, lies under <root>/<namespace> (the root
// resolved, the namespace element taken as written, so that a namespace
// directory swapped for a symlink confines to nothing) or under a
// directory granted to the namespace (resolved). It may be written
// through a symlink outside them all (skein dev's .skein link to its data
// directory, whose workspaces directory is a root): what counts is where
// it leads. A path that does not exist yet is resolved through its
// nearest existing ancestor, so that creating it cannot leave either.
// Check's answer is a name, good for the instant it looked; Open's is the
// directory itself, opened beneath the namespace's own directory with
// openat2 (RESOLVE_BENEATH), so that no symlink swapped at any instant
// leads the runner out of it.
//
// A refusal reads the same whatever the file system holds: it echoes the
// path as the caller wrote it and says that it is not in the namespace's
// workspace, never whether it exists, what it is, where a symlink in it
// leads, or what the roots are. A caller may learn about its own
// namespace's files by trying; it learns nothing of another's.
//
// Checking touches the file system of the process that checks: the
// session service's check of symlinks holds only where it sees the
// runners' file system (one machine, as with skein dev); elsewhere it
// checks the paths as written, and the runner's check decides.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"skein.dev/pkg/events"
)

// Roots are the directories agents may work under. The first is where the
// default working directories are made (Default).
type Roots []string

// ParseRoots parses a comma-separated list of absolute directories, as the
// workspace-roots flags hold it. Empty elements are skipped.
func ParseRoots(list string) (Roots, error) {
	var r Roots
	for p := range strings.SplitSeq(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !filepath.IsAbs(p) || hasDotDot(p) {
			return nil, fmt.Errorf("workspace root %q must be an absolute path without a .. element", p)
		}
		r = append(r, filepath.Clean(p))
	}
	return r, nil
}

// Validate checks roots set other than by ParseRoots (a Config built in
// code): each must be absolute and without "..".
func (r Roots) Validate() error {
	for _, p := range r {
		if !filepath.IsAbs(p) || hasDotDot(p) {
			return fmt.Errorf("workspace root %q must be an absolute path without a .. element", p)
		}
	}
	return nil
}

// String returns r as ParseRoots reads it.
func (r Roots) String() string { return strings.Join(r, ",") }

// Set parses list into r: Roots is a flag.Value.
func (r *Roots) Set(list string) error {
	p, err := ParseRoots(list)
	if err != nil {
		return err
	}
	*r = p
	return nil
}

// Default is the working directory of a session opened without one:
// <first root>/<namespace>/<session ID>. Both IDs are single path
// elements (their alphabet has no separator and no dot-only name), so the
// result is always under the root. It is "" when r is empty.
func (r Roots) Default(ns events.Namespace, sid events.SessionID) string {
	if len(r) == 0 {
		return ""
	}
	return filepath.Join(r[0], string(ns), string(sid))
}

// Check returns p resolved, or CodeInvalidRequest when p is not confined
// to namespace ns's directories under r, or to those g grants it (see the
// package comment); what names p in the message is what (a "cwd", an
// "additionalDirectories entry"). With no roots and no grants nothing is
// confined.
func (r Roots) Check(ns events.Namespace, g Grants, what, p string) (string, error) {
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", events.Errorf(events.CodeInvalidRequest, "%s must be an absolute path", what)
	}
	if hasDotDot(p) {
		return "", events.Errorf(events.CodeInvalidRequest, "%s %q must not contain ..", what, trunc(p))
	}
	// One message for every other refusal, whatever made it: see the
	// package comment.
	refused := events.Errorf(events.CodeInvalidRequest, "%s %q is not in the workspace of namespace %s", what, trunc(p), trunc(string(ns)))
	if !ns.Valid() {
		// An empty namespace would make <root>/<namespace> the root.
		return "", refused
	}
	p = filepath.Clean(p)
	// Each directory ns may work under, as written and resolved: its own
	// under each root (the root resolved, the namespace element not, see
	// the package comment), then what g grants it. A root or grant that
	// cannot be resolved confines nothing.
	var resolvedDirs []string
	for _, root := range r {
		root = filepath.Clean(root)
		if rr, err := Resolve(root); err == nil {
			resolvedDirs = append(resolvedDirs, filepath.Join(rr, string(ns)))
		}
	}
	for _, d := range g[ns] {
		d = filepath.Clean(d)
		if rd, err := Resolve(d); err == nil {
			resolvedDirs = append(resolvedDirs, rd)
		}
	}
	isUnder := func(p string) func(string) bool { return func(d string) bool { return Under(p, d) } }
	resolved, err := Resolve(p)
	if err != nil || !slices.ContainsFunc(resolvedDirs, isUnder(resolved)) {
		return "", refused
	}
	return resolved, nil
}

// Grants are the directories an operator lets a namespace's sessions work
// under besides its own <root>/<namespace>: a shared checkout, or, for an
// administrators' namespace, a root itself. They are given explicitly,
// per namespace, as the workspace-grants flags hold them:
// "ns=/dir,ns=/other,ns2=/dir". Nothing else widens a namespace.
type Grants map[events.Namespace]Roots

// ParseGrants parses a comma-separated list of namespace=directory pairs.
// Each directory must be absolute without a ".." element, and each
// namespace valid; a namespace may appear more than once. Empty elements
// are skipped.
func ParseGrants(list string) (Grants, error) {
	g := Grants{}
	for e := range strings.SplitSeq(list, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name, dir, ok := strings.Cut(e, "=")
		ns := events.Namespace(strings.TrimSpace(name))
		if !ok || !ns.Valid() {
			return nil, fmt.Errorf("workspace grant %q must be namespace=directory", e)
		}
		roots, err := ParseRoots(dir)
		if err != nil {
			return nil, err
		}
		if len(roots) == 0 {
			return nil, fmt.Errorf("workspace grant %q names no directory", e)
		}
		g[ns] = append(g[ns], roots...)
	}
	return g, nil
}

// Validate checks grants set other than by ParseGrants (a Config built in
// code).
func (g Grants) Validate() error {
	for ns, dirs := range g {
		if !ns.Valid() {
			return fmt.Errorf("workspace grant to namespace %q: not a valid namespace", ns)
		}
		if err := dirs.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// String returns g as ParseGrants reads it, namespaces in order.
func (g Grants) String() string {
	var out []string
	for _, ns := range slices.Sorted(maps.Keys(g)) {
		for _, d := range g[ns] {
			out = append(out, string(ns)+"="+d)
		}
	}
	return strings.Join(out, ",")
}

// Set parses list into g: Grants is a flag.Value.
func (g *Grants) Set(list string) error {
	p, err := ParseGrants(list)
	if err != nil {
		return err
	}
	*g = p
	return nil
}

// Under reports whether the clean path p is root or lies under it.
func Under(p, root string) bool {
	if root == string(filepath.Separator) {
		return true
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

func hasDotDot(p string) bool {
	for e := range strings.SplitSeq(filepath.ToSlash(p), "/") {
		if e == ".." {
			return true
		}
	}
	return false
}

// Resolve returns the clean absolute path p with its symlinks resolved:
// the nearest existing ancestor resolved, and the rest, which does not
// exist, appended. A dangling symlink is an error: creating the directory
// would follow it. A directory created between the two looks (another
// adapter of the session starting) is resolved again, not taken for one.
func Resolve(p string) (string, error) {
	var rest []string
	for cur, again := p, 0; ; {
		got, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(append([]string{got}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if fi, lerr := os.Lstat(cur); lerr == nil {
			if fi.Mode()&fs.ModeSymlink != 0 || again == maxResolveAgain {
				return "", errors.New("a symlink in it points nowhere")
			}
			again++
			continue
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", err
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}

// maxResolveAgain bounds Resolve's looks at a path that keeps appearing
// between them.
const maxResolveAgain = 3

func trunc(p string) string {
	if len(p) > 200 {
		return p[:200] + "…"
	}
	return p
}
