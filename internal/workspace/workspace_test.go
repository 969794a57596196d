package workspace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// tree makes a root with a directory in it, a directory outside it, and
// symlinks from inside to each: root/in, root/to-in -> root/in,
// root/to-out -> out, root/to-out-parent/x with to-out-parent -> out, and
// root/dangling -> a path that does not exist.
func tree(t testing.TB) (root, out string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, out = filepath.Join(base, "root"), filepath.Join(base, "out")
	for _, d := range []string{filepath.Join(root, "in"), filepath.Join(out, "x")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"to-in":     filepath.Join(root, "in"),
		"to-out":    out,
		"to-out-up": "../out",
		"dangling":  filepath.Join(out, "nowhere"),
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root, out
}

func TestCheck(t *testing.T) {
	root, out := tree(t)
	roots := workspace.Roots{root}
	for _, tc := range []struct {
		name, path, want string // want "" means refused
	}{
		{"the root", root, root},
		{"a directory in it", root + "/in", root + "/in"},
		{"a directory to be made", root + "/in/new/deeper", root + "/in/new/deeper"},
		{"unclean but confined", root + "//in/./", root + "/in"},
		{"a symlink staying inside", root + "/to-in", root + "/in"},
		{"below a symlink staying inside", root + "/to-in/new", root + "/in/new"},
		{"dot dot", root + "/in/../in", ""},
		{"dot dot leaving", root + "/../out", ""},
		{"absolute outside", out, ""},
		{"the root's parent", filepath.Dir(root), ""},
		{"a sibling with the root as prefix", root + "-other", ""},
		{"relative", "in", ""},
		{"empty", "", ""},
		{"a symlink pointing outside", root + "/to-out", ""},
		{"a relative symlink pointing outside", root + "/to-out-up", ""},
		{"below a symlinked parent", root + "/to-out/x", ""},
		{"to be made below a symlinked parent", root + "/to-out/new", ""},
		{"a dangling symlink", root + "/dangling", ""},
		{"below a dangling symlink", root + "/dangling/new", ""},
		{"a NUL", root + "/in\x00", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := roots.Check("cwd", tc.path)
			if tc.want == "" {
				if err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
					t.Errorf("Check(%q) = %q, %v; want %s", tc.path, got, err, events.CodeInvalidRequest)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Check(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
	if _, err := (workspace.Roots{}).Check("cwd", root); err == nil {
		t.Errorf("Check with no roots accepted %q", root)
	}
}

// A root that is itself reached through a symlink confines to where it
// points: the paths under it resolve there.
func TestCheckSymlinkedRoot(t *testing.T) {
	root, _ := tree(t)
	link := filepath.Join(filepath.Dir(root), "root-link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	roots := workspace.Roots{link}
	if got, err := roots.Check("cwd", link+"/in"); err != nil || got != root+"/in" {
		t.Errorf("Check(%q) = %q, %v; want %q", link+"/in", got, err, root+"/in")
	}
	if _, err := roots.Check("cwd", link+"/to-out"); err == nil {
		t.Errorf("Check(%q) accepted a symlink pointing outside", link+"/to-out")
	}
}

func TestParseRootsAndDefault(t *testing.T) {
	r, err := workspace.ParseRoots(" /a/b/ ,, /c")
	if err != nil || r.String() != "/a/b,/c" {
		t.Fatalf("ParseRoots = %v, %v; want /a/b,/c", r, err)
	}
	if got := r.Default("team", "s1"); got != "/a/b/team/s1" {
		t.Errorf("Default = %q, want /a/b/team/s1", got)
	}
	for _, bad := range []string{"rel", "/a/../b"} {
		if _, err := workspace.ParseRoots(bad); err == nil {
			t.Errorf("ParseRoots(%q) succeeded", bad)
		}
	}
	if got := (workspace.Roots{}).Default("team", "s1"); got != "" {
		t.Errorf("Default with no roots = %q, want empty", got)
	}
}

func TestCheckEnv(t *testing.T) {
	allow := []string{"EXACT", "MY_*"}
	for name, ok := range map[string]bool{"EXACT": true, "MY_": true, "MY_TOKEN": true, "EXACTLY": false, "PATH": false, "MY": false} {
		if got := workspace.EnvAllowed(allow, name); got != ok {
			t.Errorf("EnvAllowed(%v, %q) = %v, want %v", allow, name, got, ok)
		}
	}
	if err := workspace.CheckEnv("a", allow, map[string]string{"EXACT": "1", "MY_X": "2"}); err != nil {
		t.Errorf("CheckEnv of allowed names = %v", err)
	}
	err := workspace.CheckEnv("a", nil, map[string]string{"SECRET_NAME": "hunter2-value"})
	if err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
		t.Fatalf("CheckEnv with nothing allowed = %v, want %s", err, events.CodeInvalidRequest)
	}
	if msg := err.Error(); !strings.Contains(msg, "SECRET_NAME") || strings.Contains(msg, "hunter2") {
		t.Errorf("CheckEnv error %q: want the name, never the value", msg)
	}
}

// FuzzCheck: Check never panics, and what it accepts is absolute, clean,
// free of "..", and under the root both as written and resolved.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"", "/", "in", "in/new", "to-in", "to-out", "to-out/x", "to-out-up", "dangling/x", "../out", "in/../..", "in//.", "\x00", "in/\x00"} {
		f.Add(s)
	}
	root, _ := tree(f)
	roots := workspace.Roots{root}
	f.Fuzz(func(t *testing.T, rel string) {
		for _, p := range []string{root + "/" + rel, rel} {
			got, err := roots.Check("cwd", p)
			if err != nil {
				if events.AsError(err).Code != events.CodeInvalidRequest {
					t.Fatalf("Check(%q) = %v, want %s", p, err, events.CodeInvalidRequest)
				}
				continue
			}
			if !filepath.IsAbs(got) || filepath.Clean(got) != got || strings.Contains(got, "/../") {
				t.Fatalf("Check(%q) = %q: not absolute and clean", p, got)
			}
			if got != root && !strings.HasPrefix(got, root+"/") {
				t.Fatalf("Check(%q) = %q: outside %s", p, got, root)
			}
			if resolved, err := filepath.EvalSymlinks(got); err == nil && resolved != got {
				t.Fatalf("Check(%q) = %q, which resolves further, to %q", p, got, resolved)
			}
		}
	})
}

// FuzzCheckEnv: a refusal never holds a value, and a name passes exactly
// when a pattern allows it.
func FuzzCheckEnv(f *testing.F) {
	f.Add("MY_*", "MY_TOKEN", "v")
	f.Add("EXACT", "EXACTLY", "secret")
	f.Add("*", "", "")
	f.Fuzz(func(t *testing.T, pattern, name, value string) {
		const marker = "\x01value:"
		err := workspace.CheckEnv("a", []string{pattern}, map[string]string{name: marker + value})
		if (err == nil) != workspace.EnvAllowed([]string{pattern}, name) {
			t.Fatalf("CheckEnv(%q, %q) = %v, EnvAllowed says otherwise", pattern, name, err)
		}
		if err != nil && strings.Contains(err.Error(), marker) {
			t.Fatalf("CheckEnv error %q holds the value", err)
		}
	})
}

func TestRootsValidate(t *testing.T) {
	if err := (workspace.Roots{"/a", "/b/"}).Validate(); err != nil {
		t.Errorf("Validate of absolute roots = %v", err)
	}
	for _, bad := range []workspace.Roots{{"rel"}, {"/a/../b"}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%v) = nil, want an error", bad)
		}
	}
	// A root written unclean confines like its clean form.
	dir := t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	if got, err := (workspace.Roots{dir + "/"}).Check("cwd", dir+"/x"); err != nil || got != dir+"/x" {
		t.Errorf("Check under an unclean root = %q, %v; want %q", got, err, dir+"/x")
	}
}
