// Package testutil holds the helpers that every Skein module's tests
// share: a buffer a logger and a test may use at once, a wait on a
// condition, a reader of Prometheus series, and a TestMain that checks for
// leaked goroutines. Tests import it; production code never does.
package testutil

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

// Buffer is a bytes.Buffer that goroutines may write and a test read at
// once: a logger's handler, a process's output pipes.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len returns how many bytes have been written so far.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// Reset forgets what has been written.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// PollTimeout bounds every wait of Poll: a condition that takes longer has
// found a hang, on any machine this suite runs on.
const PollTimeout = 30 * time.Second

// Poll checks its condition after a millisecond, then backs off to every
// pollMax: a condition that holds soon is seen soon, and a long wait on a
// costly condition (an HTTP request, a stream's info) does not take a
// loaded machine's cores from the code under test.
const (
	pollFirst = time.Millisecond
	pollMax   = 25 * time.Millisecond
)

// Poll calls cond until it returns true or an error, ctx ends, or
// PollTimeout passes. The error of a wait that ended without the condition
// names what was awaited (what: "the runner to restart"), so a failure
// reads as a sentence.
func Poll(ctx context.Context, what string, cond func() (bool, error)) error {
	return PollWithin(ctx, PollTimeout, what, cond)
}

// PollWithin is Poll bounded by d instead of PollTimeout: for a benchmark's
// wait on work that grows with its scale (a thousand sessions' claims),
// which no bound of the test suite's fits on every machine.
func PollWithin(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	wait := time.NewTimer(pollFirst)
	defer wait.Stop()
	for next := pollFirst; ; next = min(2*next, pollMax) {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-wait.C:
			wait.Reset(next)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

// Eventually is Poll for a condition that cannot fail, bounded by the
// test's context: it fails the test when the condition never holds.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	if err := Poll(tb.Context(), what, func() (bool, error) { return cond(), nil }); err != nil {
		tb.Fatal(err)
	}
}

// Metric returns the sum, over the series of the family name in g whose
// labels include labels (name, value pairs), of each series' value: a
// counter's or a gauge's value, a histogram's or a summary's count of
// observations. A family with no such series reads as 0, as an unused
// counter would.
func Metric(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	v, _ := Series(tb, g, name, labels...)
	return v
}

// Series is Metric that also reports whether any series matched.
func Series(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	tb.Helper()
	if len(labels)%2 != 0 {
		tb.Fatalf("labels of %s: %q is not name, value pairs", name, labels)
	}
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather %s: %v", name, err)
	}
	return SeriesIn(mfs, name, labels...)
}

// SeriesIn is Series over families already gathered.
func SeriesIn(mfs []*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	var sum float64
	var found bool
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			found = true
			sum += value(m)
		}
	}
	return sum, found
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		match := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				match = true
				break
			}
		}
		if !match {
			return false
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.GetSummary() != nil:
		return float64(m.GetSummary().GetSampleCount())
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// Main runs a package's tests, after setup (nil for none) has prepared
// what they share in a scratch directory (a test agent's binary, say),
// which is removed afterwards. A run whose tests passed fails if any
// goroutine outlived them: every test stops what it started.
//
// Run as root, it lets every user search (not list) the scratch directory
// and the directories above the test binary: a runner run as root runs
// its adapters as another user, which must reach their executables.
func Main(m *testing.M, setup func(dir string) error) {
	if exe, err := os.Executable(); err == nil {
		searchableAbove(exe)
	}
	var dir string
	if setup != nil {
		var err error
		if dir, err = os.MkdirTemp("", "skein-test-"); err != nil {
			fmt.Fprintln(os.Stderr, "scratch directory:", err)
			os.Exit(1)
		}
		searchableAbove(filepath.Join(dir, "x"))
		if err := setup(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			_ = os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}))
}

// TempDir is t.TempDir, whose parent (the test's own directory, made by
// the testing package) every user may search, not list, when the test
// runs as root: a runner run as root runs its adapters as another user,
// which must reach its data directory and what the test gives its agents.
func TempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	searchableAbove(dir)
	return dir
}

// SearchableAbove lets every user search the directories above path, as
// TempDir does: for a path given by a test's caller.
func SearchableAbove(path string) { searchableAbove(path) }

// searchableAbove lets every user search each directory above path and
// below the temporary directory (where go test builds and t.TempDir
// makes its directories), when the test runs as root; a non-root run
// changes nothing, and nothing outside the temporary directory changes.
func searchableAbove(path string) {
	tmp := filepath.Clean(os.TempDir())
	if os.Geteuid() != 0 {
		return
	}
	for d := filepath.Dir(filepath.Clean(path)); d != tmp && strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && fi.Mode().Perm()&0o001 == 0 {
			_ = os.Chmod(d, fi.Mode().Perm()|0o001)
		}
	}
}

// Long reports whether the long runs are asked for (make test-long sets
// SKEIN_LONG): soaks, faults that wait out real timeouts, and the
// large-message tests at full scale.
func Long() bool { return os.Getenv("SKEIN_LONG") != "" }

// LargeScale is the scale of the large-message tests that run a whole
// stack: the server's max_payload and the size of one large answer. The
// tests store three answers of one chunk and one of five, so pages hold
// one or two events and the largest answer spans records. make test runs
// them at a max_payload of 1 MiB and answers of 500 kB; make test-long at
// skein dev's 8 MiB and answers of 4 MB and 20 MB, which under the race
// detector beside another test run take minutes of a two-core machine.
func LargeScale() (maxPayload int32, chunk int) {
	if Long() {
		return 8 << 20, 4_000_000
	}
	return 1 << 20, 500_000
}
