package workspace

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// Listing folders, for a client choosing a session's cwd. It tells names
// and paths of folders and nothing else: never a file, never what a file
// holds. What it lists is confined exactly as a cwd is (Check): a path
// outside the namespace's directories is refused with the one message
// Check gives, whatever is there. Symlinks are not listed, not even those
// that lead to a folder inside the workspace: following one is what Check
// refuses when it leads out, and a listing must not be the way to find out
// where it leads.

// maxListScan bounds the entries one listing reads, folders and files
// together, so that a directory of millions of files costs a bounded read.
const maxListScan = 100_000

// List returns the folders under path for namespace ns, confined by r and
// g as Check confines a cwd, at most limit of them, by name. Without a path
// (nil) it returns ns's own directories: <root>/<ns> under each root, then
// what g grants ns. A path that Check refuses, or that is not a folder, is
// CodeInvalidRequest. With no roots and no grants nothing is confined, so
// nothing is listed.
func (r Roots) List(ns events.Namespace, g Grants, path *string, limit int) (*events.ListDirectoriesResponse, error) {
	if !ns.Valid() {
		return nil, events.Errorf(events.CodeInvalidNamespace, "namespace %q must match [a-z0-9][a-z0-9_-]{0,62}", trunc(string(ns)))
	}
	if len(r) == 0 && len(g[ns]) == 0 {
		return nil, events.Errorf(events.CodeInvalidRequest, "no workspace roots are configured: there is nothing to list")
	}
	resp := &events.ListDirectoriesResponse{Directories: []events.DirectoryEntry{}}
	if path == nil {
		var seen []string
		add := func(p string) {
			p = filepath.Clean(p)
			if !slices.Contains(seen, p) {
				seen = append(seen, p)
				resp.Directories = append(resp.Directories, events.DirectoryEntry{Name: filepath.Base(p), Path: p})
			}
		}
		for _, root := range r {
			add(filepath.Join(root, string(ns)))
		}
		for _, d := range g[ns] {
			add(d)
		}
		return resp, nil
	}
	p := *path
	resolved, err := r.Check(ns, g, "path", p)
	if err != nil {
		return nil, err
	}
	p = filepath.Clean(p)
	notFolder := events.Errorf(events.CodeInvalidRequest, "path %q is not a folder of the workspace of namespace %s", trunc(p), trunc(string(ns)))
	// A FIFO or a device the agent put there is refused by the open
	// itself, which never waits for it (openDirFlags).
	dir, err := os.OpenFile(resolved, os.O_RDONLY|openDirFlags, 0)
	if err != nil {
		return nil, notFolder
	}
	defer func() { _ = dir.Close() }()
	if st, err := dir.Stat(); err != nil || !st.IsDir() {
		return nil, notFolder
	}
	// A folder swapped for a symlink between the check and the open was
	// followed by the open: checking again, now that it is open, catches
	// that (as the runner's confine does for a cwd).
	if again, err := r.Check(ns, g, "path", p); err != nil || again != resolved {
		return nil, events.Errorf(events.CodeInvalidRequest, "path %q is not in the workspace of namespace %s", trunc(p), trunc(string(ns)))
	}
	for scanned := 0; scanned < maxListScan; {
		batch, err := dir.ReadDir(1024)
		scanned += len(batch)
		for _, e := range batch {
			// Only folders; a name JSON cannot carry exactly is left out,
			// since no client could give it back as a cwd.
			if !e.Type().IsDir() || !utf8.ValidString(e.Name()) {
				continue
			}
			if len(resp.Directories) == limit {
				resp.Truncated = true
				break
			}
			resp.Directories = append(resp.Directories, events.DirectoryEntry{Name: e.Name(), Path: filepath.Join(p, e.Name())})
		}
		if errors.Is(err, io.EOF) || len(batch) == 0 || resp.Truncated {
			break
		}
		if err != nil {
			return nil, notFolder
		}
		if scanned >= maxListScan {
			resp.Truncated = true
		}
	}
	slices.SortFunc(resp.Directories, func(a, b events.DirectoryEntry) int { return strings.Compare(a.Name, b.Name) })
	resp.Path = p
	if parent := filepath.Dir(p); parent != p {
		if _, err := r.Check(ns, g, "path", parent); err == nil {
			resp.Parent = parent
		}
	}
	return resp, nil
}
