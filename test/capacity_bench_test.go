package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/cluster"
	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/acp/acpwire"
)

// Capacity: how many sessions streaming at once one skein process serves
// before live deltas get late. Each session's test agent streams stamped
// agent_message_chunks ("stream COUNT RATE SIZE") and one SSE viewer per
// session (GET /v1/sessions/{id}/events?after=0) takes receive time − stamp
// as the live delta latency.
//
// The stack runs as `skein serve -target=all` in a process of its own (the
// skein binary, skeinBin), against nats-server in a process of its own
// (natstest.RunProcess), so each one's CPU is read from /proc/<pid>/stat:
// utime+stime of that process alone. The agents are children of the skein
// process, with their own pids, and their CPU is in the parent's cutime and
// cstime, which are not read: skein's figure is the runner, the session
// service, the gateway and the history service, nothing else. The viewers
// and the benchmark run in this process and share the machine's cores.
//
//	BenchmarkCapacity/path=skein,sessions=N,rate=R: N sessions through Skein
//	BenchmarkCapacity/path=pipe,sessions=N,rate=R: baseline, the same N agents
//	  read over their stdout pipes by this process (read time − stamp)
//	BenchmarkCapacity/path=jetstream,sessions=N,rate=R: baseline, synchronous
//	  JetStream publishes of the same lines at the same aggregate rate, from N
//	  goroutines on one connection (latency: publish to ack)
//
// Metrics: p50-ms and p99-ms (live delta, or publish latency), chunks/s
// delivered, skein-cpu-s/kchunk and nats-cpu-s/kchunk (CPU seconds per 1,000
// chunks: numerically the CPU milliseconds per chunk), lost (chunks never
// seen by a viewer: a stream cut off as too slow, or a delta superseded by
// its message, see underKnee). The load's own cost
// is reported beside them, since it shares the machine: agents-cpu-s/kchunk
// (the agents, summed) and busy-cores (the whole machine, from /proc/stat,
// over the window).
//
// One b.Loop iteration is one window of streaming (1 s): every session runs
// a turn of RATE×window chunks. Sizes: with -benchtime=1x (make bench-smoke)
// 4 sessions; otherwise 10 and 40.
//
// BenchmarkCapacitySweep (only with SKEIN_LONG set, run by make test-long,
// without the race detector) sweeps Skein in two topologies over N = 20,
// 40, 60, 80, 120, 160, ... with a 5 s window, each until the first N that
// does not keep up (p99 over 50 ms, a viewer cut off, or a chunk unshown:
// underKnee), or 400 sessions:
//
//	topology=dev: skein serve -target=all, one process, against one
//	  nats-server process, streams R1 (BenchmarkCapacity's path=skein)
//	topology=cluster: make cluster's topology (startCluster): three
//	  nats-server processes, streams R3, the four services as separate skein
//	  serve processes, each its own NATS user, the gateway asking a token
//
// The two take turns at each N, so that what else runs on the machine falls
// on both alike. A cluster's run reports, besides skein-cpu-s/kchunk (its
// four services summed) and nats-cpu-s/kchunk (its three nodes summed),
// each process's: gateway-, session-, adapter-runner-, history-, n1-, n2-
// and n3-cpu-s/kchunk. Then, per topology, the knee: the largest N that
// kept up (BenchmarkCapacitySweep/topology=T,rate=50,result=knee,
// knee-sessions), with that topology's figures at the largest N both
// topologies ran under their knees (at-sessions), so that their costs per
// chunk are compared at one load. For profiling, SKEIN_CAPACITY_SESSIONS=60,80
// runs those sizes instead, SKEIN_CAPACITY_TOPOLOGY=cluster one topology,
// SKEIN_CAPACITY_WINDOW=20s lengthens the window, and
// SKEIN_CAPACITY_PPROF=127.0.0.1:6060 starts skein (dev) with --pprof there,
// and SKEIN_CAPACITY_NATS_PROFILE=6061 nats-server (dev) with its profiling
// port.

