package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
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
// own, and so is the NATS server (runNATSProcess), whose streams and
// subscriptions would otherwise sit in this heap.
// BenchmarkLoadedAdapterMemory in services/adapter-runner measures the
// runner's share alone.
//
// The sessions are loaded once per run; the loop is a prompt on one of
// them, so ns/op is a prompt's round trip with N sessions loaded.
func BenchmarkLoadedSessionMemory(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			checkFileLimit(b, n)
			url := runNATSProcess(b)
			nc := connectURL(b, url)
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			h := &harness{nc: nc, js: js}
			lg := slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			runner, err := adapterrunner.New(adapterrunner.Config{
				ID: "r1", DataDir: b.TempDir(), StopGrace: 200 * time.Millisecond, Capacity: n,
				Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent}},
			}, lg, connectURL(b, url), prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			runStoppable(b, "runner", runner)
			svc, err := session.New(session.Config{DrainWait: 200 * time.Millisecond}, lg, connectURL(b, url), prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			runStoppable(b, "session", svc)

			before := readGoMemory(b)
			start := time.Now()
			h.loadSessions(b, n)
			b.Logf("%d sessions loaded in %v", n, time.Since(start).Round(time.Millisecond))
			after := readGoMemory(b)

			i := 0
			for b.Loop() {
				if _, err := h.prompt(b.Context(), memSessionID(i%n), "", "say hi"); err != nil {
					b.Fatal(err)
				}
				i++
			}
			// After the loop: its first b.Loop call drops metrics reported
			// before it.
			reportPerSession(b, n, before, after)
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

// goMemory is what this process's Go runtime holds.
type goMemory struct {
	heap       uint64 // live heap objects (HeapAlloc after a collection)
	heapInuse  uint64 // heap spans in use, fragmentation included
	stacks     uint64 // goroutine stacks
	goroutines int
}

// readGoMemory waits until the goroutine count has held still for 100 ms
// (goroutines a turn leaves behind, such as publish acknowledgement
// waiters, end shortly after its reply), collects garbage, and reads the
// runtime's figures.
func readGoMemory(tb testing.TB) goMemory {
	tb.Helper()
	last, since := runtime.NumGoroutine(), time.Now()
	if err := poll(tb.Context(), "the goroutine count to settle", func() (bool, error) {
		if g := runtime.NumGoroutine(); g != last {
			last, since = g, time.Now()
		}
		return time.Since(since) >= 100*time.Millisecond, nil
	}); err != nil {
		tb.Fatal(err)
	}
	// Two collections: objects a sync.Pool drops in one collection are
	// kept in its victim cache until the next.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return goMemory{heap: ms.HeapAlloc, heapInuse: ms.HeapInuse, stacks: ms.StackInuse, goroutines: runtime.NumGoroutine()}
}

// reportPerSession reports the growth from before to after, divided by the
// n sessions that caused it.
func reportPerSession(b *testing.B, n int, before, after goMemory) {
	b.Helper()
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	b.ReportMetric(per(after.heap+after.stacks, before.heap+before.stacks), "B/session")
	b.ReportMetric(per(after.stacks, before.stacks), "stack-B/session")
	b.ReportMetric(float64(after.goroutines-before.goroutines)/float64(n), "goroutines/session")
	b.Logf("per session: heap %.0f B live, %.0f B in use; stacks %.0f B", per(after.heap, before.heap), per(after.heapInuse, before.heapInuse), per(after.stacks, before.stacks))
}

// checkFileLimit skips the benchmark when this process may not open the
// descriptors n adapters need: a pipe end for each of stdin, stdout and
// stderr, and a pidfd. (Go raises the soft limit to the hard one at
// start-up, so this is the hard limit.)
func checkFileLimit(b *testing.B, n int) {
	b.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if need := uint64(4*n + 256); lim.Cur < need {
		b.Skipf("open-file limit %d is below the %d that %d adapters need", lim.Cur, need, n)
	}
}

// runNATSProcess builds nats-server and starts it as a process with
// JetStream, file storage in tb.TempDir() and a loopback port chosen by the
// kernel, and returns its client URL. It is stopped when the test ends. A
// benchmark that reads this process's memory uses it instead of
// natstest.Run, so that the server's memory is not counted.
func runNATSProcess(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		tb.Fatalf("build nats-server: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(tb.Context()))
	cmd := exec.CommandContext(ctx, bin, "-js", "-sd", filepath.Join(dir, "store"), "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", dir)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatalf("start nats-server: %v", err)
	}
	tb.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	// The server writes its ports file once it accepts clients.
	var ports struct {
		Nats []string `json:"nats"`
	}
	portsFile := filepath.Join(dir, fmt.Sprintf("nats-server_%d.ports", cmd.Process.Pid))
	if err := poll(tb.Context(), "nats-server's ports file", func() (bool, error) {
		data, err := os.ReadFile(portsFile)
		return err == nil && json.Unmarshal(data, &ports) == nil && len(ports.Nats) > 0, nil
	}); err != nil {
		tb.Fatal(err)
	}
	return ports.Nats[0]
}

// connectURL returns a connection to the server at url, closed when the
// test ends.
func connectURL(tb testing.TB, url string) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatalf("connect %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}
