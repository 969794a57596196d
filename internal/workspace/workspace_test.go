package workspace_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// The namespace the tests check for, and another.
const ns, other = events.Namespace("team-a"), events.Namespace("team-b")

// tree makes a root with the directories of two namespaces in it, a
// directory outside it, and symlinks in team-a's directory: to-in ->
// root/team-a/in, to-out -> out, to-out-up -> ../../out, dangling -> a
// path that does not exist, to-b -> root/team-b, to-b-rel -> ../team-b,
// to-root -> root.
func tree(t testing.TB) (root, out string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, out = filepath.Join(base, "root"), filepath.Join(base, "out")
	a := filepath.Join(root, string(ns))
	for _, d := range []string{filepath.Join(a, "in"), filepath.Join(root, string(other), "x"), filepath.Join(out, "x")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"to-in":     filepath.Join(a, "in"),
		"to-out":    out,
		"to-out-up": "../../out",
		"dangling":  filepath.Join(out, "nowhere"),
		"to-b":      filepath.Join(root, string(other)),
		"to-b-rel":  "../" + string(other),
		"to-root":   root,
	} {
		if err := os.Symlink(target, filepath.Join(a, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root, out
}

func TestCheck(t *testing.T) {
	root, out := tree(t)
	a, b := filepath.Join(root, string(ns)), filepath.Join(root, string(other))
	roots := workspace.Roots{root}
	for _, tc := range []struct {
		name, path, want string // want "" means refused
	}{
		{"the namespace's directory", a, a},
		{"a directory in it", a + "/in", a + "/in"},
		{"a directory to be made", a + "/in/new/deeper", a + "/in/new/deeper"},
		{"unclean but confined", a + "//in/./", a + "/in"},
		{"a symlink staying inside", a + "/to-in", a + "/in"},
		{"below a symlink staying inside", a + "/to-in/new", a + "/in/new"},
		{"back in through the root", a + "/to-root/" + string(ns) + "/in", a + "/in"},
		{"the root", root, ""},
		{"the root unclean", root + "/./", ""},
		{"another namespace's directory", b, ""},
		{"in another namespace", b + "/x", ""},
		{"to be made in another namespace", b + "/new", ""},
		{"a sibling with the namespace as prefix", a + "-other", ""},
		{"a symlink into another namespace", a + "/to-b", ""},
		{"below a symlink into another namespace", a + "/to-b/x", ""},
		{"to be made below it", a + "/to-b/new", ""},
		{"a relative symlink into another namespace", a + "/to-b-rel/x", ""},
		{"a symlink to the root", a + "/to-root", ""},
		{"through the root to another namespace", a + "/to-root/" + string(other), ""},
		{"dot dot", a + "/in/../in", ""},
		{"dot dot leaving", a + "/../" + string(other), ""},
		{"absolute outside", out, ""},
		{"the root's parent", filepath.Dir(root), ""},
		{"a sibling with the root as prefix", root + "-other/" + string(ns), ""},
		{"relative", "in", ""},
		{"empty", "", ""},
		{"a symlink pointing outside", a + "/to-out", ""},
		{"a relative symlink pointing outside", a + "/to-out-up", ""},
		{"below a symlinked parent", a + "/to-out/x", ""},
		{"to be made below a symlinked parent", a + "/to-out/new", ""},
		{"a dangling symlink", a + "/dangling", ""},
		{"below a dangling symlink", a + "/dangling/new", ""},
		{"a NUL", a + "/in\x00", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := roots.Check(ns, nil, "cwd", tc.path)
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
	if _, err := (workspace.Roots{}).Check(ns, nil, "cwd", a); err == nil {
		t.Errorf("Check with no roots accepted %q", a)
	}
	for _, bad := range []events.Namespace{"", ".", "..", "a/b"} {
		if got, err := roots.Check(bad, nil, "cwd", root+"/"+string(bad)); err == nil {
			t.Errorf("Check in namespace %q accepted %q", bad, got)
		}
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
	in, want := link+"/"+string(ns)+"/in", root+"/"+string(ns)+"/in"
	if got, err := roots.Check(ns, nil, "cwd", in); err != nil || got != want {
		t.Errorf("Check(%q) = %q, %v; want %q", in, got, err, want)
	}
	for _, p := range []string{link + "/" + string(ns) + "/to-out", link + "/" + string(other) + "/x", link} {
		if _, err := roots.Check(ns, nil, "cwd", p); err == nil {
			t.Errorf("Check(%q) accepted it", p)
		}
	}
}

// A namespace's directory swapped for a symlink, even to another
// namespace's, confines that namespace to nothing.
func TestCheckSymlinkedNamespaceDirectory(t *testing.T) {
	root, _ := tree(t)
	if err := os.Symlink(filepath.Join(root, string(other)), filepath.Join(root, "team-c")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{root + "/team-c", root + "/team-c/x", root + "/team-c/new"} {
		if got, err := (workspace.Roots{root}).Check("team-c", nil, "cwd", p); err == nil {
			t.Errorf("Check(%q) in team-c = %q, want a refusal", p, got)
		}
	}
}

// A grant lets a namespace work under a directory, explicitly; it widens
// that namespace only.
func TestCheckGrants(t *testing.T) {
	root, out := tree(t)
	roots := workspace.Roots{root}
	grants, err := workspace.ParseGrants("ops=" + root + ", team-a=" + out + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b := root + "/" + string(other) + "/x"
	for _, tc := range []struct {
		ns   events.Namespace
		path string
		ok   bool
	}{
		{"ops", root, true},
		{"ops", b, true},
		{"ops", out, false},
		{ns, out + "/x/new", true},
		{ns, out + "/x", true},
		{ns, out, false},
		{ns, root, false},
		{ns, b, false},
		{other, out + "/x", false},
		{other, root, false},
	} {
		got, err := roots.Check(tc.ns, grants, "cwd", tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("namespace %s: Check(%q) = %q, %v; want accepted %v", tc.ns, tc.path, got, err, tc.ok)
		}
	}
	// A grant pointing through a symlink confines to where it points.
	link := root + "/" + string(ns) + "/to-out"
	if got, err := roots.Check("ops", workspace.Grants{"ops": {link}}, "cwd", link+"/x"); err != nil || got != out+"/x" {
		t.Errorf("Check under a symlinked grant = %q, %v; want %q", got, err, out+"/x")
	}
}

// A refusal reads the same whatever is at the path or where a symlink
// leads, and names neither the roots, the grants, nor the target.
func TestCheckRefusalSaysNothing(t *testing.T) {
	root, out := tree(t)
	a, b := root+"/"+string(ns), root+"/"+string(other)
	grants := workspace.Grants{"ops": {out + "/granted"}}
	if err := os.Symlink(b+"/y", a+"/peek"); err != nil {
		t.Fatal(err)
	}
	paths := []string{b + "/y", b + "/y/z", a + "/peek", a + "/peek/z"}
	msgs := func() []string {
		var m []string
		for _, p := range paths {
			_, err := (workspace.Roots{root}).Check(ns, grants, "cwd", p)
			if err == nil {
				t.Fatalf("Check(%q) accepted it", p)
			}
			m = append(m, err.Error())
		}
		return m
	}
	missing := msgs()
	if err := os.MkdirAll(b+"/y/z", 0o700); err != nil {
		t.Fatal(err)
	}
	dirs := msgs()
	if err := os.RemoveAll(b + "/y"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b+"/y", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	files := msgs()
	for i, p := range paths {
		if missing[i] != dirs[i] || missing[i] != files[i] {
			t.Errorf("Check(%q) reads %q missing, %q a directory, %q a file", p, missing[i], dirs[i], files[i])
		}
		for _, leak := range []string{"not a directory", "no such", "nowhere", "symlink", "exist", out} {
			if strings.Contains(missing[i], leak) || strings.Contains(files[i], leak) {
				t.Errorf("Check(%q) = %q: says %q", p, missing[i], leak)
			}
		}
		if strings.HasPrefix(p, a) && strings.Contains(missing[i], string(other)) {
			t.Errorf("Check(%q) = %q: says where the symlink leads", p, missing[i])
		}
	}
	for _, p := range []string{out, "/etc", out + "/absent"} {
		if _, err := (workspace.Roots{root}).Check(ns, grants, "cwd", p); err == nil || strings.Contains(err.Error(), root) {
			t.Errorf("Check(%q) = %v: want a refusal naming no root", p, err)
		}
	}
}

func TestParseGrants(t *testing.T) {
	g, err := workspace.ParseGrants(" ops=/srv/a/ ,, team-a=/srv/b,ops=/srv/c")
	if err != nil || g.String() != "ops=/srv/a,ops=/srv/c,team-a=/srv/b" {
		t.Fatalf("ParseGrants = %v, %v; want ops=/srv/a,ops=/srv/c,team-a=/srv/b", g, err)
	}
	for _, bad := range []string{"/srv/a", "=/srv/a", "Bad=/srv/a", "ops=rel", "ops=/a/../b", "ops="} {
		if _, err := workspace.ParseGrants(bad); err == nil {
			t.Errorf("ParseGrants(%q) succeeded", bad)
		}
	}
	if err := (workspace.Grants{"ops": {"/a"}}).Validate(); err != nil {
		t.Errorf("Validate of a good grant = %v", err)
	}
	for _, bad := range []workspace.Grants{{"": {"/a"}}, {"ops": {"rel"}}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%v) = nil, want an error", bad)
		}
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

// A variable no process can be given is refused, whatever the agent
// allows, and the refusal names it but never its value.
func TestValidEnv(t *testing.T) {
	const secret = "v4lue-0e3d"
	for name, value := range map[string]string{"": "x", "A=B": "x", "=": "x", "A\x00B": "x", "NUL_VALUE": secret + "\x00", "LEADING": "\x00" + secret} {
		env := map[string]string{"FINE": "1", name: value}
		for _, err := range []error{workspace.ValidEnv(env), workspace.CheckEnv("a", []string{"*"}, env)} {
			if err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
				t.Errorf("env %q=%q: %v, want %s", name, value, err, events.CodeInvalidRequest)
			} else if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "FINE") {
				t.Errorf("env %q=%q: refusal %q names a value or a good variable", name, value, err)
			}
		}
	}
	for _, env := range []map[string]string{nil, {"A": ""}, {"A_B": "x=y z"}, {"É": "ü\n"}} {
		if err := workspace.ValidEnv(env); err != nil {
			t.Errorf("ValidEnv(%q) = %v", env, err)
		}
	}
}

// FuzzCheck: Check never panics, and what it accepts is absolute, clean,
// free of "..", and under the namespace's directory, resolved.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"", "/", "team-a", "team-a/in", "team-a/in/new", "team-a/to-in", "team-a/to-out", "team-a/to-out/x", "team-a/to-out-up",
		"team-a/dangling/x", "team-a/to-b/x", "team-a/to-b-rel", "team-a/to-root/team-a", "team-b/x", "../out", "team-a/in/../..", "team-a//.", "\x00", "team-a/\x00"} {
		f.Add(s)
	}
	root, _ := tree(f)
	roots := workspace.Roots{root}
	a := root + "/" + string(ns)
	f.Fuzz(func(t *testing.T, rel string) {
		for _, p := range []string{root + "/" + rel, rel} {
			got, err := roots.Check(ns, nil, "cwd", p)
			if err != nil {
				if events.AsError(err).Code != events.CodeInvalidRequest {
					t.Fatalf("Check(%q) = %v, want %s", p, err, events.CodeInvalidRequest)
				}
				continue
			}
			if !filepath.IsAbs(got) || filepath.Clean(got) != got || strings.Contains(got, "/../") {
				t.Fatalf("Check(%q) = %q: not absolute and clean", p, got)
			}
			if got != a && !strings.HasPrefix(got, a+"/") {
				t.Fatalf("Check(%q) = %q: outside %s", p, got, a)
			}
			if resolved, err := filepath.EvalSymlinks(got); err == nil && resolved != got {
				t.Fatalf("Check(%q) = %q, which resolves further, to %q", p, got, resolved)
			}
		}
	})
}

// FuzzCheckEnv: a refusal never holds a value, and a variable passes
// exactly when a pattern allows its name and ValidEnv its shape.
func FuzzCheckEnv(f *testing.F) {
	f.Add("MY_*", "MY_TOKEN", "v")
	f.Add("EXACT", "EXACTLY", "secret")
	f.Add("*", "", "")
	f.Add("*", "A=B", "v")
	f.Add("A*", "A\x00", "v")
	f.Add("*", "A", "v\x00w")
	f.Fuzz(func(t *testing.T, pattern, name, value string) {
		const marker = "\x01value:"
		err := workspace.CheckEnv("a", []string{pattern}, map[string]string{name: marker + value})
		valid := workspace.ValidEnv(map[string]string{name: marker + value}) == nil
		if (err == nil) != (valid && workspace.EnvAllowed([]string{pattern}, name)) {
			t.Fatalf("CheckEnv(%q, %q) = %v, EnvAllowed and ValidEnv say otherwise", pattern, name, err)
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
	want := dir + "/" + string(ns) + "/x"
	if got, err := (workspace.Roots{dir + "/"}).Check(ns, nil, "cwd", want); err != nil || got != want {
		t.Errorf("Check under an unclean root = %q, %v; want %q", got, err, want)
	}
}

// Two adapters of one session start at once: each checks the session's
// directory, creates it, and checks it again. A check that looks while
// the other creates it must not take the new directory for a dangling
// symlink.
func TestCheckWhileCreated(t *testing.T) {
	root := t.TempDir()
	roots := workspace.Roots{root}
	for i := range 500 {
		dir := filepath.Join(root, string(ns), "s", strconv.Itoa(i))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k := range 2 {
			wg.Go(func() {
				if _, err := roots.Check(ns, nil, "cwd", dir); err != nil {
					errs[k] = err
					return
				}
				errs[k] = os.MkdirAll(dir, 0o700)
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
	}
}
