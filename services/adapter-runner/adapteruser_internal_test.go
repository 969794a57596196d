//go:build linux

package adapterrunner

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
)

// A runner run as root whose adapters' user cannot search its way to the
// data directory says which directory is in the way; one it can reach it
// makes searchable (not listable) to that user's group, and what it makes
// for a session, and only that, becomes the user's.
func TestAdapterUserReachAndOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the adapters' user is a root runner's")
	}
	u := adapterUser{uid: DefaultAdapterUID, gid: DefaultAdapterUID}
	closed := filepath.Join(testutil.TempDir(t), "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := u.prepare(filepath.Join(closed, "data"), nil); err == nil || !strings.Contains(err.Error(), "cannot search "+closed) {
		t.Errorf("prepare under a closed directory = %v, want one naming %s", err, closed)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(closed, "data")
	if err := u.prepare(data, nil); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if fi, err := os.Stat(data); err != nil || fi.Mode().Perm() != 0o710 || fi.Sys().(*syscall.Stat_t).Gid != uint32(u.gid) {
		t.Errorf("the data directory is %v (%v), want mode 0710 of group %d", fi.Mode(), err, u.gid)
	}
	own := filepath.Join(data, "project") // a user's own
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := u.mkdir(filepath.Join(own, "new", "cwd")); err != nil {
		t.Fatal(err)
	}
	for dir, uid := range map[string]int{own: 0, filepath.Join(own, "new"): u.uid, filepath.Join(own, "new", "cwd"): u.uid} {
		if fi, err := os.Stat(dir); err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != uid {
			t.Errorf("%s: owner %v (%v), want %d", dir, fi.Sys().(*syscall.Stat_t).Uid, err, uid)
		}
	}
}