const (
	capacityRate  = 50 // chunks per second per session
	capacitySize  = 16 // bytes of text per chunk
	capacityKnee  = 50 * time.Millisecond
	capacityDrain = 30 * time.Second // longest wait for the last chunks after a window
	clockTicks    = 100              // USER_HZ: the unit of /proc/<pid>/stat times
)

func BenchmarkCapacity(b *testing.B) {
	sizes := []int{10, 40}
	if f := flag.Lookup("test.benchtime"); f != nil && f.Value.String() == "1x" {
		sizes = []int{4}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("path=skein,sessions=%d,rate=%d", n, capacityRate), func(b *testing.B) {
			reportCapacity(b, runSkeinCapacity(b, n, capacityRate, time.Second, ""))
		})
		b.Run(fmt.Sprintf("path=pipe,sessions=%d,rate=%d", n, capacityRate), func(b *testing.B) {
			reportCapacity(b, runPipeCapacity(b, n, capacityRate, time.Second))
		})
		b.Run(fmt.Sprintf("path=jetstream,sessions=%d,rate=%d", n, capacityRate), func(b *testing.B) {
			reportCapacity(b, runRawCapacity(b, n, capacityRate, time.Second))
		})
	}
}

func BenchmarkCapacitySweep(b *testing.B) {
	sizes := []int{20, 40, 60, 80, 120, 160, 200, 240, 320, 400}
	if v := os.Getenv("SKEIN_CAPACITY_SESSIONS"); v != "" {
		sizes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("SKEIN_CAPACITY_SESSIONS=%q: want a comma list of session counts", v)
			}
			sizes = append(sizes, n)
		}
	} else if !testutil.Long() {
		b.Skip("the capacity sweep runs with SKEIN_LONG=1 (make test-long)")
	}
	window := 5 * time.Second
	if v := os.Getenv("SKEIN_CAPACITY_WINDOW"); v != "" {
		var err error
		if window, err = time.ParseDuration(v); err != nil || window < time.Second {
			b.Fatalf("SKEIN_CAPACITY_WINDOW=%q: want a duration of 1s or more", v)
		}
	}
	topologies := []string{"dev", "cluster"}
	if v := os.Getenv("SKEIN_CAPACITY_TOPOLOGY"); v != "" {
		topologies = strings.Split(v, ",")
		for _, t := range topologies {
			if t != "dev" && t != "cluster" {
				b.Fatalf("SKEIN_CAPACITY_TOPOLOGY=%q: want dev, cluster or both, comma separated", v)
			}
		}
	}
	pprof := os.Getenv("SKEIN_CAPACITY_PPROF")
	// The topologies take turns at each size, so that the load the other
	// users of the machine put on it falls on both alike.
	knee := map[string]int{}
	done := map[string]bool{}
	results := map[string]map[int]capacityResult{}
	for _, n := range sizes {
		for _, topo := range topologies {
			if done[topo] {
				continue
			}
			var res capacityResult
			b.Run(fmt.Sprintf("topology=%s,sessions=%d,rate=%d", topo, n, capacityRate), func(b *testing.B) {
				if topo == "cluster" {
					res = runCapacity(b, startClusterTarget(b, n), n, capacityRate, window)
				} else {
					res = runSkeinCapacity(b, n, capacityRate, window, pprof)
				}
				reportCapacity(b, res)
			})
			if !res.underKnee() {
				done[topo] = true
				continue
			}
			knee[topo] = n
			if results[topo] == nil {
				results[topo] = map[int]capacityResult{}
			}
			results[topo][n] = res
		}
	}
	// Each topology's knee, and its figures at the largest size every
	// topology ran under its knee: CPU per chunk falls as the load rises
	// (each wake-up carries more), so the topologies' costs are compared at
	// one load, not each at its own knee.
	at := 0
	for i, topo := range topologies {
		if i == 0 || knee[topo] < at {
			at = knee[topo]
		}
	}
	for _, topo := range topologies {
		b.Logf("capacity knee at %d chunks/s per session, topology=%s: %d sessions (live delta p99 < %v)", capacityRate, topo, knee[topo], capacityKnee)
		b.Run(fmt.Sprintf("topology=%s,rate=%d,result=knee", topo, capacityRate), func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(float64(knee[topo]), "knee-sessions")
			if at == 0 {
				return
			}
			b.ReportMetric(float64(at), "at-sessions")
			reportCapacity(b, results[topo][at])
		})
	}
}

