//go:build linux

package workspace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// Open accepts what Check accepts and holds where it leads: a symlink
// that stays inside the namespace's directory is followed (as Check
// accepts it), one out of it is refused, as is anything through another
// namespace's directory or the root.
func TestOpen(t *testing.T) {
	root, out := tree(t)
	a := filepath.Join(root, string(ns))
	roots := workspace.Roots{root}
	for _, tc := range []struct {
		name, path, want string // want "" means refused
	}{
		{"the namespace's directory", a, a},
		{"a directory in it", a + "/in", a + "/in"},
		{"unclean but confined", a + "//in/./", a + "/in"},
		{"a symlink staying inside", a + "/to-in", a + "/in"},
		{"back in through the root", a + "/to-root/" + string(ns) + "/in", a + "/in"},
		{"the root", root, ""},
		{"another namespace's directory", root + "/" + string(other), ""},
		{"in another namespace", root + "/" + string(other) + "/x", ""},
		{"a symlink into another namespace", a + "/to-b", ""},
		{"below a symlink into another namespace", a + "/to-b/x", ""},
		{"a relative symlink into another namespace", a + "/to-b-rel/x", ""},
		{"a symlink to the root", a + "/to-root", ""},
		{"through the root to another namespace", a + "/to-root/" + string(other), ""},
		{"a symlink pointing outside", a + "/to-out", ""},
		{"a relative symlink pointing outside", a + "/to-out-up", ""},
		{"below a symlinked parent", a + "/to-out/x", ""},
		{"a dangling symlink", a + "/dangling", ""},
		{"missing, not created", a + "/absent", ""},
		{"absolute outside", out, ""},
		{"dot dot", a + "/in/../in", ""},
		{"relative", "in", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := roots.Open(ns, nil, "cwd", tc.path, false)
			if tc.want == "" {
				if err == nil {
					d.Close()
					t.Fatalf("Open(%q) = %q, want a refusal", tc.path, d.Path())
				}
				if _, cerr := roots.Check(ns, nil, "cwd", tc.path); cerr != nil && cerr.Error() != err.Error() {
					t.Errorf("Open(%q) refuses %q, Check %q: want the same message", tc.path, err, cerr)
				}
				if events.AsError(err).Code != events.CodeInvalidRequest {
					t.Errorf("Open(%q) = %v, want %s", tc.path, err, events.CodeInvalidRequest)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q) = %v, want %q", tc.path, err, tc.want)
			}
			defer d.Close()
			if d.Path() != tc.want {
				t.Errorf("Open(%q).Path() = %q, want %q", tc.path, d.Path(), tc.want)
			}
			same(t, d, tc.want)
		})
	}
}

// same checks that d holds the directory at want.
func same(t *testing.T, d *workspace.Dir, want string) {
	t.Helper()
	held, err := d.File().Stat()
	if err != nil {
		t.Fatal(err)
	}
	at, err := os.Stat(want)
	if err != nil || !os.SameFile(held, at) {
		t.Errorf("the held directory is not %s (%v)", want, err)
	}
}

// With create, Open makes what is missing, in the namespace's directory
// only: a path through a symlink out of it creates nothing there.
func TestOpenCreate(t *testing.T) {
	root, out := tree(t)
	a, b := filepath.Join(root, string(ns)), filepath.Join(root, string(other))
	roots := workspace.Roots{root}
	d, err := roots.Open(ns, nil, "cwd", a+"/new/deeper", true)
	if err != nil {
		t.Fatal(err)
	}
	same(t, d, a+"/new/deeper")
	d.Close()
	if d, err := roots.Open(ns, nil, "cwd", a+"/to-in/made", true); err != nil {
		t.Errorf("Open below a symlink staying inside: %v", err)
	} else {
		same(t, d, a+"/in/made")
		d.Close()
	}
	for _, p := range []string{a + "/to-b/new", a + "/to-b-rel/new/deeper", a + "/to-out/new", a + "/to-root/" + string(other) + "/new", b + "/new"} {
		if d, err := roots.Open(ns, nil, "cwd", p, true); err == nil {
			d.Close()
			t.Errorf("Open(%q, create) = %q, want a refusal", p, d.Path())
		}
	}
	for _, p := range []string{b + "/new", out + "/new"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("a refused Open made %s", p)
		}
	}
	// A namespace's directory and a root that do not exist yet are made.
	fresh := filepath.Join(filepath.Dir(root), "fresh-root")
	if d, err := (workspace.Roots{fresh}).Open(ns, nil, "cwd", fresh+"/"+string(ns)+"/s1", true); err != nil {
		t.Errorf("Open in a root to be made: %v", err)
	} else {
		same(t, d, fresh+"/"+string(ns)+"/s1")
		d.Close()
	}
}

