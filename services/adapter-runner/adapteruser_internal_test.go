//go:build linux

package adapterrunner

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
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

// With a range, each namespace's adapters have a uid of their own: the
// same one for the same namespace, again after a restart (the claims), a
// namespace whose hash lands on a uid taken by another probing on to a
// free one, and a namespace past the range refused agent_unavailable.
func TestAdapterUIDPerNamespace(t *testing.T) {
	claims := filepath.Join(t.TempDir(), adapterUIDClaims)
	users := func() *adapterUsers {
		return &adapterUsers{base: adapterUser{uid: 200000, gid: 200000}, n: 3, claims: claims, byNS: map[events.Namespace]adapterUser{}}
	}
	a := users()
	got := map[events.Namespace]int{}
	seen := map[int]events.Namespace{}
	// team-b and team-d hash to the same uid of the three: team-d probes on.
	for _, ns := range []events.Namespace{"team-a", "team-b", "team-d"} {
		u, err := a.forNamespace(ns)
		if err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
		if u.uid < 200000 || u.uid >= 200003 || u.gid != 200000 {
			t.Errorf("%s: uid %d gid %d, want one of 200000-200002, group 200000", ns, u.uid, u.gid)
		}
		if other, ok := seen[u.uid]; ok {
			t.Errorf("%s and %s share uid %d", ns, other, u.uid)
		}
		seen[u.uid], got[ns] = ns, u.uid
	}
	if _, err := a.forNamespace("team-c"); events.AsError(err) == nil || events.AsError(err).Code != events.CodeAgentUnavailable {
		t.Errorf("a fourth namespace in a range of 3 = %v, want agent_unavailable", err)
	}
	b := users() // the runner started again
	for _, ns := range []events.Namespace{"team-d", "team-a", "team-b"} {
		if u, err := b.forNamespace(ns); err != nil || u.uid != got[ns] {
			t.Errorf("after a restart %s has uid %d (%v), want %d", ns, u.uid, err, got[ns])
		}
	}
}
