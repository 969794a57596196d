package workspace

import (
	"errors"
	"io"
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
// g as Open confines a cwd, read through the directory Open holds, at most limit of them, by name. Without a path
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
	// Opened once, beneath the namespace's directory, and read through
	// the descriptor: a folder swapped for a symlink at any instant is
	// either refused or never followed (Open).
	held, err := r.Open(ns, g, "path", p, false)
	if err != nil {
		if _, cerr := r.Check(ns, g, "path", p); cerr != nil {
			return nil, cerr
		}
		return nil, events.Errorf(events.CodeInvalidRequest, "path %q is not a folder of the workspace of namespace %s", trunc(filepath.Clean(p)), trunc(string(ns)))
	}
	defer func() { _ = held.Close() }()
	p = filepath.Clean(p)
	notFolder := events.Errorf(events.CodeInvalidRequest, "path %q is not a folder of the workspace of namespace %s", trunc(p), trunc(string(ns)))
	dir := held.File()
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
