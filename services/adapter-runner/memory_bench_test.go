package adapterrunner_test

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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/pkg/events"
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
// (runNATSProcess): neither is counted.
//
// The adapters start once per run; the loop is a prompt on one of them, so
// ns/op is a prompt's round trip through the runner and ACP_IO with N
// adapters running.
func BenchmarkLoadedAdapterMemory(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			checkFileLimit(b, n)
			url := runNATSProcess(b)
			h := &memHarness{nc: connectURL(b, url)}
			lg := slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			r, err := adapterrunner.New(adapterrunner.Config{
				ID: "r1", DataDir: b.TempDir(), Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent}},
				StopGrace: 200 * time.Millisecond, Capacity: n,
			}, lg, connectURL(b, url), prometheus.NewRegistry())
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
			// Allocated before the first reading: what the benchmark keeps
			// per adapter is then only its ACP session ID.
			acpIDs := make([]string, n)

			before := readGoMemory(b)
			start := time.Now()
			h.loadAdapters(b, acpIDs)
			b.Logf("%d adapters loaded in %v", n, time.Since(start).Round(time.Millisecond))
			after := readGoMemory(b)

			i := 0
			for b.Loop() {
				if err := h.prompt(b, i%n, acpIDs[i%n]); err != nil {
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

// memHarness drives a runner's control subjects and waits for the answers
// it publishes to ACP_IO.
type memHarness struct {
	nc      *nats.Conn
	calls   sync.Map // call ID -> chan struct{}, closed when the answer is stored
	callSeq atomic.Int64
}

// onIO closes the waiter of each forwarded call whose answer ACP_IO stored.
func (h *memHarness) onIO(m *nats.Msg) {
	if m.Header.Get(events.HeaderRecord) != "AcpSessionRpcResponse" {
		return
	}
	if ch, ok := h.calls.LoadAndDelete(m.Header.Get(events.HeaderCallID)); ok {
		close(ch.(chan struct{}))
	}
}

// loadWorkers is how many adapters start at once: enough to keep the runner
// and the process spawns busy on a small machine.
const loadWorkers = 32

// memSessionID names the i-th session, and memProcessID its adapter.
func memSessionID(i int) string { return fmt.Sprintf("m%05d", i) }
func memProcessID(i int) string { return fmt.Sprintf("p%05d", i) }

// loadAdapters starts an adapter for each of len(acpIDs) sessions, records
// its ACP session ID, and runs one short prompt on it.
func (h *memHarness) loadAdapters(b *testing.B, acpIDs []string) {
	b.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for i := range next {
				created, err := events.Call[events.AcpSessionCreatedResponse](b.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate),
					&events.AcpCreateSessionRequest{AgentType: "test", ProtocolVersion: 1, McpServers: events.JSON("[]")}, header(memSessionID(i), memProcessID(i)))
				if err != nil {
					b.Errorf("create %s: %v", memSessionID(i), err)
					continue
				}
				acpIDs[i] = created.SessionID
				if err := h.prompt(b, i, created.SessionID); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range acpIDs {
		next <- i
	}
	close(next)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// prompt forwards a one-line session/prompt to the i-th session's adapter
// and waits until its answer is stored on ACP_IO.
func (h *memHarness) prompt(tb testing.TB, i int, acpSession string) error {
	callID := fmt.Sprintf("c%d", h.callSeq.Add(1))
	done := make(chan struct{})
	h.calls.Store(callID, done)
	params, _ := json.Marshal(map[string]any{"sessionId": acpSession, "prompt": []map[string]string{{"type": "text", "text": "say hi"}}})
	hdr := header(memSessionID(i), memProcessID(i))
	hdr.Set(events.HeaderCallID, callID)
	if _, err := events.Call[events.RunnerAck](tb.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCall),
		&events.AcpSessionRequest{SessionID: acpSession, Method: "session/prompt", Params: params}, hdr); err != nil {
		h.calls.Delete(callID)
		return fmt.Errorf("prompt %s: %w", memSessionID(i), err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(20 * time.Second):
		h.calls.Delete(callID)
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

// goMemory is what this process's Go runtime holds.
type goMemory struct {
	heap       uint64 // live heap objects (HeapAlloc after a collection)
	heapInuse  uint64 // heap spans in use, fragmentation included
	stacks     uint64 // goroutine stacks
	goroutines int
}

// readGoMemory waits until the goroutine count has held still for 100 ms
// (goroutines a prompt leaves behind, such as publish acknowledgement
// waiters, end shortly after its answer), collects garbage, and reads the
// runtime's figures.
func readGoMemory(tb testing.TB) goMemory {
	tb.Helper()
	last, since := runtime.NumGoroutine(), time.Now()
	if err := waitFor(tb.Context(), func() bool {
		if g := runtime.NumGoroutine(); g != last {
			last, since = g, time.Now()
		}
		return time.Since(since) >= 100*time.Millisecond
	}); err != nil {
		tb.Fatalf("waiting for the goroutine count to settle: %v", err)
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
	if err := waitFor(tb.Context(), func() bool {
		data, err := os.ReadFile(portsFile)
		return err == nil && json.Unmarshal(data, &ports) == nil && len(ports.Nats) > 0
	}); err != nil {
		tb.Fatalf("waiting for nats-server's ports file: %v", err)
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

// waitFor calls cond every millisecond until it returns true, for at most
// 20 s.
func waitFor(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
