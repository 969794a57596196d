package session_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
)

// confined is a runner and a session service confined to one workspace
// root, with an agent "test" that lets sessions set ALLOWED_*, an agent
// "any" that lets them set any variable, and everything both services
// log, at every level, in logs.
type confined struct {
	*harness
	// home is <root>/default, the namespace the harness opens in; data
	// is the runner's data directory.
	root, home, out, data string
	logs                  *testutil.Buffer
}

// startConfined starts the services; the session service is told the
// roots only when sessionKnowsRoots (else the runner alone checks them).
func startConfined(t *testing.T, sessionKnowsRoots bool) *confined {
	t.Helper()
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	js, _ := jetstream.New(nc)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &confined{harness: &harness{nc: nc, js: js, control: t.TempDir()},
		root: filepath.Join(base, "root"), out: filepath.Join(base, "out"), data: filepath.Join(base, "data"), logs: &testutil.Buffer{}}
	c.home = filepath.Join(c.root, "default")
	for _, d := range []string{filepath.Join(c.home, "proj"), filepath.Join(c.out, "sub")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	lg := slog.New(slog.NewMultiHandler(
		slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}),
		slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	roots := workspace.Roots{c.root}
	runner, err := adapterrunner.New(adapterrunner.Config{
		ID: "r1", DataDir: c.data, WorkspaceRoots: roots, StopGrace: 200 * time.Millisecond,
		Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent, AllowEnv: []string{"ALLOWED_*"}},
			{ID: "any", Command: testAgent, AllowEnv: []string{"*"}}},
	}, lg, natstest.Connect(t, ns), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg := session.Config{DrainWait: 200 * time.Millisecond}
	if sessionKnowsRoots {
		cfg.WorkspaceRoots = roots
	}
	svc, err := session.New(cfg, lg, natstest.Connect(t, ns), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, "runner", runner)
	run(t, "session", svc)
	return c
}

// streamsState returns the last sequence of every stream an open writes
// to: the log, the adapters' I/O, and the sessions' and owners' buckets.
func (c *confined) streamsState(ctx context.Context, t *testing.T) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, name := range []string{events.StreamLog, events.StreamIO, "KV_" + events.BucketSessions, "KV_" + events.BucketOwners} {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		out[name] = info.State.LastSeq
	}
	return out
}

// badOpens are the opens refused for their paths or env.
func (c *confined) badOpens(t *testing.T) map[string]events.AcpOpenSessionRequest {
	if err := os.Symlink(c.out, filepath.Join(c.home, "escape")); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	return map[string]events.AcpOpenSessionRequest{
		"cwd-dotdot":                 {Cwd: new(c.home + "/proj/../proj")},
		"cwd-outside":                {Cwd: new(c.out)},
		"cwd-symlink-outside":        {Cwd: new(c.home + "/escape")},
		"cwd-below-symlinked-parent": {Cwd: new(c.home + "/escape/sub")},
		"dirs-outside":               {Cwd: new(c.home + "/proj"), AdditionalDirectories: events.JSON(`["` + c.home + `/proj","` + c.out + `"]`)},
		"env-not-allowed":            {Env: events.JSON(`{"ALLOWED_A":"1","SECRET_B":"value-b-7c1e"}`)},
	}
}

// An open whose cwd or additional directories leave the workspace roots,
// or whose env the agent does not allow, is refused invalid_request before
// anything is recorded.
func TestOpenIsConfinedToTheWorkspaceRoots(t *testing.T) {
	c := startConfined(t, true)
	ctx := t.Context()
	// The runner's first heartbeat is written; everything after is the
	// opens'.
	if err := c.open(t, "warmup", events.AcpOpenSessionRequest{Cwd: new(c.home + "/proj")}); err != nil {
		t.Fatalf("open in a confined directory: %v", err)
	}
	for name, req := range c.badOpens(t) {
		before := c.streamsState(ctx, t)
		if err := c.open(t, name, req); code(err) != events.CodeInvalidRequest {
			t.Errorf("%s: open = %v, want %s", name, err, events.CodeInvalidRequest)
		}
		if after := c.streamsState(ctx, t); !equalState(before, after) {
			t.Errorf("%s: a refused open wrote: streams before %v, after %v", name, before, after)
		}
	}
}

func equalState(a, b map[string]uint64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

// What a session service without the roots lets through (a session opened
// before the roots changed) the runner refuses at launch.
func TestLaunchRefusesWhatOpenLetThrough(t *testing.T) {
	c := startConfined(t, false)
	for name, req := range c.badOpens(t) {
		if err := c.open(t, name, req); code(err) != events.CodeInvalidRequest {
			t.Errorf("%s: open = %v, want %s from the runner", name, err, events.CodeInvalidRequest)
		}
	}
}

// A session opened without a cwd works in <root>/<namespace>/<session ID>,
// created, and records it; env values it sets reach no log.
func TestDefaultCwdAndEnvValues(t *testing.T) {
	c := startConfined(t, true)
	const secret = "value-a-91d4"
	if err := c.open(t, "s1", events.AcpOpenSessionRequest{Env: events.JSON(`{"ALLOWED_A":"` + secret + `"}`)}); err != nil {
		t.Fatalf("open: %v", err)
	}
	want := filepath.Join(c.root, "default", "s1")
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
		t.Fatalf("default cwd %s: %v", want, err)
	}
	var opened *events.SessionOpened
	recs, err := c.ctl(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range recs {
		if o, ok := v.(*events.SessionOpened); ok {
			opened = o
		}
	}
	if opened == nil || opened.Cwd != want {
		t.Fatalf("SessionOpened = %+v, want cwd %s", opened, want)
	}
	// Refused ones are not logged either.
	for name, req := range c.badOpens(t) {
		_ = c.open(t, name, req)
	}
	logs := c.logs.String()
	if !strings.Contains(logs, "session opened") {
		t.Fatalf("the services' log holds no open; is it captured?\n%s", logs)
	}
	for _, v := range []string{secret, "value-b-7c1e"} {
		if strings.Contains(logs, v) {
			t.Errorf("a service logged the env value %q:\n%s", v, logs)
		}
	}
}
