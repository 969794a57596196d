package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"skein.dev/internal/testutil"
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
	if !testutil.Long() {
		t.Skip("a soak run: make test-long (SKEIN_LONG=1)")
	}
	prompts := soakPrompts
	if v := os.Getenv("SKEIN_SOAK_PROMPTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 4 {
			t.Fatalf("SKEIN_SOAK_PROMPTS=%q: want a number of prompts per session, 4 or more", v)
		}
		prompts = n
	}
	runSoak(t, soak{prompts: prompts})
}

// TestClusterSoakFaults is the soak under node faults: while the
// soakSessions sessions stream turn after turn for soakFaultsFor, one node
// at a time is killed (SIGKILL) and restarted, one every soakFaultEvery,
// each only once every stream's replicas are current again, so that no two
// nodes are ever down or behind at once. Every turn must still end
// end_turn (a client retries a request that got no answer, or a code whose
// rule says to, with the same idempotency key: that joins the turn, never
// starts a second), every log passes the audit, and each service's
// resident memory stays bounded as in TestClusterSoak. Each fault is
// logged:
//
//	soak fault node=n2 killed_at_s=... back_after_s=...
func TestClusterSoakFaults(t *testing.T) {
	if !testutil.Long() {
		t.Skip("a soak run under node faults: make test-long (SKEIN_LONG=1)")
	}
	runSoak(t, soak{duration: soakFaultsFor, faultEvery: soakFaultEvery})
}

// How long the soak under faults runs, and how often a node dies.
const (
	soakFaultsFor  = 5 * time.Minute
	soakFaultEvery = 30 * time.Second
)

// soak is one soak run: prompts turns in each session, or as many as fit
// in duration; and, with faultEvery, a node killed and restarted that
// often.
type soak struct {
	prompts    int
	duration   time.Duration
	faultEvery time.Duration
}

