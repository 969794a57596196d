// Package memstat measures, for benchmarks, what a number of loaded
// sessions cost the Go process that holds them: live heap, goroutine stacks
// and goroutines, per session.
package memstat

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Sample is what this process's Go runtime holds at one moment.
type Sample struct {
	Heap       uint64 // live heap objects (HeapAlloc after a collection)
	HeapInuse  uint64 // heap spans in use, fragmentation included
	Stacks     uint64 // goroutine stacks
	Goroutines int
}

// Read waits until the goroutine count has held still for 100 ms
// (goroutines a request leaves behind, such as publish acknowledgement
// waiters, end shortly after its answer; at most 20 s), collects garbage
// and reads the runtime's figures.
func Read(tb testing.TB) Sample {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	last, since := runtime.NumGoroutine(), time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for time.Since(since) < 100*time.Millisecond {
		if time.Now().After(deadline) {
			tb.Fatalf("the goroutine count did not settle in 20 s (%d now)", last)
		}
		select {
		case <-tick.C:
		case <-tb.Context().Done():
			tb.Fatal(tb.Context().Err())
		}
		if g := runtime.NumGoroutine(); g != last {
			last, since = g, time.Now()
		}
	}
	// Two collections: objects a sync.Pool drops in one collection are
	// kept in its victim cache until the next.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Sample{Heap: ms.HeapAlloc, HeapInuse: ms.HeapInuse, Stacks: ms.StackInuse, Goroutines: runtime.NumGoroutine()}
}

// ReportPerSession reports the growth from before to after divided by the
// n sessions that caused it: B/session (live heap and stacks),
// stack-B/session and goroutines/session. Call it after the b.Loop loop:
// the loop's first call drops metrics reported before it.
func ReportPerSession(b *testing.B, n int, before, after Sample) {
	b.Helper()
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	b.ReportMetric(per(after.Heap+after.Stacks, before.Heap+before.Stacks), "B/session")
	b.ReportMetric(per(after.Stacks, before.Stacks), "stack-B/session")
	b.ReportMetric(float64(after.Goroutines-before.Goroutines)/float64(n), "goroutines/session")
	b.Logf("per session: heap %.0f B live, %.0f B in use; stacks %.0f B", per(after.Heap, before.Heap), per(after.HeapInuse, before.HeapInuse), per(after.Stacks, before.Stacks))
}

// NeedAdapters skips the benchmark when this process may not open the
// descriptors n adapter processes need: a pipe end for each of stdin,
// stdout and stderr, and a pidfd. (Go raises the soft limit to the hard
// one at start-up, so this is the hard limit.)
func NeedAdapters(tb testing.TB, n int) {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	if need := uint64(4*n + 256); lim.Cur < need {
		tb.Skipf("open-file limit %d is below the %d that %d adapters need", lim.Cur, need, n)
	}
}
