package session_test

import (
	"os"
	"path/filepath"
	"testing"

	"skein.dev/pkg/events"
)

// A deleted session's default workspace, and its HOME and TMPDIR on the
// runner, once stayed on disk: reopening the ID found the old files. They
// are removed when the session is deleted, following none of the links
// the agent may have planted there, and a cwd the user gave at open stays.
func TestSecurityDeleteRemovesDefaultWorkspace(t *testing.T) {
	c := startConfined(t, true)
	ctx := t.Context()
	const sid, own = "wiped", "own"
	if err := c.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(c.home, "proj")
	if err := c.open(t, own, events.AcpOpenSessionRequest{Cwd: &proj}); err != nil {
		t.Fatal(err)
	}
	workdir := filepath.Join(c.home, sid)
	dataDir := filepath.Join(c.data, "default", sid)
	// What the agent left: files, and links to what is not its own, in
	// the workspace and in its HOME.
	victim := filepath.Join(c.out, "victim.txt")
	victimDir := filepath.Join(c.out, "sub")
	mustWrite(t, victim, "not the agent's")
	mustWrite(t, filepath.Join(victimDir, "inside.txt"), "not the agent's either")
	mustWrite(t, filepath.Join(workdir, "secret.txt"), "the session's")
	mustWrite(t, filepath.Join(workdir, "deep", "er", "file.txt"), "the session's")
	mustWrite(t, filepath.Join(dataDir, "home", ".config", "token"), "the session's")
	mustWrite(t, filepath.Join(proj, "keep.txt"), "the user's")
	for link, target := range map[string]string{
		filepath.Join(workdir, "link-file"):         victim,
		filepath.Join(workdir, "deep", "link-dir"):  victimDir,
		filepath.Join(dataDir, "home", "link-out"):  victimDir,
		filepath.Join(dataDir, "tmp", "link-proj"):  proj,
		filepath.Join(workdir, "deep", "link-root"): c.root,
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{sid, own} {
		if err := c.delete(ctx, s); err != nil {
			t.Fatalf("delete %s: %v", s, err)
		}
	}
	for _, gone := range []string{workdir, dataDir} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s after delete: %v, want it gone", gone, err)
		}
	}
	for file, want := range map[string]string{
		victim: "not the agent's", filepath.Join(victimDir, "inside.txt"): "not the agent's either",
		filepath.Join(proj, "keep.txt"): "the user's",
	} {
		if b, err := os.ReadFile(file); err != nil || string(b) != want {
			t.Errorf("%s after delete = %q, %v; want %q: removal followed a link, or removed a user's cwd", file, b, err, want)
		}
	}
	// A workspace another session works in stays: a fork's, whose cwd is
	// its source's, or one opened inside it.
	const src, inside = "source", "inside"
	if err := c.open(t, src, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	srcDir := filepath.Join(c.home, src)
	sub := filepath.Join(srcDir, "sub")
	mustWrite(t, filepath.Join(sub, "work.txt"), "the other session's")
	if err := c.open(t, inside, events.AcpOpenSessionRequest{Cwd: &sub}); err != nil {
		t.Fatal(err)
	}
	if err := c.delete(ctx, src); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sub, "work.txt")); err != nil || string(b) != "the other session's" {
		t.Errorf("a workspace another session works in, after delete = %q, %v; want it kept", b, err)
	}
	const forked, fork = "forked", "fork"
	if err := c.open(t, forked, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	forkedFile := filepath.Join(c.home, forked, "shared.txt")
	mustWrite(t, forkedFile, "the fork's too")
	if _, err := c.fork(ctx, forked, fork, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.delete(ctx, forked); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(forkedFile); err != nil || string(b) != "the fork's too" {
		t.Errorf("a fork's workspace after its source's delete = %q, %v; want it kept", b, err)
	}
	if _, err := os.Lstat(filepath.Join(c.data, "default", src)); !os.IsNotExist(err) {
		t.Errorf("the deleted session's HOME: %v, want it gone whatever its workspace", err)
	}
	// Reopened, the ID starts in an empty directory.
	if err := c.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(workdir); err != nil || len(ents) != 0 {
		t.Errorf("the reopened session's workspace holds %v (%v), want nothing", ents, err)
	}
}

func mustWrite(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
