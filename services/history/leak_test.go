package history_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/history"
)

// TestRunLeavesNothing proves that Run owns every goroutine it starts:
// once it has returned, after serving reads and listing sessions, no
// goroutine is left but those that were running before it started (the
// embedded server's and the connection's).
func TestRunLeavesNothing(t *testing.T) {
	h := provision(t, streams.Options{})
	h.write(t, "s1", 3)
	before := goleak.IgnoreCurrent()

	svc, err := history.New(history.Config{DefaultLimit: 5}, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), h.nc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.Ready():
	case err := <-done:
		t.Fatalf("Run before ready = %v", err)
	}
	page, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: new("s1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) == 0 {
		t.Fatal("readHistory returned no events")
	}
	// listSessions waits for the index, which Run's own goroutines build.
	if _, err := rpc.Call[events.AcpListDurableSessionsResponse](t.Context(), h.nc, events.APISubject("default", events.OpListSessions), &events.AcpListDurableSessionsRequest{}, nil); err != nil {
		t.Fatal(err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	goleak.VerifyNone(t, before)
}