func runSoak(t *testing.T, o soak) {
	c := startCluster(t, cluster.Options{Args: map[string][]string{
		// Every session and prompt is the admin token's: one principal.
		cluster.Gateway: {"--gateway.max-streams=1000000", "--gateway.max-waiting-prompts=1000000",
			"--gateway.rate-limit=1000000", "--gateway.rate-burst=1000000"},
		cluster.Runner: {"--adapter-runner.capacity=" + strconv.Itoa(soakSessions+8)},
		// One namespace and one principal hold every adapter.
		cluster.Session: {"--session.max-adapters-per-namespace=0", "--session.max-adapters-per-principal=0"},
	}})
	ctx := t.Context()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: soakSessions + 8}}
	t.Cleanup(client.CloseIdleConnections)
	base := c.HTTP[0] + "/v1/sessions/"
	sid := func(i int) string { return fmt.Sprintf("soak%03d", i) }

	// A run of a given length does not know its number of turns: its
	// quarters are counted once it ended (see rssSampler.progress).
	total := int64(soakSessions * o.prompts)
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
	loadEnd := time.Now().Add(o.duration)
	more := func(k int) bool {
		if o.duration > 0 {
			return time.Now().Before(loadEnd)
		}
		return k < o.prompts
	}
	var faults sync.WaitGroup
	faultsDone := make(chan struct{})
	if o.faultEvery > 0 {
		faults.Go(func() { soakFaults(t, c, o.faultEvery, start, faultsDone) })
	}
	prompted := make([]int, soakSessions)
	script := fmt.Sprintf("stream %d %d", soakChunks, soakRate)
	for i := range soakSessions {
		wg.Go(func() {
			for k := 0; more(k); k++ {
				// Keyed, so that the client's retry of a request that got
				// no answer (or a code whose rule is a keyed retry) joins
				// the turn instead of starting another.
				key := fmt.Sprintf("%s-%d", sid(i), k)
				code, body := soakPrompt(ctx, client, c.Token, base+sid(i)+"/prompt", key, script)
				prompted[i] = k + 1
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
	close(faultsDone)
	faults.Wait()
	elapsed := time.Since(start)
	samples := rss.stop()
	if total == 0 {
		total = done.Load()
	}
	t.Logf("soak run sessions=%d prompts=%d turns=%d chunks=%d duration_s=%.1f open_s=%.1f turns_per_s=%.1f race=%v faults_every_s=%.0f",
		soakSessions, o.prompts, done.Load(), done.Load()*soakChunks, elapsed.Seconds(), opened.Seconds(), float64(done.Load())/(elapsed-opened).Seconds(), raceBuild(), o.faultEvery.Seconds())
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
		if len(outcomes) != prompted[i] || slices.ContainsFunc(outcomes, func(o string) bool { return o != events.OutcomeCompleted }) {
			t.Errorf("%s: the log holds turns %v, want %d completed", sid(i), outcomes, prompted[i])
		}
		records += len(log.Records)
	}
	t.Logf("soak audit sessions=%d records=%d duration_s=%.1f", soakSessions, records, time.Since(audit).Seconds())
}

// soakPrompt posts a keyed prompt and returns its answer, sending it again
// with the same key, for up to two minutes, while the answer is none or an
// error whose rule is a keyed retry (docs/API.md), as a client does.
func soakPrompt(ctx context.Context, client *http.Client, token, url, key, script string) (int, []byte) {
	b, _ := json.Marshal(map[string]any{"idempotencyKey": key, "content": []map[string]string{{"type": "text", "text": script}}})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body := soakDo(ctx, client, token, http.MethodPost, url, string(b))
		if code == http.StatusOK || !(answer{code: code, body: body}).retryable() || time.Now().After(deadline) || !wait(ctx, 100*time.Millisecond) {
			return code, body
		}
	}
}

// soakFaults kills one node and restarts it every, round the nodes,
// until done; a node dies only once every stream's replicas are current,
// so that two are never down or behind at once.
func soakFaults(t *testing.T, c *cluster.Cluster, every time.Duration, start time.Time, done <-chan struct{}) {
	nc, err := nats.Connect(c.URL(cluster.UserOps), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Error(err)
		return
	}
	defer nc.Close()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for k := 0; ; k++ {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if err := awaitStreamsCurrent(t.Context(), c, nc, 2*time.Minute); err != nil {
			t.Errorf("soak fault %d: the cluster did not recover from the last: %v", k, err)
			return
		}
		n := c.Nodes[k%len(c.Nodes)]
		killed := time.Now()
		if err := n.Kill(); err != nil {
			t.Error(err)
			return
		}
		if err := n.Restart(t.Context()); err != nil {
			t.Error(err)
			return
		}
		t.Logf("soak fault node=%s killed_at_s=%.1f back_after_s=%.1f", n.Name, killed.Sub(start).Seconds(), time.Since(killed).Seconds())
	}
}

// awaitStreamsCurrent waits until every node is healthy and every stream
// and bucket of Skein has a leader and every one of its replicas is
// current, within d.
func awaitStreamsCurrent(ctx context.Context, c *cluster.Cluster, nc *nats.Conn, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		behind := append(nodesBehind(ctx, c), streamsBehind(nc)...)
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) || !wait(ctx, 100*time.Millisecond) {
			return errors.New(strings.Join(behind, "; "))
		}
	}
}

// nodesBehind says which nodes do not answer their health check with ok:
// a node that restarted is not whole until it is current with the meta
// leader (JetStream's health check says so), and a fault that kills
// another before then kills two.
func nodesBehind(ctx context.Context, c *cluster.Cluster) []string {
	var behind []string
	for i, n := range c.Nodes {
		var health struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/healthz", c.MonitorPorts[i])
		if err := getJSON(ctx, url, &health); err != nil || health.Status != "ok" {
			behind = append(behind, fmt.Sprintf("%s: health %q %v", n.Name, health.Error, err))
		}
	}
	return behind
}

// streamsBehind says, for each stream and bucket of Skein that has no
// leader or a replica that is not current, what it lacks.
func streamsBehind(nc *nats.Conn) []string {
	var behind []string
	for _, s := range faultStreams {
		info, err := streamInfoOf(nc, s)
		if err != nil {
			behind = append(behind, s+": "+err.Error())
			continue
		}
		current := 0
		for _, p := range info.Cluster.Replicas {
			if p.Current && !p.Offline {
				current++
			}
		}
		if info.Cluster.Leader == "" || current != len(info.Cluster.Replicas) {
			behind = append(behind, fmt.Sprintf("%s: leader %q, %d of %d followers current", s, info.Cluster.Leader, current, len(info.Cluster.Replicas)))
		}
	}
	return behind
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
			if b, err := vmRSS(p.PID()); err == nil {
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
// sample. A run of a given length, whose total is not known until it ends,
// has its samples taken once a second only.
func (s *rssSampler) progress(turns int64) {
	if s.total >= 4 && turns%(s.total/4) == 0 {
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
