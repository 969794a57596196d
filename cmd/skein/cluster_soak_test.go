package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/cluster"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog/eventlogtest"
)

// The soak's load: soakSessions sessions open at once, each running
// soakPrompts turns one after another, every turn streaming soakChunks
// message chunks at soakRate a second (the capacity benchmark's load, in
// short turns).
const (
	soakSessions = 200
	soakPrompts  = 20
	soakChunks   = 25
	soakRate     = 50
	// soakGrowth bounds each service's resident memory late in the run by
	// its memory once the load had settled; see checkBounded.
	soakGrowth = 2.0
)

// TestClusterSoak runs soakSessions sessions at once on make cluster's
// topology (three nodes, R3 streams, each service its own process), each
// soakPrompts prompts whose turns stream chunks, then audits every log:
// nothing lost or duplicated, sequences increasing, eventNo contiguous, one
// finish per turn. Every prompt must answer end_turn. Each process's
// resident memory is sampled over the run and reported; the services' must
// stay bounded (checkBounded says in what sense).
//
// Figures are logged one line per process in a fixed format, for a reader
// or a script:
//
//	soak run sessions=200 prompts=20 turns=4000 chunks=100000 duration_s=... open_s=... turns_per_s=... race=false
//	soak rss process=gateway-1 min_mib=... max_mib=... last_mib=... q1_mib=... q4_max_mib=... samples=...
//	soak audit sessions=200 records=... duration_s=...
//
// SKEIN_SOAK_PROMPTS=200 runs that many prompts per session instead, for a
// longer soak.
//
// duration_s is the load, from the first open to the last answer; open_s
// its first part, opening the sessions (an agent process each). On the 2
// shared cores Skein is tested on, the load took 66 s with -race (as make
// test-long runs it: services and agents race-built too), the audit 12 s
// and the whole test 85 s; without -race 23, 21 and 49 s.
func TestClusterSoak(t *testing.T) {
	if os.Getenv("SKEIN_LONG") == "" {
		t.Skip("a soak run: make test-long (SKEIN_LONG=1)")
	}
	c := startCluster(t, cluster.Options{Args: map[string][]string{
		// Every session and prompt is the admin token's: one principal.
		cluster.Gateway: {"--gateway.max-streams=1000000", "--gateway.max-waiting-prompts=1000000",
			"--gateway.rate-limit=1000000", "--gateway.rate-burst=1000000"},
		cluster.Runner: {"--adapter-runner.capacity=" + strconv.Itoa(soakSessions+8)},
	}})
	ctx := t.Context()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: soakSessions + 8}}
	t.Cleanup(client.CloseIdleConnections)
	base := c.HTTP[0] + "/v1/sessions/"
	sid := func(i int) string { return fmt.Sprintf("soak%03d", i) }

	prompts := soakPrompts
	if v := os.Getenv("SKEIN_SOAK_PROMPTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 4 {
			t.Fatalf("SKEIN_SOAK_PROMPTS=%q: want a number of prompts per session, 4 or more", v)
		}
		prompts = n
	}
	total := int64(soakSessions * prompts)
	var done atomic.Int64
	rss := startRSSSampler(t, c, &done, total)
	start := time.Now()

	// Open every session, all at once: each starts an agent process.
	var wg sync.WaitGroup
	for i := range soakSessions {
		wg.Go(func() {
			if code, body := soakDo(ctx, client, c.Token, http.MethodPut, base+sid(i), `{"agent":"test"}`); code != http.StatusOK {
				t.Errorf("open %s: %d %s", sid(i), code, body)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	opened := time.Since(start)
	// Then every session prompts, one turn after another.
	script := fmt.Sprintf("stream %d %d", soakChunks, soakRate)
	for i := range soakSessions {
		wg.Go(func() {
			for k := range prompts {
				code, body := soakDo(ctx, client, c.Token, http.MethodPost, base+sid(i)+"/prompt", promptBody(script))
				var answer struct{ StopReason string }
				if code != http.StatusOK || json.Unmarshal(body, &answer) != nil || answer.StopReason != "end_turn" {
					t.Errorf("%s prompt %d: %d %s, want 200 and stopReason end_turn", sid(i), k+1, code, body)
					return
				}
				rss.progress(done.Add(1))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	samples := rss.stop()
	t.Logf("soak run sessions=%d prompts=%d turns=%d chunks=%d duration_s=%.1f open_s=%.1f turns_per_s=%.1f race=%v",
		soakSessions, prompts, done.Load(), done.Load()*soakChunks, elapsed.Seconds(), opened.Seconds(), float64(done.Load())/(elapsed-opened).Seconds(), raceBuild())
	for _, p := range append(c.Services, c.Nodes...) {
		s := summarize(samples[p.Name], total)
		t.Logf("soak rss process=%s min_mib=%.1f max_mib=%.1f last_mib=%.1f q1_mib=%.1f q4_max_mib=%.1f samples=%d",
			p.Name, mib(s.min), mib(s.max), mib(s.last), mib(s.q1), mib(s.q4max), s.n)
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, p := range c.Services {
		if err := checkBounded(summarize(samples[p.Name], total)); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}

	// Every log passes the audit and holds its turns, completed.
	nc, err := nats.Connect(c.URL(cluster.UserOps))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Eight at a time: each read creates a consumer, a round trip to the
	// meta leader, and one after another the 200 took a minute.
	audit := time.Now()
	logs := make([]*eventlogtest.Log, soakSessions)
	errs := make([]error, soakSessions)
	sem := make(chan struct{}, 8)
	for i := range soakSessions {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			logs[i], errs[i] = eventlogtest.Read(ctx, js, "default", events.SessionID(sid(i)))
		})
	}
	wg.Wait()
	var records int
	for i, log := range logs {
		if errs[i] != nil {
			t.Errorf("audit %s: %v", sid(i), errs[i])
			continue
		}
		for _, problem := range log.Check() {
			t.Errorf("audit %s: %s", sid(i), problem)
		}
		if open := log.Open(); open != nil {
			t.Errorf("%s: turn %s never finished", sid(i), open.ID)
			continue
		}
		outcomes := log.Outcomes()
		if len(outcomes) != prompts || slices.ContainsFunc(outcomes, func(o string) bool { return o != events.OutcomeCompleted }) {
			t.Errorf("%s: the log holds turns %v, want %d completed", sid(i), outcomes, prompts)
		}
		records += len(log.Records)
	}
	t.Logf("soak audit sessions=%d records=%d duration_s=%.1f", soakSessions, records, time.Since(audit).Seconds())
}

// soakDo sends a request with the cluster's admin token and returns the
// status and body (0 and the error if there was no answer).
func soakDo(ctx context.Context, client *http.Client, token, method, url, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// rssSample is one process's resident memory at a point of the run.
type rssSample struct {
	turns int64 // turns completed when it was taken
	bytes int64
}

// rssSampler samples the resident memory of every node and service once a
// second, and once more as the run crosses each quarter of its turns, so
// that every quarter has a sample however fast the run goes.
type rssSampler struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	poke    chan int64
	total   int64
	mu      sync.Mutex
	samples map[string][]rssSample
}

func startRSSSampler(tb testing.TB, c *cluster.Cluster, done *atomic.Int64, total int64) *rssSampler {
	ctx, cancel := context.WithCancel(tb.Context())
	s := &rssSampler{cancel: cancel, poke: make(chan int64, 8), total: total, samples: map[string][]rssSample{}}
	procs := append(append([]*cluster.Proc{}, c.Services...), c.Nodes...)
	sample := func(turns int64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range procs {
			if b, err := vmRSS(p.Pid); err == nil {
				s.samples[p.Name] = append(s.samples[p.Name], rssSample{turns, b})
			}
		}
	}
	s.wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				sample(done.Load())
				return
			case turns := <-s.poke:
				sample(turns)
			case <-tick.C:
				sample(done.Load())
			}
		}
	})
	tb.Cleanup(s.stopWait)
	return s
}

// progress notes that turns are done: at each quarter's end it asks for a
// sample.
func (s *rssSampler) progress(turns int64) {
	if turns%(s.total/4) == 0 {
		s.poke <- turns // at most 4 pokes: the buffer holds them
	}
}

// stop takes a last sample and returns them all, by process name.
func (s *rssSampler) stop() map[string][]rssSample {
	s.stopWait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

func (s *rssSampler) stopWait() {
	s.cancel()
	s.wg.Wait()
}

// vmRSS reads process pid's resident set size from /proc/<pid>/status.
func vmRSS(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := strings.Fields(string(v)) // "123456 kB"
			if len(f) != 2 || f[1] != "kB" {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// rssSummary is a process's memory over the run: its extremes and last
// sample, and q1, the largest sample up to the end of the first quarter of
// the turns, beside q4max, the largest in the last quarter.
type rssSummary struct {
	n                    int
	min, max, last       int64
	q1, q4max            int64
	q1Samples, q4Samples int
}

func summarize(samples []rssSample, total int64) rssSummary {
	var s rssSummary
	s.n = len(samples)
	for i, x := range samples {
		if i == 0 || x.bytes < s.min {
			s.min = x.bytes
		}
		s.max = max(s.max, x.bytes)
		s.last = x.bytes
		if x.turns <= total/4 {
			s.q1 = max(s.q1, x.bytes)
			s.q1Samples++
		}
		if x.turns >= total*3/4 {
			s.q4max = max(s.q4max, x.bytes)
			s.q4Samples++
		}
	}
	return s
}

// checkBounded fails a process whose memory kept growing with the work
// done. It compares quarters of the turns, not of the time, so that a slow
// machine changes nothing but the number of samples, and it asserts no
// figure measured against a clock.
//
// By the end of the first quarter every session is open, its agent attached
// and five turns run: the process holds all it needs for the load, and its
// Go heap has been through many collections. What it holds past that is
// per turn. If that grew without bound, a process leaking L bytes a turn
// would sit near q1 + 2·total/4·L in the last quarter. Go's collector lets
// the heap reach twice the live heap before it collects (GOGC=100), and the
// runtime returns freed pages lazily, so a healthy process's resident memory
// wanders within about twice its live heap; q1 is a maximum, taken after
// that wandering has begun. Hence the generous bound: the last quarter's
// largest sample may not exceed soakGrowth (2) times q1. It catches a leak
// of tens of kilobytes a turn (a few hundred MiB over the run), not a small
// one: that is what a run of minutes can tell without flaking.
//
// The nodes are reported and not judged: nats-server's memory grows with
// what its streams hold, and every turn adds to them (the duplicate window
// keeps every message ID of its last two minutes, the stores keep indexes
// and caches of what they wrote). Over a soak of 60,000 turns
// (SKEIN_SOAK_PROMPTS=300, 270 s without -race) the nodes grew 25-35% from
// the first quarter to the last while the streams grew fourfold, and the
// services by 2-15%: a bound on the nodes would judge nats-server's memory
// per stored message, not Skein's.
func checkBounded(s rssSummary) error {
	if s.q1Samples == 0 || s.q4Samples == 0 {
		return fmt.Errorf("no sample in the first or last quarter of the turns (%d and %d)", s.q1Samples, s.q4Samples)
	}
	if float64(s.q4max) > soakGrowth*float64(s.q1) {
		return fmt.Errorf("resident memory grew with the work: %.1f MiB in the last quarter of the turns, over %.1f× the %.1f MiB of the first quarter",
			mib(s.q4max), soakGrowth, mib(s.q1))
	}
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// raceBuild reports whether this binary, and so every service and agent it
// stands in for, was built with the race detector: its memory figures are
// then several times a normal build's.
func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
