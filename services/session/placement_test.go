package session_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// Placement says why no runner takes a session: the agent is not
// installed where it is known, or no runner that has it has room, or no
// runner knows it.
func TestPlacementSaysWhyNoRunner(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ghost := adapterrunner.Agent{ID: "ghost", Command: "/nonexistent/ghost-acp"}
	control := t.TempDir()
	for _, cfg := range []adapterrunner.Config{
		{ID: "r1", Capacity: 1, Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent, Env: map[string]string{testagent.EnvControlDir: control}}, ghost}},
		{ID: "r2", Builtin: []adapterrunner.Agent{ghost}},
	} {
		cfg.DataDir, cfg.StopGrace = t.TempDir(), 200*time.Millisecond
		r, err := adapterrunner.New(cfg, lg, natstest.Connect(t, ns), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		run(t, "runner "+cfg.ID, r)
	}
	svc, err := session.New(session.Config{}, lg, natstest.Connect(t, ns), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, "session", svc)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{nc: nc, js: js, control: control}

	if err := h.open(t, "first", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatalf("open the one session r1 has room for: %v", err)
	}
	// An idle adapter would be evicted to make room (evict.go): first's
	// is in a turn.
	done := h.promptAsync(t.Context(), "first", "", "pause first\nsay done")
	if err := testagent.WaitPaused(t.Context(), control, "first"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = testagent.Release(t.Context(), control, "first")
		<-done
	}()
	for _, tc := range []struct {
		agent string
		code  events.Code
		says  string
	}{
		// Placement or r1 itself, whichever sees r1's load first: either
		// way the error says the runner is full, and by how much.
		{"test", events.CodeAgentUnavailable, "1 of 1 adapters"},
		{"ghost", events.CodeAgentNotInstalled, `agent "ghost" is not installed: its command "/nonexistent/ghost-acp" does not resolve on runner r1, r2`},
		{"nobody", events.CodeUnknownAgent, `no runner knows agent "nobody"`},
	} {
		err := h.open(t, "s-"+tc.agent, events.AcpOpenSessionRequest{Agent: tc.agent})
		if e := events.AsError(err); e == nil || e.Code != tc.code || !strings.Contains(e.Message, tc.says) {
			t.Errorf("open with agent %s = %v, want %s saying %q", tc.agent, err, tc.code, tc.says)
		}
	}
}