// A namespace's directory swapped for a symlink, even to another
// namespace's, confines that namespace to nothing: Open refuses it, and
// creates nothing through it.
func TestOpenSymlinkedNamespaceDirectory(t *testing.T) {
	root, _ := tree(t)
	if err := os.Symlink(filepath.Join(root, string(other)), filepath.Join(root, "team-c")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{root + "/team-c", root + "/team-c/x", root + "/team-c/new"} {
		if d, err := (workspace.Roots{root}).Open("team-c", nil, "cwd", p, true); err == nil {
			d.Close()
			t.Errorf("Open(%q) in team-c = %q, want a refusal", p, d.Path())
		}
	}
	if _, err := os.Lstat(root + "/" + string(other) + "/new"); err == nil {
		t.Errorf("Open made a directory through the swapped namespace directory")
	}
}

// The held directory stays the one opened: its name swapped for a symlink
// to another namespace's directory afterwards changes nothing of what
// goes through the descriptor.
func TestOpenHolds(t *testing.T) {
	root, _ := tree(t)
	a, b := filepath.Join(root, string(ns)), filepath.Join(root, string(other))
	if err := os.WriteFile(a+"/in/mine.txt", []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b+"/x/secret.txt", []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := (workspace.Roots{root}).Open(ns, nil, "cwd", a+"/in", false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.Rename(a+"/in", a+"/was-in"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(b+"/x", a+"/in"); err != nil {
		t.Fatal(err)
	}
	r, err := d.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.ReadFile("mine.txt"); err != nil || string(got) != "mine" {
		t.Errorf("through the held root: %q, %v; want mine", got, err)
	}
	if _, err := r.ReadFile("secret.txt"); err == nil {
		t.Errorf("the held root reads the other namespace's file")
	}
	if d, err := (workspace.Roots{root}).Open(ns, nil, "cwd", a+"/in", false); err == nil {
		d.Close()
		t.Errorf("Open through the swapped symlink = %q, want a refusal", d.Path())
	}
}

// A cwd written through a symlink outside every root that leads into the
// namespace's directory is accepted, by Check and Open, as skein dev's
// README promises of <project>/.skein/workspaces/<namespace>/x: .skein is
// a link to the data directory, whose workspaces directory is the root.
// The same link into another namespace's directory is refused.
func TestOpenThroughDataLink(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, project := filepath.Join(base, "state", "dev", "abc"), filepath.Join(base, "project")
	root := filepath.Join(data, "workspaces")
	for _, d := range []string{root + "/" + string(other) + "/bsec", project} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(data, project+"/.skein"); err != nil {
		t.Fatal(err)
	}
	roots := workspace.Roots{root}
	grants := workspace.Grants{events.DefaultNamespace: {project}}
	for _, tc := range []struct {
		ns   events.Namespace
		path string
		want string
	}{
		{ns, project + "/.skein/workspaces/" + string(ns) + "/x", root + "/" + string(ns) + "/x"},
		{ns, project + "/.skein/workspaces/" + string(ns), root + "/" + string(ns)},
		{events.DefaultNamespace, project + "/.skein/workspaces/default/s", root + "/default/s"},
		{ns, project + "/.skein/workspaces/" + string(other) + "/bsec", ""},
		{ns, project + "/.skein/workspaces", ""},
		{events.DefaultNamespace, project + "/.skein/workspaces/" + string(other) + "/bsec", ""},
	} {
		checked, cerr := roots.Check(tc.ns, grants, "cwd", tc.path)
		d, err := roots.Open(tc.ns, grants, "cwd", tc.path, true)
		if tc.want == "" {
			if err == nil || cerr == nil {
				t.Errorf("%s: Open(%q) = %v, Check %q %v: want refusals", tc.ns, tc.path, err, checked, cerr)
			}
			if err == nil {
				d.Close()
			}
			continue
		}
		if err != nil || cerr != nil || checked != tc.want {
			t.Errorf("%s: Open(%q) = %v, Check = %q %v; want %q", tc.ns, tc.path, err, checked, cerr, tc.want)
			continue
		}
		if d.Path() != tc.want {
			t.Errorf("%s: Open(%q).Path() = %q, want %q", tc.ns, tc.path, d.Path(), tc.want)
		}
		same(t, d, tc.want)
		d.Close()
	}
}

// FuzzOpen: Open never panics, refuses with CodeInvalidRequest, and what
// it holds lies in the namespace's directory, wherever the path leads
// (with create, what it makes too).
func FuzzOpen(f *testing.F) {
	for _, s := range []string{"", "/", "team-a", "team-a/in", "team-a/in/new", "team-a/to-in", "team-a/to-out", "team-a/to-out/x", "team-a/to-out-up",
		"team-a/dangling/x", "team-a/to-b/x", "team-a/to-b-rel", "team-a/to-root/team-a", "team-a/to-root/team-b/new", "team-b/x", "../out", "team-a/in/../..", "team-a//.", "\x00", "team-a/\x00"} {
		f.Add(s, false)
	}
	root, _ := tree(f)
	roots := workspace.Roots{root}
	a := root + "/" + string(ns)
	f.Fuzz(func(t *testing.T, rel string, create bool) {
		for _, p := range []string{root + "/" + rel, rel} {
			d, err := roots.Open(ns, nil, "cwd", p, create)
			if err != nil {
				if events.AsError(err).Code != events.CodeInvalidRequest {
					t.Fatalf("Open(%q) = %v, want %s", p, err, events.CodeInvalidRequest)
				}
				continue
			}
			real, err := os.Readlink(d.ProcPath())
			d.Close()
			if err != nil || (real != a && !strings.HasPrefix(real, a+"/")) {
				t.Fatalf("Open(%q) holds %q (%v): outside %s", p, real, err, a)
			}
		}
	})
}
