package session_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/memstat"
	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/services/session"
)

// BenchmarkLoadedSessionMemory measures what a loaded session costs the
// session service and the runner together: it brings sessions=N sessions
// to loaded (opened, an adapter attached, one short prompt answered) and
// reads this process's Go memory before and after.
//
//   - B/session: live heap plus goroutine stacks, per session.
//   - stack-B/session: the goroutine stacks alone.
//   - goroutines/session.
//
// Only the two services are counted: the adapters are processes of their
// own, and so is the NATS server (natstest.RunProcess), whose streams and
// subscriptions would otherwise sit in this heap.
// BenchmarkLoadedAdapterMemory in services/adapter-runner measures the
// runner's share alone.
//
// The sessions are loaded once per run; the loop is a prompt on one of
// them, so ns/op is a prompt's round trip with N sessions loaded.
func BenchmarkLoadedSessionMemory(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			memstat.NeedAdapters(b, n)
			url := natstest.RunProcess(b)
			connect := func() *nats.Conn { return natstest.ConnectURL(b, url) }
			lg := slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			h := startBenchRunner(b, connect, n, lg)
			svc, err := session.New(session.Config{DrainWait: 200 * time.Millisecond}, lg, connect(), prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			runStoppable(b, "session", svc)

			before := memstat.Read(b)
			start := time.Now()
			h.loadSessions(b, n)
			b.Logf("%d sessions loaded in %v", n, time.Since(start).Round(time.Millisecond))
			after := memstat.Read(b)

			i := 0
			for b.Loop() {
				if _, err := h.prompt(b.Context(), memSessionID(i%n), "", "say hi"); err != nil {
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

// loadWorkers is how many sessions load at once: enough to keep both
// services and the process spawns busy on a small machine.
const loadWorkers = 32

// memSessionID names the i-th session of a memory benchmark.
func memSessionID(i int) string { return fmt.Sprintf("m%05d", i) }

// loadSessions opens n sessions with the test agent and runs one short
// prompt on each.
func (h *harness) loadSessions(b *testing.B, n int) {
	b.Helper()
	ids := make(chan string)
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for sid := range ids {
				if err := h.open(b, sid, events.AcpOpenSessionRequest{}); err != nil {
					b.Errorf("open %s: %v", sid, err)
					continue
				}
				if _, err := h.prompt(b.Context(), sid, "", "say hi"); err != nil {
					b.Errorf("prompt %s: %v", sid, err)
				}
			}
		})
	}
	for i := range n {
		ids <- memSessionID(i)
	}
	close(ids)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