// capacityResult is what one run measured.
type capacityResult struct {
	p50, p99         time.Duration
	samples          int
	chunks           int // delivered
	lost             int
	cut              int // viewers cut off by the gateway as too slow
	elapsed          time.Duration
	skeinCPU, natCPU time.Duration // -1: not measured
	agentCPU         time.Duration // the agents, summed; -1: not measured
	busy             float64       // the machine's busy cores over the window; -1: not measured
	procs            []procTime    // in a cluster, each process's CPU (skeinCPU and natCPU sum them)
}

// underKnee reports whether a run of the sweep kept up: live delta p99
// under capacityKnee, no viewer cut off, no chunk unshown. A chunk can go
// unshown without a fault: the gateway drops a delta that reaches it after
// the durable event it precedes (services/gateway/sse.go, step 5), its text
// then in that event, and in a cluster a delta and its turn's final message
// take different routes (the session's node to the gateway's, against the
// ACP_LOG leader and its replicas). The sweep cannot tell that from a loss,
// so every unshown chunk counts against the run: two of the first cluster
// sweeps stopped on 2 chunks of 5,000, which a later check of 72,000
// numbered chunks on the cluster did not reproduce.
func (r capacityResult) underKnee() bool {
	return r.samples > 0 && r.p99 < capacityKnee && r.cut == 0 && r.lost == 0
}

// procTime is one process's CPU time over a run.
type procTime struct {
	name string
	cpu  time.Duration
}

func reportCapacity(b *testing.B, r capacityResult) {
	if r.samples == 0 {
		b.Fatal("no samples")
	}
	b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(r.chunks)/r.elapsed.Seconds(), "chunks/s")
	b.ReportMetric(float64(r.lost), "lost")
	if r.cut > 0 {
		b.ReportMetric(float64(r.cut), "cut-streams")
	}
	if r.skeinCPU >= 0 {
		b.ReportMetric(r.skeinCPU.Seconds()*1000/float64(max(r.chunks, 1)), "skein-cpu-s/kchunk")
	}
	if r.natCPU >= 0 {
		b.ReportMetric(r.natCPU.Seconds()*1000/float64(max(r.chunks, 1)), "nats-cpu-s/kchunk")
	}
	for _, p := range r.procs {
		b.ReportMetric(p.cpu.Seconds()*1000/float64(max(r.chunks, 1)), p.name+"-cpu-s/kchunk")
	}
	if r.agentCPU >= 0 {
		b.ReportMetric(r.agentCPU.Seconds()*1000/float64(max(r.chunks, 1)), "agents-cpu-s/kchunk")
	}
	if r.busy >= 0 {
		b.ReportMetric(r.busy, "busy-cores")
	}
}

// streamScript is the turn of one window: rate×window stamped chunks.
func streamScript(rate int, window time.Duration) (string, int) {
	n := int(float64(rate) * window.Seconds())
	return fmt.Sprintf("stream %d %d %d", n, rate, capacitySize), n
}

// tally counts chunks received and their latencies, from many goroutines,
// and lets one goroutine wait for a count.
type tally struct {
	mu    sync.Mutex
	lat   []time.Duration
	last  time.Time
	since time.Time     // chunks stamped before are not counted
	seen  map[int]bool  // the viewers that received a chunk
	ends  map[int]int   // per viewer, the messages that ended (durable)
	cut   int           // viewers cut off
	tick  chan struct{} // a receipt happened
}

func newTally() *tally {
	return &tally{tick: make(chan struct{}, 1), seen: map[int]bool{}, ends: map[int]int{}}
}

