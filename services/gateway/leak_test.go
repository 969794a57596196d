package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/gateway"
	"skein.dev/services/history"
)

// TestRunLeavesNothing proves that Run owns every goroutine it starts:
// once it has returned, after it served an event stream that was open
// when it began to stop (its feed, its subscriptions, its reads of the
// log through the history service), no goroutine is left but those that were running before it
// started (the embedded server's and the connection's), nor any of the
// server's.
func TestRunLeavesNothing(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{}, true); err != nil {
		t.Fatal(err)
	}
	w := eventlog.NewWriter(js, events.DefaultNamespace, "s1", eventlog.Position{}, "w")
	if _, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test"}},
		eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{
			Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}`),
		}}); err != nil {
		t.Fatal(err)
	}
	// The connection's reply subscription lives as long as it does.
	if _, err := nc.Request("skein.test.nobody", nil, time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request nobody serves = %v, want %v", err, nats.ErrNoResponders)
	}
	before := goleak.IgnoreCurrent()

	// The real history service serves the stream's backfill; it stops
	// before the check too.
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	hist, err := history.New(history.Config{}, lg, nc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hctx, stopHistory := context.WithCancel(t.Context())
	defer stopHistory()
	histDone := make(chan error, 1)
	go func() { histDone <- hist.Run(hctx) }()
	select {
	case <-hist.Ready():
	case err := <-histDone:
		t.Fatalf("history Run before ready = %v", err)
	}

	cfg := gateway.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	gw, err := gateway.New(cfg, lg, nc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	select {
	case <-gw.Ready():
	case err := <-done:
		t.Fatalf("Run before ready = %v", err)
	}

	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+gw.Addr()+"/v1/sessions/s1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET events = %s, want 200", resp.Status)
	}
	// The stream is live once its backfill (the one event) came.
	body := bufio.NewScanner(resp.Body)
	for body.Scan() && !strings.HasPrefix(body.Text(), "data:") {
	}
	if err := body.Err(); err != nil {
		t.Fatalf("read the event stream: %v", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Run ended the stream before it returned.
	for body.Scan() {
	}
	_ = resp.Body.Close()
	tr.CloseIdleConnections()
	stopHistory()
	if err := <-histDone; err != nil {
		t.Fatalf("history Run = %v", err)
	}
	testutil.VerifyNone(t, before)
}
