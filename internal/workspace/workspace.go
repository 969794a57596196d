// Package workspace confines the working directories of agent adapters to
// configured roots.
//
// A session names the directories its agent works in: its cwd and its
// additionalDirectories. An adapter runs with the runner's user, so a path
// is the whole of what keeps one session's agent out of another's files
// and out of the machine's. Roots.Check is the one rule, applied twice:
// by the session service when a session is opened (nothing is recorded
// for a path it refuses) and by the adapter-runner when it launches the
// adapter, which is what the agent gets. The second check is the one that
// counts: the roots may have changed since the session was opened, and a
// directory may have been replaced by a symlink.
//
// A path is confined when it is absolute, has no ".." element, and, with
// every symlink resolved, lies under a root (itself resolved). A path that
// does not exist yet is resolved through its nearest existing ancestor, so
// that creating it cannot leave the roots either. Check returns the
// resolved path: the runner starts the adapter there, not at the path as
// written, so a symlink swapped between the check and the start of the
// process is not followed. (A parent swapped after that instant is the
// residue no path check closes; a mount namespace would.)
//
// Checking touches the file system of the process that checks: the
// session service's check of symlinks holds only where it sees the
// runners' file system (one machine, as with skein dev); elsewhere it
// checks the roots as written, and the runner's check decides.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
// to r (see the package comment); what names p in the message is what (a
// "cwd", an "additionalDirectories entry"). With no roots nothing is
// confined.
func (r Roots) Check(what, p string) (string, error) {
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", events.Errorf(events.CodeInvalidRequest, "%s must be an absolute path", what)
	}
	if hasDotDot(p) {
		return "", events.Errorf(events.CodeInvalidRequest, "%s %q must not contain ..", what, trunc(p))
	}
	p = filepath.Clean(p)
	if !r.lexicallyUnder(p) {
		return "", events.Errorf(events.CodeInvalidRequest, "%s %q is outside the workspace roots %s", what, trunc(p), r)
	}
	resolved, err := resolve(p)
	if err != nil {
		return "", events.Errorf(events.CodeInvalidRequest, "%s %q: %v", what, trunc(p), err)
	}
	for _, root := range r {
		rr, err := resolve(filepath.Clean(root))
		if err == nil && under(resolved, rr) {
			return resolved, nil
		}
	}
	return "", events.Errorf(events.CodeInvalidRequest, "%s %q leaves the workspace roots %s through a symlink", what, trunc(p), r)
}

// lexicallyUnder reports whether the clean path p is under a root as
// written.
func (r Roots) lexicallyUnder(p string) bool {
	for _, root := range r {
		if under(p, filepath.Clean(root)) {
			return true
		}
	}
	return false
}

// under reports whether the clean path p is root or below it.
func under(p, root string) bool {
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

// resolve returns the clean absolute path p with its symlinks resolved:
// the nearest existing ancestor resolved, and the rest, which does not
// exist, appended. A dangling symlink is an error: creating the directory
// would follow it.
func resolve(p string) (string, error) {
	var rest []string
	for cur := p; ; {
		got, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(append([]string{got}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if _, lerr := os.Lstat(cur); lerr == nil {
			return "", errors.New("a symlink in it points nowhere")
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", err
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}

func trunc(p string) string {
	if len(p) > 200 {
		return p[:200] + "…"
	}
	return p
}