// ended counts a message that ended for viewer: it received the message's
// durable event, after which no delta of it is shown.
func (t *tally) ended(viewer int) {
	t.mu.Lock()
	t.ends[viewer]++
	t.mu.Unlock()
	t.ticked()
}

// allEnded reports whether each of viewers 0..n-1 has seen k messages end.
func (t *tally) allEnded(n, k int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range n {
		if t.ends[i] < k {
			return false
		}
	}
	return true
}

func (t *tally) ticked() {
	select {
	case t.tick <- struct{}{}:
	default:
	}
}

func (t *tally) add(got, at time.Time) { t.addView(-1, got, at) }

// addView counts a chunk viewer received (-1: not a viewer's).
func (t *tally) addView(viewer int, got, at time.Time) {
	t.mu.Lock()
	if at.Before(t.since) {
		t.mu.Unlock()
		return
	}
	t.lat = append(t.lat, got.Sub(at))
	t.last = got
	if viewer >= 0 {
		t.seen[viewer] = true
	}
	t.mu.Unlock()
	t.ticked()
}

func (t *tally) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.lat)
}

// viewers returns how many viewers received a chunk.
func (t *tally) viewers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen)
}

// reset forgets what was counted and counts from now on only chunks
// stamped at since or later: those of a turn before, still on their way,
// are left out.
func (t *tally) reset(since time.Time) {
	t.mu.Lock()
	t.lat, t.last, t.since, t.seen, t.ends = nil, time.Time{}, since, map[int]bool{}, map[int]int{}
	t.mu.Unlock()
}

// waitFor waits until want chunks have arrived, or for limit.
func (t *tally) waitFor(ctx context.Context, want int, limit time.Duration) {
	t.waitUntil(ctx, func() bool { return t.count() >= want }, limit)
}

// waitUntil waits until cond holds, checking it at each receipt, or for
// limit.
func (t *tally) waitUntil(ctx context.Context, cond func() bool, limit time.Duration) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-t.tick:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// result summarises the tally over a window that started at start.
func (t *tally) result(start time.Time, want int) capacityResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := capacityResult{samples: len(t.lat), chunks: len(t.lat), lost: want - len(t.lat), cut: t.cut, skeinCPU: -1, natCPU: -1, agentCPU: -1, busy: -1}
	r.elapsed = max(t.last.Sub(start), time.Millisecond)
	if len(t.lat) > 0 {
		slices.Sort(t.lat)
		r.p50, r.p99 = t.lat[len(t.lat)/2], t.lat[len(t.lat)*99/100]
	}
	return r
}

// capacityTarget is a running Skein the load is put on: its gateway, and
// the processes whose CPU is measured.
type capacityTarget struct {
	url    string // a gateway's base URL
	client *http.Client
	// procs are the processes measured; each one's nats says whether it
	// counts as nats-server's CPU or as Skein's.
	procs  []capacityProc
	each   bool          // report each process's CPU, not only the two sums
	runner int           // the pid whose children are the agents
	out    func() string // what to show when it fails
}

type capacityProc struct {
	name string // "skein", "nats"; in a cluster gateway, session, ..., n1, n2, n3
	pid  int
	nats bool
}

// startDevTarget starts skein serve -target=all, one process, against one
// nats-server process: R1 streams, every service in one process.
func startDevTarget(b *testing.B, n int, pprofAddr string) *capacityTarget {
	var natsArgs []string
	if port := os.Getenv("SKEIN_CAPACITY_NATS_PROFILE"); port != "" {
		natsArgs = []string{"--profile", port}
	}
	natsURL := natstest.RunProcess(b, natsArgs...)
	natsPid := natsServerPid(b, natsURL)
	sk := startServe(b, natsURL, n+8, pprofAddr)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n + 8}}
	b.Cleanup(client.CloseIdleConnections)
	return &capacityTarget{url: sk.url, client: client, runner: sk.pid, out: sk.out.String,
		procs: []capacityProc{{name: "skein", pid: sk.pid}, {name: "nats", pid: natsPid, nats: true}}}
}

