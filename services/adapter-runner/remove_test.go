package adapterrunner_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

func (h *harness) remove(t *testing.T, ns, sid, cwd string) error {
	t.Helper()
	_, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerRemove),
		&events.RunnerRemoveRequest{Cwd: cwd}, nats.Header{events.HeaderNamespace: []string{ns}, events.HeaderSessionID: []string{sid}})
	return err
}

// RunnerRemove of a session the runner still hosts stops its adapter
// before it removes the session's HOME, TMPDIR and default workspace; a
// session that never ran here has nothing to remove, and that is no error.
func TestSecurityRemoveStopsThenRemoves(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	home := filepath.Join(h.dataDir, "default", "s1")
	work := filepath.Join(h.dataDir, "workspaces", "default", "s1")
	for _, d := range []string{home, work} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the hosted session's directory: %v", err)
		}
	}
	if err := h.remove(t, "default", "s1", ""); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{home, work} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s after remove: %v, want it gone", d, err)
		}
	}
	// The adapter is gone too: a prompt finds none.
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerPrompt),
		&events.RunnerPromptRequest{TurnID: "t1", Prompt: events.JSON(`[{"type":"text","text":"say x"}]`)}, header("s1", "p1")); events.AsError(err).Code != events.CodeAdapterExited {
		t.Errorf("a prompt after remove = %v, want %s", err, events.CodeAdapterExited)
	}
	if err := h.remove(t, "default", "never", ""); err != nil {
		t.Errorf("remove of a session never here = %v, want nil", err)
	}
}

// A session's HOME is <data-dir>/<namespace>/<session ID>; under the
// default workspace root, <data-dir>/workspaces, a namespace named
// "workspaces" has its sessions' HOMEs among the other namespaces'
// directories (its session "default" has namespace default's). Removing
// one must not remove a namespace's workspaces.
func TestSecurityRemoveSparesWorkspacesNamespace(t *testing.T) {
	h := start(t)
	kept := filepath.Join(h.dataDir, "workspaces", "default", "proj", "keep.txt")
	if err := os.MkdirAll(filepath.Dir(kept), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kept, []byte("namespace default's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.remove(t, "workspaces", "default", ""); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(kept); err != nil || string(b) != "namespace default's" {
		t.Errorf("namespace default's file after removing session workspaces/default = %q, %v; want it kept", b, err)
	}
}
