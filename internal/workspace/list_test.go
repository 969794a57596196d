package workspace_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

func names(resp *events.ListDirectoriesResponse) []string {
	var out []string
	for _, d := range resp.Directories {
		out = append(out, d.Name)
	}
	return out
}

// Listing tells the folders of the namespace's workspace, and nothing
// else: not files, not symlinks (even those leading inside), not another
// namespace's folders, not the root.
func TestList(t *testing.T) {
	root, out := tree(t)
	a := filepath.Join(root, string(ns))
	if err := os.WriteFile(filepath.Join(a, "secret.txt"), []byte("the contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(a, "in", "deep"), 0o700); err != nil {
		t.Fatal(err)
	}
	grant := filepath.Join(out, "x")
	roots, grants := workspace.Roots{root}, workspace.Grants{ns: {grant}}

	top, err := roots.List(ns, grants, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.DirectoryEntry{{Name: string(ns), Path: a}, {Name: "x", Path: grant}}
	if !slices.Equal(top.Directories, want) || top.Path != "" || top.Parent != "" {
		t.Errorf("List(no path) = %+v, want %v and no path or parent", top, want)
	}

	got, err := roots.List(ns, grants, &a, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n := names(got); !slices.Equal(n, []string{"in"}) {
		t.Errorf("List(%s) = %v, want only the folder in (no file, no symlink)", a, n)
	}
	if got.Path != a || got.Parent != "" {
		t.Errorf("List(%s) path %q parent %q; want the path, and no parent above the namespace's directory", a, got.Path, got.Parent)
	}
	if strings.Contains(fmt.Sprint(got), "secret") {
		t.Errorf("List told of a file: %+v", got)
	}
	in := a + "/in"
	got, err = roots.List(ns, grants, &in, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Directories, []events.DirectoryEntry{{Name: "deep", Path: in + "/deep"}}) || got.Parent != a {
		t.Errorf("List(%s) = %+v, want deep, with parent %s", in, got, a)
	}

	for _, p := range []string{
		root,                               // the root holds every namespace
		filepath.Join(root, string(other)), // another namespace's
		out,                                // outside
		a + "/to-out",                      // a symlink that leads out
		a + "/to-b",                        // a symlink to another namespace
		a + "/../" + string(other),         // ..
		"relative",                         // not absolute
		a + "/secret.txt",                  // a file
		a + "/missing",                     // nothing
	} {
		if resp, err := roots.List(ns, grants, &p, 100); events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("List(%s) = %+v, %v; want %s", p, resp, err, events.CodeInvalidRequest)
		}
	}
	// Refusals read the same whatever is there.
	_, e1 := roots.List(ns, grants, new(filepath.Join(root, string(other), "x")), 100)
	_, e2 := roots.List(ns, grants, new(filepath.Join(root, string(other), "nothing")), 100)
	if e1 == nil || e2 == nil || strings.ReplaceAll(e1.Error(), "/x", "/nothing") != e2.Error() {
		t.Errorf("refusals differ by what is there: %v and %v", e1, e2)
	}
	if _, err := (workspace.Roots{}).List(ns, nil, &a, 100); err == nil {
		t.Errorf("List with no roots listed %s", a)
	}
}

// A folder of more folders than asked for is listed up to the bound, and
// says so.
func TestListTruncated(t *testing.T) {
	root, _ := tree(t)
	dir := filepath.Join(root, string(ns), "in")
	for i := range 5 {
		if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("d%d", i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	got, err := workspace.Roots{root}.List(ns, nil, &dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Directories) != 3 || !got.Truncated {
		t.Errorf("List with limit 3 of 5 folders = %d folders, truncated %v", len(got.Directories), got.Truncated)
	}
}
