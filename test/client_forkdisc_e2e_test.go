package test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// The Go client discards, forks and lists folders over NATS, against the
// whole stack as skein serve runs it.
func TestGoClientDiscardForkDirectories(t *testing.T) {
	dataDir := testutil.TempDir(t)
	cl := goClientOn(t, dataDir)
	ctx := t.Context()

	if err := cl.Open(ctx, "eager", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Discard(ctx, "eager"); err != nil {
		t.Fatalf("discard of an unused session: %v", err)
	}
	if _, err := cl.Session(ctx, "eager"); !errors.Is(err, events.ErrSessionNotFound) {
		t.Errorf("the discarded session = %v, want %s", err, events.CodeSessionNotFound)
	}

	if err := cl.Open(ctx, "src", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PromptText(ctx, "src", "say alpha answer"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Discard(ctx, "src"); events.AsError(err).Code != events.CodeSessionNotEmpty {
		t.Errorf("discard of a used session = %v, want %s", err, events.CodeSessionNotEmpty)
	}
	f, err := cl.Fork(ctx, "src", "branch", 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.SessionID != "branch" || f.SourceSessionID != "src" || f.AtSequence == 0 {
		t.Errorf("fork = %+v", f)
	}
	res, err := cl.PromptText(ctx, "branch", "what came before?")
	if err != nil || !strings.Contains(string(res.Message), "alpha answer") {
		t.Errorf("the fork's first prompt = %+v, %v; want the source's history", res, err)
	}
	if _, err := cl.Fork(ctx, "src", "branch", 0); events.AsError(err).Code != events.CodeSessionConflict {
		t.Errorf("a fork onto an existing session = %v, want %s", err, events.CodeSessionConflict)
	}

	home := filepath.Join(dataDir, "workspaces", string(events.DefaultNamespace))
	if err := os.MkdirAll(filepath.Join(home, "proj"), 0o700); err != nil {
		t.Fatal(err)
	}
	top, err := cl.Directories(ctx, "")
	if err != nil || len(top.Directories) != 1 || top.Directories[0].Path != home {
		t.Fatalf("directories = %+v, %v; want %s", top, err, home)
	}
	l, err := cl.Directories(ctx, home)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range l.Directories {
		names = append(names, d.Name)
	}
	// Each session above has its default cwd here too, made by the runner.
	if !strings.Contains(strings.Join(names, ","), "proj") {
		t.Errorf("directories of %s = %v, want proj among them", home, names)
	}
	if _, err := cl.Directories(ctx, dataDir); events.AsError(err).Code != events.CodeInvalidRequest {
		t.Errorf("directories outside the workspace = %v, want %s", err, events.CodeInvalidRequest)
	}
}
