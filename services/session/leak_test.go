package session_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// warm makes nc's request machinery (its reply subscription, which lives
// as long as the connection) exist before a test counts goroutines.
func warm(t *testing.T, nc *nats.Conn) {
	t.Helper()
	if _, err := nc.Request("skein.test.nobody", nil, time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request nobody serves = %v, want %v", err, nats.ErrNoResponders)
	}
}

// TestRunLeavesNothing proves that the session service's Run owns every
// goroutine it starts: once it and the runner it used have returned,
// after a session was opened and a turn ran through an adapter, no
// goroutine is left but those that were running before they started (the
// embedded server's and the connections'), nor any of the server's.
func TestRunLeavesNothing(t *testing.T) {
	ns := natstest.Run(t)
	nc, snc, rnc := natstest.Connect(t, ns), natstest.Connect(t, ns), natstest.Connect(t, ns)
	for _, c := range []*nats.Conn{nc, snc, rnc} {
		warm(t, c)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{nc: nc, js: js, control: t.TempDir()}
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	runner, err := adapterrunner.New(adapterrunner.Config{
		ID: "r1", DataDir: t.TempDir(), StopGrace: 200 * time.Millisecond,
		Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent, Env: map[string]string{testagent.EnvControlDir: h.control}}},
	}, lg, rnc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := session.New(session.Config{DrainWait: 200 * time.Millisecond}, lg, snc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	stopRunner := runStoppable(t, "runner", runner)
	stopSession := runStoppable(t, "session", svc)
	flush(t, snc)

	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	resp, err := h.prompt(t.Context(), "s1", "k1", "say hello")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "end_turn" {
		t.Fatalf("prompt stop reason = %q, want end_turn", resp.StopReason)
	}

	stopSession()
	stopRunner()
	testutil.VerifyNone(t, before)
}
