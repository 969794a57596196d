// Command benchtable prints the figures the issues name, each beside its
// baseline from the same benchmark run. It reads `go test -bench` output on
// standard input (or the files named) and writes a table. With -md FILE it
// also writes the table as Markdown to FILE, headed by the date and the
// machine (the CPU the run named, its cores, the memory): make bench writes
// docs/BENCHMARKS.md so.
//
//	go test -run='^$' -bench=. work | go run ./ops/tools/benchtable [-md FILE]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one figure: a metric of one benchmark, beside the same (or another)
// metric of its baseline.
type row struct {
	figure   string
	bench    string // sub-benchmark name without the -GOMAXPROCS suffix
	metric   string
	baseline string // "": the figure has none
	baseMet  string
	target   string
}

// The capacity sweep's results, one per topology.
const (
	kneeDev     = "BenchmarkCapacitySweep/topology=dev,rate=50,result=knee"
	kneeCluster = "BenchmarkCapacitySweep/topology=cluster,rate=50,result=knee"
)

var rows = []row{
	// Durable updates through the whole stack, each beside raw async
	// publishes to a stream configured as ACP_LOG is (RePublish, replicas,
	// storage and limits alike) on the same servers: one embedded server
	// (R1, connections in process), then a three-server cluster (R3,
	// connections to one node over loopback TCP). Raw R3 beside raw R1 is
	// what replication costs, TCP included.
	{"durable updates, R1, 1 session, 256 B", "BenchmarkDurableUpdates/path=session,replicas=1,size=256,sessions=1", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=1,size=256", "updates/s", ">= 30% of raw"},
	{"durable updates, R1, 4 sessions, 256 B", "BenchmarkDurableUpdates/path=session,replicas=1,size=256,sessions=4", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=1,size=256", "updates/s", ">= 30% of raw"},
	{"durable updates, R1, 1 session, 1 KiB", "BenchmarkDurableUpdates/path=session,replicas=1,size=1024,sessions=1", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=1,size=1024", "updates/s", ">= 30% of raw"},
	{"durable updates, R1, 4 sessions, 1 KiB", "BenchmarkDurableUpdates/path=session,replicas=1,size=1024,sessions=4", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=1,size=1024", "updates/s", ">= 30% of raw"},
	{"durable updates, R3, 1 session, 256 B", "BenchmarkDurableUpdates/path=session,replicas=3,size=256,sessions=1", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=3,size=256", "updates/s", ">= 30% of raw"},
	{"durable updates, R3, 4 sessions, 256 B", "BenchmarkDurableUpdates/path=session,replicas=3,size=256,sessions=4", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=3,size=256", "updates/s", ">= 30% of raw"},
	{"durable updates, R3, 1 session, 1 KiB", "BenchmarkDurableUpdates/path=session,replicas=3,size=1024,sessions=1", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=3,size=1024", "updates/s", ">= 30% of raw"},
	{"durable updates, R3, 4 sessions, 1 KiB", "BenchmarkDurableUpdates/path=session,replicas=3,size=1024,sessions=4", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=3,size=1024", "updates/s", ">= 30% of raw"},
	{"raw JetStream publishes to ACP_LOG's configuration, R3 beside R1, 256 B", "BenchmarkDurableUpdates/path=raw,replicas=3,size=256", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=1,size=256", "updates/s", ""},
	{"raw JetStream publishes to ACP_LOG's configuration, R3 beside R1, 1 KiB", "BenchmarkDurableUpdates/path=raw,replicas=3,size=1024", "updates/s", "BenchmarkDurableUpdates/path=raw,replicas=1,size=1024", "updates/s", ""},
	{"log writer appends, 1 session, 256 B", "BenchmarkAppend/batch=1,size=256,sessions=1", "records/s", "BenchmarkAppend/raw,size=256", "records/s", ""},
	{"log writer appends, 16 sessions, 256 B", "BenchmarkAppend/batch=1,size=256,sessions=16", "records/s", "BenchmarkAppend/raw,size=256", "records/s", ""},
	{"prompt round trip p50, HTTP", "BenchmarkPromptRoundTrip/via=http", "p50-ms", "BenchmarkPromptRoundTrip/via=stdio", "p50-ms", "< 2 ms"},
	{"prompt round trip p99, HTTP", "BenchmarkPromptRoundTrip/via=http", "p99-ms", "BenchmarkPromptRoundTrip/via=stdio", "p99-ms", ""},
	{"prompt round trip p50, HTTP, auth on", "BenchmarkPromptRoundTrip/via=http,auth=on", "p50-ms", "BenchmarkPromptRoundTrip/via=http", "p50-ms", "< 5% over auth off"},
	{"prompt round trip p99, HTTP, auth on", "BenchmarkPromptRoundTrip/via=http,auth=on", "p99-ms", "BenchmarkPromptRoundTrip/via=http", "p99-ms", ""},
	{"prompt round trip p50, NATS", "BenchmarkPromptRoundTrip/via=nats", "p50-ms", "BenchmarkPromptRoundTrip/via=stdio", "p50-ms", ""},
	{"prompt round trip p99, NATS", "BenchmarkPromptRoundTrip/via=nats", "p99-ms", "BenchmarkPromptRoundTrip/via=stdio", "p99-ms", ""},
	{"prompt round trip p50, NATS, beside a core NATS request and reply", "BenchmarkPromptRoundTrip/via=nats", "p50-ms", "BenchmarkPromptRoundTrip/via=core-request", "p50-ms", ""},
	// Webhooks (issue 32 §3): from the TurnFinished record stored to the
	// signed request at a loopback receiver, beside the same record
	// reaching a subscriber of acp.tail.
	{"webhook delivery latency p50, TurnFinished to receiver", "BenchmarkWebhookLatency", "p50-ms", "BenchmarkWebhookLatency", "tail-p50-ms", ""},
	{"webhook delivery latency p99, TurnFinished to receiver", "BenchmarkWebhookLatency", "p99-ms", "BenchmarkWebhookLatency", "tail-p99-ms", ""},
	{"delta latency p50, adapter to acp.live", "BenchmarkUpdateLatency/path=live,kind=chunk", "p50-ms", "BenchmarkUpdateLatency/path=stdio,kind=chunk", "p50-ms", "< 0.5 ms"},
	{"delta latency p99, adapter to acp.live", "BenchmarkUpdateLatency/path=live,kind=chunk", "p99-ms", "BenchmarkUpdateLatency/path=stdio,kind=chunk", "p99-ms", "< 3 ms"},
	{"durable update latency p50, to a log subscriber", "BenchmarkUpdateLatency/path=durable,kind=update", "p50-ms", "BenchmarkUpdateLatency/path=stdio,kind=update", "p50-ms", "< 2 ms"},
	{"durable update latency p99, to a log subscriber", "BenchmarkUpdateLatency/path=durable,kind=update", "p99-ms", "BenchmarkUpdateLatency/path=stdio,kind=update", "p99-ms", ""},
	// The same two paths beside their NATS floor at the same pace: a core
	// publish to a subscriber, and a JetStream publish to ACP_LOG's
	// configuration read on its RePublish.
	{"delta latency p50, beside a core NATS publish", "BenchmarkUpdateLatency/path=live,kind=chunk", "p50-ms", "BenchmarkUpdateLatency/path=core,kind=chunk", "p50-ms", ""},
	{"delta latency p99, beside a core NATS publish", "BenchmarkUpdateLatency/path=live,kind=chunk", "p99-ms", "BenchmarkUpdateLatency/path=core,kind=chunk", "p99-ms", ""},
	{"durable update latency p50, beside a raw JetStream publish and consumer", "BenchmarkUpdateLatency/path=durable,kind=update", "p50-ms", "BenchmarkUpdateLatency/path=jetstream,kind=update", "p50-ms", ""},
	{"durable update latency p99, beside a raw JetStream publish and consumer", "BenchmarkUpdateLatency/path=durable,kind=update", "p99-ms", "BenchmarkUpdateLatency/path=jetstream,kind=update", "p99-ms", ""},
	{"turn of 1,000 updates: final response to TurnFinished p50", "BenchmarkTurnEnd/path=session,updates=1000", "p50-ms", "BenchmarkTurnEnd/path=stdio,updates=1000", "p50-ms", ""},
	{"turn of 1,000 updates: final response to TurnFinished p99", "BenchmarkTurnEnd/path=session,updates=1000", "p99-ms", "BenchmarkTurnEnd/path=stdio,updates=1000", "p99-ms", ""},
	{"prompt after unload, restore by session/resume, p50", "BenchmarkRestore/tier=resume", "p50-ms", "BenchmarkRestore/tier=loaded", "p50-ms", ""},
	{"prompt after unload, restore by session/load, p50", "BenchmarkRestore/tier=load", "p50-ms", "BenchmarkRestore/tier=loaded", "p50-ms", ""},
	{"prompt after unload, fallback restore, p50", "BenchmarkRestore/tier=fallback", "p50-ms", "BenchmarkRestore/tier=loaded", "p50-ms", ""},
	// Memory per loaded session, adapter processes (and the NATS server)
	// excluded. The runner alone is set beside both services together, so
	// the ratio is the runner's share; the rest is the session service's.
	{"memory per loaded session, session service + runner, 1,000 sessions", "BenchmarkLoadedSessionMemory/sessions=1000", "B/session", "", "", ""},
	{"memory per loaded session, runner alone, 1,000 sessions", "BenchmarkLoadedAdapterMemory/sessions=1000", "B/session", "BenchmarkLoadedSessionMemory/sessions=1000", "B/session", ""},
	{"goroutines per loaded session, session service + runner", "BenchmarkLoadedSessionMemory/sessions=1000", "goroutines/session", "", "", ""},
	{"goroutines per loaded session, runner alone", "BenchmarkLoadedAdapterMemory/sessions=1000", "goroutines/session", "BenchmarkLoadedSessionMemory/sessions=1000", "goroutines/session", ""},
	// The ACP door (docs/EDITORS.md): an ACP client's prompt to its first
	// agent_message_chunk, beside the same agent over a direct pipe.
	{"ACP prompt to first agent_message_chunk p50, skein acp", "BenchmarkACPFirstChunk/via=skein-acp", "p50-ms", "BenchmarkACPFirstChunk/via=pipe", "p50-ms", "<= 3x pipe + 1 ms"},
	{"ACP prompt to first agent_message_chunk p99, skein acp", "BenchmarkACPFirstChunk/via=skein-acp", "p99-ms", "BenchmarkACPFirstChunk/via=pipe", "p99-ms", "<= 3x pipe + 1 ms"},
	{"ACP prompt to first agent_message_chunk p50, /acp WebSocket", "BenchmarkACPFirstChunk/via=acp-ws", "p50-ms", "BenchmarkACPFirstChunk/via=pipe", "p50-ms", "<= 3x pipe + 1 ms"},
	{"ACP prompt to first agent_message_chunk p99, /acp WebSocket", "BenchmarkACPFirstChunk/via=acp-ws", "p99-ms", "BenchmarkACPFirstChunk/via=pipe", "p99-ms", "<= 3x pipe + 1 ms"},
	{"memory per ACP connection following a session, 100 connections", "BenchmarkACPConnectionMemory/conns=100", "B/conn", "", "", ""},
	{"goroutines per ACP connection following a session", "BenchmarkACPConnectionMemory/conns=100", "goroutines/conn", "", "", ""},
	// The edge path (issue 31): a chunk from an agent on an edge runner,
	// through its outbox and the leaf connection, beside one on the
	// cluster's own runner, on make cluster's topology.
	{"chunk to acp.live p50, edge runner through a leaf node", "BenchmarkEdgeChunk/runner=edge", "p50-ms", "BenchmarkEdgeChunk/runner=cluster", "p50-ms", ""},
	{"chunk to acp.live p99, edge runner through a leaf node", "BenchmarkEdgeChunk/runner=edge", "p99-ms", "BenchmarkEdgeChunk/runner=cluster", "p99-ms", ""},
	// The prompt queue (issue 32 §1): from a turn's TurnFinished to the
	// acceptance of the queued prompt the session service starts after it,
	// beside a client that awaits the end and then prompts. Both are
	// server timestamps of the two records.
	{"queue dispatch: turn end to the queued turn's acceptance p50", "BenchmarkQueueDispatch/path=queue", "p50-ms", "BenchmarkQueueDispatch/path=client", "p50-ms", ""},
	{"queue dispatch: turn end to the queued turn's acceptance p99", "BenchmarkQueueDispatch/path=queue", "p99-ms", "BenchmarkQueueDispatch/path=client", "p99-ms", ""},
	// A history page read from the log: our batch direct gets beside
	// orbit.go's jetstreamext, which allocates a 64k-entry channel per request.
	{"history page of 50, forward (one batch direct get)", "BenchmarkReadPage/dir=forward,path=eventlog,page=50", "page-ms", "BenchmarkReadPage/dir=forward,path=jetstreamext,page=50", "page-ms", ""},
	{"history page of 50, backward (event-number search, one batch)", "BenchmarkReadPage/dir=backward,path=eventlog,page=50", "page-ms", "BenchmarkReadPage/dir=backward,path=jetstreamext,page=50", "page-ms", ""},
	// A history page with the session's state changes interleaved (what an
	// SSE backfill reads) beside the same page without them.
	{"history page of 100 with state changes, forward", "BenchmarkReadHistory/dir=forward,state=true", "page-ms", "BenchmarkReadHistory/dir=forward,state=false", "page-ms", ""},
	{"history page of 100 with state changes, backward", "BenchmarkReadHistory/dir=backward,state=true", "page-ms", "BenchmarkReadHistory/dir=backward,state=false", "page-ms", ""},
	// History at depth: one session among 100 others, 4 of their events
	// between two of its on average (BenchmarkHistoryDepth).
	{"history page of 100, newest of 100,000 interleaved events, forward, p50", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=newest,dir=forward", "p50-ms", "", "", "< 5 ms"},
	{"history page of 100, newest of 100,000 interleaved events, backward, p50", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=newest,dir=backward", "p50-ms", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=newest,dir=forward", "p50-ms", "< 5 ms, <= 1.5x forward"},
	{"history page of 100, middle of 100,000 interleaved events, forward, p50", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=middle,dir=forward", "p50-ms", "", "", "< 5 ms"},
	{"history page of 100, middle of 100,000 interleaved events, backward, p50", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=middle,dir=backward", "p50-ms", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=middle,dir=forward", "p50-ms", "< 5 ms, <= 1.5x forward"},
	{"history page of 100, oldest of 100,000 interleaved events, forward, p50", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=oldest,dir=forward", "p50-ms", "", "", "< 5 ms"},
	{"history page of 100, oldest of 100,000 interleaved events, backward, p50", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=oldest,dir=backward", "p50-ms", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=oldest,dir=forward", "p50-ms", "< 5 ms, <= 1.5x forward"},
	{"history page of 100, middle, backward by event number vs stepping back per record", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=middle,dir=backward", "p50-ms", "BenchmarkHistoryDepth/events=100000,others=100,page=100,at=middle,dir=stepback", "p50-ms", ""},
	{"full replay of a 100,000-event interleaved session (eventlog.Replay)", "BenchmarkHistoryDepth/events=100000,others=100,replay=eventlog", "events/s", "BenchmarkHistoryDepth/events=100000,others=100,replay=raw", "events/s", ">= 50% of raw"},
	{"full replay, a loop of batch direct gets of 1,000", "BenchmarkHistoryDepth/events=100000,others=100,replay=batch", "events/s", "BenchmarkHistoryDepth/events=100000,others=100,replay=raw", "events/s", ""},
	// listSessions: a page of 100 over 100,000 sessions, from the history
	// service's index, and the time a starting replica takes to build it.
	{"listSessions page of 100 over 100,000 sessions, newest, p50", "BenchmarkListSessions/sessions=100000,page=100,at=newest", "p50-ms", "", "", "< 5 ms"},
	{"listSessions page of 100 over 100,000 sessions, middle, p50", "BenchmarkListSessions/sessions=100000,page=100,at=middle", "p50-ms", "", "", "< 5 ms"},
	{"listSessions page of 100 over 100,000 sessions, oldest, p50", "BenchmarkListSessions/sessions=100000,page=100,at=oldest", "p50-ms", "", "", "< 5 ms"},
	{"listSessions index rebuilt at start, 100,000 sessions", "BenchmarkListSessions/sessions=100000,page=100,at=newest", "rebuild-s", "", "", ""},
	// A surviving replica takes over 1,000 running turns: from the owner's
	// death (lease TTL 1 s) to the last takeover, and the claims alone.
	// Capacity: 40 sessions streaming 50 chunks/s each through skein serve
	// (its own process, nats-server in another), beside the same agents
	// read over pipes and raw JetStream publishes of the same lines at the
	// same aggregate rate. CPU is seconds per 1,000 chunks of that process
	// alone (agents excluded); the knee comes from make test-long's sweep.
	{"capacity, 40 sessions × 50 chunks/s: live delta p50", "BenchmarkCapacity/path=skein,sessions=40,rate=50", "p50-ms", "BenchmarkCapacity/path=pipe,sessions=40,rate=50", "p50-ms", ""},
	{"capacity, 40 sessions × 50 chunks/s: live delta p99", "BenchmarkCapacity/path=skein,sessions=40,rate=50", "p99-ms", "BenchmarkCapacity/path=pipe,sessions=40,rate=50", "p99-ms", "< 50 ms"},
	{"capacity, 40 sessions × 50 chunks/s: chunks delivered", "BenchmarkCapacity/path=skein,sessions=40,rate=50", "chunks/s", "BenchmarkCapacity/path=pipe,sessions=40,rate=50", "chunks/s", ""},
	{"capacity, 40 sessions: skein CPU per 1,000 chunks", "BenchmarkCapacity/path=skein,sessions=40,rate=50", "skein-cpu-s/kchunk", "BenchmarkCapacity/path=jetstream,sessions=40,rate=50", "nats-cpu-s/kchunk", ""},
	{"capacity, 40 sessions: nats-server CPU per 1,000 chunks", "BenchmarkCapacity/path=skein,sessions=40,rate=50", "nats-cpu-s/kchunk", "BenchmarkCapacity/path=jetstream,sessions=40,rate=50", "nats-cpu-s/kchunk", ""},
	{"capacity, 40 sessions: the agents' CPU per 1,000 chunks (the load)", "BenchmarkCapacity/path=skein,sessions=40,rate=50", "agents-cpu-s/kchunk", "", "", ""},
	{"capacity, 40 sessions: the machine's busy cores", "BenchmarkCapacity/path=skein,sessions=40,rate=50", "busy-cores", "", "", ""},
	// The knee, from make test-long's sweep, in two topologies taking
	// turns in one run: dev (skein serve -target=all against one
	// nats-server, R1) and make cluster's (three nodes, R3, the four
	// services as separate processes). The CPU figures are each topology's
	// at one load, the largest both ran under their knees (at-sessions):
	// the cluster's per process, beside dev's one skein or nats-server.
	{"capacity knee, dev: sessions × 50 chunks/s with live delta p99 < 50 ms", kneeDev, "knee-sessions", "", "", ""},
	{"capacity knee, cluster (3 nodes, R3, 4 service processes), beside dev", kneeCluster, "knee-sessions", kneeDev, "knee-sessions", ""},
	{"capacity knee, both: the sessions the figures below are measured at", kneeCluster, "at-sessions", kneeDev, "at-sessions", ""},
	{"capacity knee, cluster: live delta p99 at that load", kneeCluster, "p99-ms", kneeDev, "p99-ms", ""},
	{"capacity knee, cluster: Skein CPU per 1,000 chunks, 4 services", kneeCluster, "skein-cpu-s/kchunk", kneeDev, "skein-cpu-s/kchunk", ""},
	{"capacity knee, cluster:   gateway CPU per 1,000 chunks", kneeCluster, "gateway-cpu-s/kchunk", kneeDev, "skein-cpu-s/kchunk", ""},
	{"capacity knee, cluster:   session CPU per 1,000 chunks", kneeCluster, "session-cpu-s/kchunk", kneeDev, "skein-cpu-s/kchunk", ""},
	{"capacity knee, cluster:   adapter-runner CPU per 1,000 chunks", kneeCluster, "adapter-runner-cpu-s/kchunk", kneeDev, "skein-cpu-s/kchunk", ""},
	{"capacity knee, cluster:   history CPU per 1,000 chunks", kneeCluster, "history-cpu-s/kchunk", kneeDev, "skein-cpu-s/kchunk", ""},
	{"capacity knee, cluster: nats-server CPU per 1,000 chunks, 3 nodes", kneeCluster, "nats-cpu-s/kchunk", kneeDev, "nats-cpu-s/kchunk", ""},
	{"capacity knee, cluster:   n1 CPU per 1,000 chunks", kneeCluster, "n1-cpu-s/kchunk", kneeDev, "nats-cpu-s/kchunk", ""},
	{"capacity knee, cluster:   n2 CPU per 1,000 chunks", kneeCluster, "n2-cpu-s/kchunk", kneeDev, "nats-cpu-s/kchunk", ""},
	{"capacity knee, cluster:   n3 CPU per 1,000 chunks", kneeCluster, "n3-cpu-s/kchunk", kneeDev, "nats-cpu-s/kchunk", ""},
	{"capacity knee, cluster: the agents' CPU per 1,000 chunks (the load)", kneeCluster, "agents-cpu-s/kchunk", kneeDev, "agents-cpu-s/kchunk", ""},
	{"capacity knee, cluster: the machine's busy cores", kneeCluster, "busy-cores", kneeDev, "busy-cores", ""},
	{"takeover of 1,000 running sessions after their owner dies (TTL 1 s)", "BenchmarkTakeover/sessions=1000/owner-ttl=1s", "takeover-s", "", "", ""},
	{"  of which claiming them, after the leases expired", "BenchmarkTakeover/sessions=1000/owner-ttl=1s", "claim-s", "", "", ""},
	// Live fan-out: one session, 1,000 SSE viewers on one gateway, 50
	// durable events a second; delivery is from the append's start to each
	// viewer reading the event, beside one viewer alone. The gateway holds
	// the session's two live subscriptions (and the request API's reply
	// subscription) whatever the number of viewers.
	{"live fan-out, 1,000 SSE viewers of one session: delivery p50", "BenchmarkLiveFanout/viewers=1000,rate=50", "p50-ms", "BenchmarkLiveFanout/viewers=1,rate=50", "p50-ms", ""},
	{"live fan-out, 1,000 SSE viewers of one session: delivery p99", "BenchmarkLiveFanout/viewers=1000,rate=50", "p99-ms", "BenchmarkLiveFanout/viewers=1,rate=50", "p99-ms", ""},
	{"live fan-out, 1,000 SSE viewers: NATS subscriptions of the gateway", "BenchmarkLiveFanout/viewers=1000,rate=50", "nats-subs", "BenchmarkLiveFanout/viewers=1,rate=50", "nats-subs", ""},
}

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads benchmark result lines into name → metric → value. A name
// seen more than once (-count) keeps the mean.
func parse(r io.Reader) (map[string]map[string]float64, error) {
	sums := map[string]map[string][]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		if sums[name] == nil {
			sums[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			sums[name][f[i+1]] = append(sums[name][f[i+1]], v)
		}
	}
	out := map[string]map[string]float64{}
	for name, ms := range sums {
		out[name] = map[string]float64{}
		for m, vs := range ms {
			var s float64
			for _, v := range vs {
				s += v
			}
			out[name][m] = s / float64(len(vs))
		}
	}
	return out, sc.Err()
}

func main() {
	md := flag.String("md", "", "also write the table as Markdown to this file, with the date and the machine")
	flag.Parse()
	var in io.Reader = os.Stdin
	var raw bytes.Buffer
	if flag.NArg() > 0 {
		var rs []io.Reader
		for _, p := range flag.Args() {
			f, err := os.Open(p)
			if err != nil {
				fmt.Fprintln(os.Stderr, "benchtable:", err)
				os.Exit(1)
			}
			defer f.Close()
			rs = append(rs, f)
		}
		in = io.MultiReader(rs...)
	}
	res, err := parse(io.TeeReader(in, &raw))
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	lines := table(res)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for _, l := range lines {
		fmt.Fprintln(tw, strings.Join(l, "\t"))
	}
	_ = tw.Flush()
	if *md != "" {
		if err := os.WriteFile(*md, markdown(lines, cpuOf(raw.String()), time.Now()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
	}
}

// table returns the header and a line per row: figure, value, baseline,
// ratio, target.
func table(res map[string]map[string]float64) [][]string {
	out := [][]string{{"figure", "value", "baseline", "ratio", "target"}}
	for _, r := range rows {
		v, ok := res[r.bench][r.metric]
		b, bok := res[r.baseline][r.baseMet]
		if !ok {
			out = append(out, []string{r.figure, "(not run)", "", "", r.target})
			continue
		}
		ratio, base := "", "(not run)"
		switch {
		case r.baseline == "":
			base = ""
		case bok:
			base = num(b) + " " + r.baseMet
			if b != 0 {
				ratio = fmt.Sprintf("%.1f%%", 100*v/b)
			}
		}
		out = append(out, []string{r.figure, num(v) + " " + r.metric, base, ratio, r.target})
	}
	return out
}

// markdown renders the table's lines as a Markdown document.
func markdown(lines [][]string, cpu string, now time.Time) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Benchmarks\n\nThe figures the issues name, each beside its baseline from the same run, as `make bench` printed them.\n\n")
	fmt.Fprintf(&b, "- date: %s\n- machine: %s, %d cores, %s of memory, %s/%s\n\n", now.UTC().Format("2006-01-02 15:04 UTC"), cpu, runtime.NumCPU(), memory(), runtime.GOOS, runtime.GOARCH)
	for i, l := range lines {
		cells := make([]string, len(l))
		for j, c := range l {
			cells[j] = strings.ReplaceAll(c, "|", "\\|")
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
		if i == 0 {
			fmt.Fprintf(&b, "|%s\n", strings.Repeat("---|", len(l)))
		}
	}
	return b.Bytes()
}

// cpuOf returns the CPU the benchmark output names ("cpu: ..."), or
// "an unnamed CPU".
func cpuOf(out string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if c, ok := strings.CutPrefix(line, "cpu: "); ok {
			return strings.TrimSpace(c)
		}
	}
	return "an unnamed CPU"
}

// memory returns the machine's memory from /proc/meminfo, or "unknown".
func memory() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				return fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	return "unknown"
}

// num formats a figure: whole numbers from 100 up, three significant
// digits below.
func num(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
