package adapterrunner

import (
	"os"
	"path/filepath"
	"testing"
)

// What of a script an agent's args name the sandbox grants: its package
// root (the nearest directory with a package.json) or its node_modules
// tree, but never a directory that is or holds a home directory, the data
// directory or a workspace root, nor /: there only the file is granted.
func TestSecurityScriptPackageRootStops(t *testing.T) {
	base := t.TempDir()
	put := func(rel string) string {
		t.Helper()
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	home := filepath.Join(base, "home", "me")
	data := filepath.Join(base, "srv", "data")
	roots := []string{filepath.Join(base, "work", "ws")}
	put("home/me/package.json")
	inHome := put("home/me/agents/agent.mjs")
	put("home/me/pkg/package.json")
	inPkg := put("home/me/pkg/dist/agent.mjs")
	inModules := put("opt/lib/node_modules/@acp/agent/dist/index.js")
	put("srv/package.json")
	besideData := put("srv/agent.mjs")
	put("work/package.json")
	aboveRoot := put("work/bin/agent.mjs")
	put("package.json")
	noPackage := put("loose/agent.mjs")
	put("work/ws/default/s1/package.json") // a tenant's
	inRoot := put("work/ws/default/s1/bin/agent.mjs")
	for _, c := range []struct{ file, want string }{
		{inHome, inHome},
		{inPkg, filepath.Join(home, "pkg")},
		{inModules, filepath.Join(base, "opt", "lib", "node_modules")},
		{besideData, besideData},
		{aboveRoot, aboveRoot},
		{noPackage, noPackage},
		{inRoot, inRoot},
	} {
		// base is the stand-in for /: it holds every stop.
		if got := packageRoot(c.file, append([]string{data}, roots...), []string{home, base}); got != c.want {
			t.Errorf("packageRoot(%s) = %s, want %s", c.file, got, c.want)
		}
	}
	if got := scriptPaths([]string{"relative.mjs", "--flag", base, filepath.Join(base, "missing.mjs"), noPackage}, nil); len(got) != 1 || got[0].file != noPackage {
		t.Errorf("scriptPaths = %+v, want only the absolute path of an existing file", got)
	}
}

// An adapter's stderr that says it was refused a file gives the path, as
// node, Python, Go and a shell print it.
func TestStartLogDenied(t *testing.T) {
	for _, c := range []struct{ stderr, path string }{
		{"Error: EACCES: permission denied, open '/home/me/agents/agent.mjs'\n    at open", "/home/me/agents/agent.mjs"},
		{"PermissionError: [Errno 13] Permission denied: '/etc/agent.toml'", "/etc/agent.toml"},
		{"fatal: open /opt/agent/config.json: permission denied", "/opt/agent/config.json"},
		{"bash: /srv/run.sh: Permission denied", "/srv/run.sh"},
		{"Error: EPERM: operation not permitted, scandir \"/root/x\"", "/root/x"},
	} {
		var l startLog
		l.write([]byte("starting\n" + c.stderr + "\n"))
		if got, ok := l.denied(); !ok || got != c.path {
			t.Errorf("denied(%q) = %q, %v; want %q", c.stderr, got, ok, c.path)
		}
	}
	var l startLog
	l.write([]byte("Error: ANTHROPIC_API_KEY is not set\n"))
	if got, ok := l.denied(); ok {
		t.Errorf("denied of a missing key = %q, true; want false", got)
	}
}
