package adapterrunner_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/memstat"
	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// BenchmarkLoadedAdapterMemory measures what a loaded session costs the
// runner alone: through the runner's control subjects, as the session
// service would, it starts sessions=N adapters (initialize, session/new),
// runs one short prompt on each, and reads this process's Go memory before
// and after. Its figures are the runner's share of those of
// BenchmarkLoadedSessionMemory in services/session:
//
//   - B/session: live heap plus goroutine stacks, per adapter.
//   - stack-B/session: the goroutine stacks alone.
//   - goroutines/session.
//
// The adapters are processes of their own, and so is the NATS server
// (natstest.RunProcess): neither is counted.
//
// The adapters start once per run; the loop is a prompt on one of them, so
// ns/op is a prompt's round trip through the runner and ACP_IO with N
// adapters running.
func BenchmarkLoadedAdapterMemory(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			memstat.NeedAdapters(b, n)
			url := natstest.RunProcess(b)
			h := &memHarness{nc: natstest.ConnectURL(b, url)}
			lg := slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			r, err := adapterrunner.New(adapterrunner.Config{
				ID: "r1", DataDir: testutil.TempDir(b), Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent}},
				StopGrace: 200 * time.Millisecond, Capacity: n,
			}, lg, natstest.ConnectURL(b, url), prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			runRunner(b, r)
			sub, err := h.nc.Subscribe(events.IOTailAll, h.onIO)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sub.Unsubscribe() })
			if err := h.nc.Flush(); err != nil {
				b.Fatal(err)
			}
			before := memstat.Read(b)
			start := time.Now()
			h.loadAdapters(b, n)
			b.Logf("%d adapters loaded in %v", n, time.Since(start).Round(time.Millisecond))
			after := memstat.Read(b)

			i := 0
			for b.Loop() {
				if err := h.prompt(b, i%n); err != nil {
					b.Fatal(err)
				}
				i++
			}
			// After the loop: its first b.Loop call drops metrics reported
			// before it.
			memstat.ReportPerSession(b, n, before, after)
		})
	}
}

// memHarness drives a runner's control subjects and waits for the answers
// it publishes to ACP_IO.
type memHarness struct {
	nc      *nats.Conn
	turns   sync.Map // turn ID -> chan struct{}, closed when the prompt's result is stored
	turnSeq atomic.Int64
}

// onIO closes the waiter of each turn whose prompt result ACP_IO stored.
func (h *memHarness) onIO(m *nats.Msg) {
	if m.Header.Get(events.HeaderRecord) != events.RecordAdapterPromptResult {
		return
	}
	res, err := events.Decode[events.AdapterPromptResult](m.Data)
	if err != nil {
		return
	}
	if ch, ok := h.turns.LoadAndDelete(res.TurnID); ok {
		close(ch.(chan struct{}))
	}
}

// loadWorkers is how many adapters start at once: enough to keep the runner
// and the process spawns busy on a small machine.
const loadWorkers = 32

// memSessionID names the i-th session, and memProcessID its adapter.
func memSessionID(i int) string { return fmt.Sprintf("m%05d", i) }
func memProcessID(i int) string { return fmt.Sprintf("p%05d", i) }

// loadAdapters starts an adapter for each of n sessions and runs one short
// prompt on it.
func (h *memHarness) loadAdapters(b *testing.B, n int) {
	b.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for i := range next {
				_, err := rpc.Call[events.AcpSessionCreatedResponse](b.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate),
					&events.AcpCreateSessionRequest{AgentType: "test", ProtocolVersion: 1, McpServers: events.JSON("[]")}, header(memSessionID(i), memProcessID(i)))
				if err != nil {
					b.Errorf("create %s: %v", memSessionID(i), err)
					continue
				}
				if err := h.prompt(b, i); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// prompt sends a one-line prompt to the i-th session's adapter and waits
// until its result is stored on ACP_IO.
func (h *memHarness) prompt(tb testing.TB, i int) error {
	turnID := fmt.Sprintf("t%d", h.turnSeq.Add(1))
	done := make(chan struct{})
	h.turns.Store(turnID, done)
	if _, err := rpc.Call[events.RunnerAck](tb.Context(), h.nc, events.RunnerSubject("r1", events.RunnerPrompt),
		&events.RunnerPromptRequest{TurnID: turnID, Prompt: events.JSON(`[{"type":"text","text":"say hi"}]`)}, header(memSessionID(i), memProcessID(i))); err != nil {
		h.turns.Delete(turnID)
		return fmt.Errorf("prompt %s: %w", memSessionID(i), err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(20 * time.Second):
		h.turns.Delete(turnID)
		return fmt.Errorf("prompt %s: no answer on ACP_IO in 20s", memSessionID(i))
	}
}

// runRunner runs r until the test ends.
func runRunner(tb testing.TB, r *adapterrunner.Runner) {
	tb.Helper()
	ctx, cancel := context.WithCancel(tb.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	select {
	case <-r.Ready():
	case err := <-done:
		tb.Fatalf("runner stopped: %v", err)
	}
}