// startClusterTarget starts make cluster's topology (startCluster): three
// nats-server processes, R3 streams, and the four services as separate
// skein serve processes, each its own NATS user, with the gateway's and the
// runner's limits raised for the load as startServe raises them. The
// services log at info, as deployed (the harness reads their readiness from
// an info line), where dev's skein serve logs warnings only: a few lines
// per session opened, none per chunk.
func startClusterTarget(b *testing.B, n int) *capacityTarget {
	c := startCluster(commaFreeTB{b}, cluster.Options{Args: map[string][]string{
		cluster.Gateway: {"--gateway.max-streams=1000000", "--gateway.max-waiting-prompts=1000000", "--gateway.rate-burst=1000000"},
		cluster.Runner:  {"--adapter-runner.capacity=" + strconv.Itoa(n+8)},
		// One namespace and one principal hold every adapter.
		cluster.Session: {"--session.max-adapters-per-namespace=0", "--session.max-adapters-per-principal=0"},
	}})
	client := &http.Client{Transport: bearer{c.Token, &http.Transport{MaxIdleConnsPerHost: n + 8}}}
	b.Cleanup(client.CloseIdleConnections)
	t := &capacityTarget{url: c.HTTP[0], client: client, each: true, out: func() string {
		var out strings.Builder
		for _, p := range append(c.Nodes, c.Services...) {
			fmt.Fprintf(&out, "--- %s's log (tail):\n%s\n", p.Name, p.Tail(2000))
		}
		return out.String()
	}}
	for _, p := range c.Services {
		// One replica of each: the name without its "-1".
		t.procs = append(t.procs, capacityProc{name: p.Name[:strings.LastIndexByte(p.Name, '-')], pid: p.Pid})
		if strings.HasPrefix(p.Name, cluster.Runner+"-") {
			t.runner = p.Pid
		}
	}
	for _, p := range c.Nodes {
		t.procs = append(t.procs, capacityProc{name: p.Name, pid: p.Pid, nats: true})
	}
	return t
}

// commaFreeTB gives startCluster temporary directories whose names hold no
// comma, unlike b.TempDir's for a sub-benchmark named key=value,key=value:
// ops/cluster/nats/node.conf reads store_dir from $NATS_STORE_DIR unquoted,
// and nats-server's configuration parser ends the value at a comma.
type commaFreeTB struct{ testing.TB }

