package adapterrunner_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// TestRunLeavesNothing proves that Run owns every goroutine it starts:
// once it has returned, after it started an adapter, ran a turn on it and
// stopped it with itself, no goroutine is left but those that were
// running before it started (the embedded server's and the
// connection's), nor any of the server's: not a request handler, not an
// adapter's pumps and watcher, not the thread adapters are forked from,
// not the asynchronous publishes' reply subscription.
func TestRunLeavesNothing(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	// The connection's reply subscription lives as long as it does.
	if _, err := nc.Request("skein.test.nobody", nil, time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request nobody serves = %v, want %v", err, nats.ErrNoResponders)
	}
	before := goleak.IgnoreCurrent()
	h := startOn(t, nc, adapterrunner.Config{})
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "say hello")
	until[*events.AdapterPromptResult](t, h)
	if err := h.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	testutil.VerifyNone(t, before)
}