func (t commaFreeTB) TempDir() string {
	dir, err := os.MkdirTemp("", "skein-capacity-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// As t.TempDir's own: a runner run as root runs its adapters as
	// another user, which must reach its data directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// bearer adds a token to every request: the cluster's gateway asks for
// one, as deployed.
type bearer struct {
	token string
	base  *http.Transport
}

func (t bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(req)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (t bearer) CloseIdleConnections() { t.base.CloseIdleConnections() }

// runSkeinCapacity measures n sessions through skein serve and its viewers.
func runSkeinCapacity(b *testing.B, n, rate int, window time.Duration, pprofAddr string) capacityResult {
	return runCapacity(b, startDevTarget(b, n, pprofAddr), n, rate, window)
}

// runCapacity measures n sessions through a Skein and its viewers.
func runCapacity(b *testing.B, sk *capacityTarget, n, rate int, window time.Duration) capacityResult {
	client := sk.client
	ctx := b.Context()

	// Open the sessions (the first waits for the gateway), then one viewer
	// each: a 200 means its subscriptions are in place.
	bases := make([]string, n)
	for i := range bases {
		bases[i] = fmt.Sprintf("%s/v1/sessions/cap%d", sk.url, i)
		if err := pollFor(ctx, "skein serve to open a session", func() bool {
			return httpDo(ctx, client, http.MethodPut, bases[i], `{"agent":"test"}`) == nil
		}); err != nil {
			b.Fatalf("%v\nskein output:\n%s", err, sk.out())
		}
	}
	tl := newTally()
	vctx, stopViewers := context.WithCancel(ctx)
	var viewers sync.WaitGroup
	b.Cleanup(func() { stopViewers(); viewers.Wait() })
	for i, base := range bases {
		body, err := openEvents(vctx, client, base+"/events?after=0")
		if err != nil {
			b.Fatal(err)
		}
		viewers.Go(func() { readEvents(body, tl, i) })
	}
	round := func(script string) {
		var wg sync.WaitGroup
		for _, base := range bases {
			wg.Go(func() {
				if err := httpDo(ctx, client, http.MethodPost, base+"/prompt", promptBody(script)); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// Warm up: every adapter attached and every viewer live, each having
	// received a chunk, and its message's end, so that none of the warm-up
	// is counted in the window. The warm-up turn streams five chunks, 100 ms
	// apart: a one-chunk turn's only delta is the one most exposed to being
	// superseded by the turn's message (see underKnee), and on the cluster
	// a sweep's warm-up of one chunk once saw 7 of 20 viewers get it.
	round("stream 5 10")
	tl.waitUntil(ctx, func() bool { return tl.viewers() == n && tl.allEnded(n, 1) }, capacityDrain)
	if got := tl.viewers(); got != n || !tl.allEnded(n, 1) {
		b.Fatalf("warm-up: %d of %d viewers saw a chunk, or not every message ended\nskein output:\n%s", got, n, sk.out())
	}

	script, perTurn := streamScript(rate, window)
	agents := childPids(sk.runner)
	cpu0 := make([]time.Duration, len(sk.procs))
	for i, p := range sk.procs {
		cpu0[i] = procCPU(b, p.pid)
	}
	agents0, machine0 := sumCPU(agents), machineCPU(b)
	start := time.Now()
	tl.reset(start)
	for b.Loop() {
		round(script)
	}
	// Every chunk has arrived, or every viewer has seen each turn's message
	// end: a chunk not shown by then never will be (see underKnee), and
	// waiting longer would add idle time to the CPU figures.
	want := b.N * n * perTurn
	tl.waitUntil(ctx, func() bool { return tl.count() >= want || tl.allEnded(n, b.N) }, capacityDrain)
	res := tl.result(start, want)
	res.skeinCPU, res.natCPU = 0, 0
	for i, p := range sk.procs {
		d := procCPU(b, p.pid) - cpu0[i]
		if p.nats {
			res.natCPU += d
		} else {
			res.skeinCPU += d
		}
		if sk.each {
			res.procs = append(res.procs, procTime{p.name, d})
		}
	}
	res.agentCPU = sumCPU(agents) - agents0
	res.busy = machineCPU(b).busySince(machine0)
	return res
}

// runPipeCapacity is the baseline: the same agents, read over pipes here.
func runPipeCapacity(b *testing.B, n, rate int, window time.Duration) capacityResult {
	tl := newTally()
	type agent struct {
		conn *acpwire.Conn
		sid  string
	}
	agents := make([]agent, n)
	for i := range agents {
		conn := startAgent(b, func(m *acpwire.Message) {
			got := time.Now()
			if u, err := acpwire.ParseSessionUpdate(m.Params); err == nil {
				if at, ok := sentAt(u.Update); ok {
					tl.add(got, at)
				}
			}
		})
		sess, err := conn.NewSession(b.Context(), acpwire.NewSessionParams{Cwd: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		agents[i] = agent{conn, sess.SessionID}
	}
	script, perTurn := streamScript(rate, window)
	var content struct{ Content json.RawMessage }
	_ = json.Unmarshal([]byte(promptBody(script)), &content)
	start := time.Now()
	for b.Loop() {
		var wg sync.WaitGroup
		for _, a := range agents {
			wg.Go(func() {
				if _, err := a.conn.Prompt(b.Context(), a.sid, content.Content); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	want := b.N * n * perTurn
	tl.waitFor(b.Context(), want, capacityDrain)
	return tl.result(start, want)
}

// runRawCapacity is the baseline of NATS alone: n publishers, each paced at
// rate, sending the lines the agents write to a file-stored stream, one
// synchronous publish at a time.
func runRawCapacity(b *testing.B, n, rate int, window time.Duration) capacityResult {
	natsURL := natstest.RunProcess(b)
	natsPid := natsServerPid(b, natsURL)
	js, err := jetstream.New(natstest.ConnectURL(b, natsURL))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(b.Context(), jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	text, _ := json.Marshal(strings.Repeat("x", capacitySize))
	line := func(at time.Time) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess_0123456789abcdef01234567","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":` +
			string(text) + `},"messageId":"msg_1","_meta":{"skein":{"sentAt":` + strconv.FormatInt(at.UnixNano(), 10) + "}}}}}\n")
	}
	_, perTurn := streamScript(rate, window)
	interval := time.Second / time.Duration(rate)
	tl := newTally()
	nats0 := procCPU(b, natsPid)
	start := time.Now()
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range n {
			subject := fmt.Sprintf("raw.%d", i)
			wg.Go(func() {
				t0 := time.Now()
				timer := time.NewTimer(0)
				defer timer.Stop()
				for k := range perTurn {
					if wait := time.Until(t0.Add(time.Duration(k) * interval)); wait > 0 {
						timer.Reset(wait)
						<-timer.C
					}
					at := time.Now()
					if _, err := js.Publish(b.Context(), subject, line(at)); err != nil {
						b.Error(err)
						return
					}
					tl.add(time.Now(), at)
				}
			})
		}
		wg.Wait()
	}
	res := tl.result(start, b.N*n*perTurn)
	res.natCPU = procCPU(b, natsPid) - nats0
	return res
}

// serveProcess is `skein serve -target=all` run as a process.
type serveProcess struct {
	pid int
	url string
	out *lockedBuffer
}

func startServe(b *testing.B, natsURL string, capacity int, pprofAddr string) *serveProcess {
	b.Helper()
	// The HTTP port is picked here and may be taken by another process
	// before skein binds it: then skein exits at once, and another port is
	// tried.
	for attempt := 1; ; attempt++ {
		sp, exited := startServeOnce(b, natsURL, capacity, pprofAddr)
		err := pollFor(b.Context(), "skein serve's gateway", func() bool {
			select {
			case <-exited:
				return true
			default:
			}
			resp, err := http.Get(sp.url + "/v1/agents")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		select {
		case <-exited:
			if attempt < 3 && strings.Contains(sp.out.String(), "address already in use") {
				continue
			}
			b.Fatalf("skein serve exited:\n%s", sp.out)
		default:
		}
		if err != nil {
			b.Fatal(err)
		}
		return sp
	}
}

// startServeOnce starts skein serve; exited is closed when it ends.
func startServeOnce(b *testing.B, natsURL string, capacity int, pprofAddr string) (*serveProcess, <-chan struct{}) {
	exe := skeinBin(b)
	httpAddr := freeAddr(b)
	args := []string{"serve", "--target=all", "--nats", natsURL, "--gateway.http-addr", httpAddr,
		"--adapter-runner.id", "capacity", "--adapter-runner.data-dir", filepath.Join(testutil.TempDir(b), "runner"),
		"--adapter-runner.capacity", strconv.Itoa(capacity), "--adapter-runner.test-agents", "--log-level", "warn", "--gateway.insecure-no-auth",
		// Every session and viewer of the load is one principal's.
		"--gateway.max-streams", "1000000", "--gateway.max-waiting-prompts", "1000000", "--gateway.rate-burst", "1000000",
		// ...and one namespace's: no quota on its adapters.
		"--session.max-adapters-per-namespace=0", "--session.max-adapters-per-principal=0"}
	if pprofAddr != "" {
		args = append(args, "--pprof", pprofAddr)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = os.Environ()
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		// SIGTERM: the runner stops its adapters on the way out.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return &serveProcess{pid: cmd.Process.Pid, url: "http://" + httpAddr, out: out}, exited
}

// lockedBuffer is a bytes.Buffer safe for the process's two output pipes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 1<<20 { // a flood of warnings: keep the first MiB
		return len(p), nil
	}
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// freeAddr returns a loopback address whose port is free now (another
// process may take it before it is bound: callers retry).
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := (&net.ListenConfig{}).Listen(tb.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpDo(ctx context.Context, c *http.Client, method, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s = %d %s", method, url, resp.StatusCode, out)
	}
	return nil
}

// openEvents opens an event stream and returns its body once the gateway
// answered 200.
func openEvents(ctx context.Context, c *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s = %d", url, resp.StatusCode)
	}
	return resp.Body, nil
}

// readEvents reads an event stream until it ends, adding the latency of
// each stamped ephemeral event to tl. It looks for the stamp's digits
// rather than decoding the JSON, to cost the viewer side little.
func readEvents(body io.ReadCloser, tl *tally, viewer int) {
	defer body.Close()
	r := bufio.NewReaderSize(body, 64<<10)
	key := []byte(`"sentAt":`)
	var kind []byte
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		got := time.Now()
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			kind = append(kind[:0], bytes.TrimSpace(line[len("event: "):])...)
			if string(kind) == "error" {
				tl.mu.Lock()
				tl.cut++
				tl.mu.Unlock()
			}
		case bytes.HasPrefix(line, []byte("data: ")) && string(kind) == "durable":
			// A message's end: its text joined in one durable event.
			if bytes.Contains(line, []byte(`"type":"agent_message_chunk"`)) {
				tl.ended(viewer)
			}
		case bytes.HasPrefix(line, []byte("data: ")) && string(kind) == "ephemeral":
			i := bytes.Index(line, key)
			if i < 0 {
				continue
			}
			digits := line[i+len(key):]
			end := bytes.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' })
			if end < 0 {
				end = len(digits)
			}
			if ns, err := strconv.ParseInt(string(digits[:end]), 10, 64); err == nil {
				tl.addView(viewer, got, time.Unix(0, ns))
			}
		case len(bytes.TrimSpace(line)) == 0:
			kind = kind[:0]
		}
	}
}

// procCPU returns the user and system CPU time of process pid itself, its
// threads included and its children (cutime, cstime) not.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	d, err := statCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// statCPU reads process pid's utime+stime from /proc/<pid>/stat.
func statCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: utime and stime are fields 14 and 15, the
	// 12th and 13th after the comm's closing parenthesis.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, stat)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// childPids returns the processes whose parent is pid: the agents of a
// skein serve.
func childPids(pid int) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		stat, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, child)
		}
	}
	return out
}

// sumCPU is statCPU summed over pids, those that still run.
func sumCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		if d, err := statCPU(pid); err == nil {
			sum += d
		}
	}
	return sum
}

// machineTimes is the first line of /proc/stat: every CPU's time, summed,
// and the part of it idle (idle and iowait).
type machineTimes struct{ total, idle int64 }

func machineCPU(b *testing.B) machineTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	var t machineTimes
	for i, f := range strings.Fields(string(line))[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		t.total += v
		if i == 3 || i == 4 {
			t.idle += v
		}
	}
	return t
}

// busySince returns how many cores were busy, on average, since t0.
func (t machineTimes) busySince(t0 machineTimes) float64 {
	total := t.total - t0.total
	if total <= 0 {
		return 0
	}
	return float64(runtime.NumCPU()) * (1 - float64(t.idle-t0.idle)/float64(total))
}

// natsServerPid finds the nats-server natstest.RunProcess started for url:
// a child of this process named nats-server whose ports file (in its
// --ports_file_dir, named by its pid) lists url.
func natsServerPid(b *testing.B, url string) int {
	b.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if filepath.Base(args[0]) != "nats-server" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		for i, a := range args[:len(args)-1] {
			if a != "--ports_file_dir" {
				continue
			}
			ports, err := os.ReadFile(filepath.Join(args[i+1], fmt.Sprintf("nats-server_%d.ports", pid)))
			if err == nil && bytes.Contains(ports, []byte(`"`+url+`"`)) {
				return pid
			}
		}
	}
	b.Fatalf("no nats-server process serves %s", url)
	return 0
}
