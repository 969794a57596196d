package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/cluster"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/testagent"
)

// The fault tests run make cluster's topology (three nats-server
// processes, two gateways, two session services, a runner and a history
// service, every one an OS process) with a turn streaming in each of 20
// sessions, and kill one part of it with SIGKILL mid-turn: a stream or
// bucket leader, a follower, the node a service is connected to, every
// node, each service in turn. Each fault then shows what a client saw
// (every in-flight HTTP prompt returns its turn's outcome; where the fault
// may show, an error it retries with its idempotency key first), what the
// logs hold (every session's passes the audit, and every durable event an
// SSE viewer received is still there, at the same sequence and event
// number; each viewer has every durable event within 5 s of its turn's
// end, without reconnecting), and what it cost: the time from the kill
// until a new prompt was answered again, and how much longer the turns in
// flight took than the same turns with no fault, logged as
//
//	fault=<name> recovery=<seconds>s ... turn_p50=<s> turn_max=<s> cost_p50=+<s> cost_max=+<s>
//
// The figures are reported, never asserted. Long: make test-long
// (SKEIN_LONG=1).

// faultSessions is how many sessions have a turn in flight at each fault.
const faultSessions = 20

// faultRig is a cluster with faultSessions sessions open, each followed
// by an SSE viewer for the whole test.
type faultRig struct {
	t       *testing.T
	c       *cluster.Cluster
	nc      *nats.Conn // the ops user's
	js      jetstream.JetStream
	control string // the test agent's control dir
	client  *http.Client
	viewers []*sseViewer
	phases  int // faults run so far: each put one turn in every session

	// baseline is how long the turns took with no fault (turn durations,
	// sorted), once the "none" phase ran: each fault's cost is beside it.
	baseline []time.Duration
}

func startFaultRig(t *testing.T) *faultRig {
	if os.Getenv("SKEIN_LONG") == "" {
		t.Skip("fault tests on a cluster of processes: make test-long (SKEIN_LONG=1)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The runner's adapters get a minimal environment, so the test agent
	// learns its control dir from its arguments, in an agents file entry
	// that replaces the built-in "test".
	control := t.TempDir()
	agents := filepath.Join(t.TempDir(), "agents.json")
	b, _ := json.Marshal(map[string]any{"agents": []map[string]any{{"id": "test", "command": exe, "args": []string{testAgentCommand, "--control-dir", control}}}})
	if err := os.WriteFile(agents, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, cluster.Options{Sessions: 2, Gateways: 2,
		Args: map[string][]string{cluster.Runner: {"--adapter-runner.agents=" + agents}}})
	nc, err := nats.Connect(c.URL(cluster.UserOps), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := &faultRig{t: t, c: c, nc: nc, js: js, control: control,
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	for i := range faultSessions {
		r.open(fmt.Sprint("f", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range faultSessions {
		v := &sseViewer{sid: fmt.Sprint("f", i), seen: map[uint64]uint64{}}
		r.viewers = append(r.viewers, v)
		wg.Go(func() { v.run(ctx, r, i) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

// do sends a request with the admin token to gateway gw and returns the
// status and body (0 and the error's text when there was no answer).
func (r *faultRig) do(ctx context.Context, gw int, method, path string, body any) (int, []byte) {
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(ctx, method, r.c.HTTP[gw%len(r.c.HTTP)]+path, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+r.c.Token)
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, []byte(b.String())
}

// open opens a session of the test agent, retrying for a minute while the
// cluster cannot serve it.
func (r *faultRig) open(sid string) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		code, body := r.do(r.t.Context(), i, http.MethodPut, "/v1/sessions/"+sid, map[string]string{"agent": "test"})
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("open %s: %d %s", sid, code, body)
		}
		if !wait(r.t.Context(), 100*time.Millisecond) {
			r.t.Fatal(r.t.Context().Err())
		}
	}
}

// prompt posts a keyed prompt of text to sid through gateway gw.
func (r *faultRig) prompt(ctx context.Context, gw int, sid, key, text string) (int, []byte) {
	return r.do(ctx, gw, http.MethodPost, "/v1/sessions/"+sid+"/prompt",
		map[string]any{"idempotencyKey": key, "content": []map[string]string{{"type": "text", "text": text}}})
}

// wait waits d unless ctx ends first, and reports whether it waited: the
// pause between two polls of a condition.
func wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// answer is what an HTTP prompt returned.
type answer struct {
	code int
	body []byte
}

// completed reports whether a is a completed turn whose message is want:
// the whole text of the turn's last message.
func (a answer) completed(want string) bool {
	var res struct {
		StopReason string `json:"stopReason"`
		Message    struct {
			Content struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"message"`
	}
	return a.code == http.StatusOK && json.Unmarshal(a.body, &res) == nil && res.StopReason == "end_turn" && res.Message.Content.Text == want
}

// faultTicks is how many numbered chunks each turn in flight streams, 50 ms
// apart: ten seconds, past a leader election (6 to 8 s on these nodes).
const faultTicks = 200

// tickText is the completed message of "tick n": every chunk, in order.
func tickText(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%d ", i+1)
	}
	return b.String()
}

// errorCode returns the error code of an error answer.
func (a answer) errorCode() string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Code
}

// retryable reports whether the client retries a with its idempotency key:
// no answer, or a code whose rule says so (docs/API.md). A turn's own
// outcome is never one.
func (a answer) retryable() bool {
	return a.code == 0 || events.Code(a.errorCode()).Retry() == events.RetrySameKey
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.code, a.body) }

// fault is one fault of a run.
type fault struct {
	name string
	// inject does the damage (a kill) and returns what to log about it.
	inject func() string
	// restore undoes it (a restart); right after inject when early,
	// otherwise once the in-flight prompts have returned.
	restore func()
	early   bool
	// gw is the gateway the probe prompts through.
	gw int
	// strict: every in-flight prompt must answer its outcome at once, with
	// no retry. Otherwise a retryable error is retried with the same key,
	// against the other gateway first.
	strict bool
	// want are the outcomes the turns in flight may have: "completed",
	// or an error code (the failure the product defines for this fault).
	// None: any, as long as every turn ends within returnWithin of the
	// restore.
	want []string
	// returnWithin, when set, bounds the time from the restore until
	// every prompt in flight returned: a turn that waits on a cluster
	// that is back is a hang.
	returnWithin time.Duration
	// runnerOn, when set, says whether the killed node held the runner's
	// connection, for the log.
	runnerOn func() bool
}

// run puts a turn in flight in every session, injects f mid-turn while the
// turns stream, and checks what the clients and the logs saw.
func (r *faultRig) run(f fault) {
	t := r.t
	t.Helper()
	ctx := t.Context()
	probe := "p-" + f.name
	r.open(probe)

	// A keyed turn per session that streams durable updates, pauses until
	// every session is mid-turn, then streams durable updates and ten
	// seconds of numbered chunks of one message, whose completed text says
	// whether every chunk is in it.
	script := func(i int) string {
		return fmt.Sprintf("stamp 3 update 10ms\npause %s-%d\nstamp 10 update 50ms\ntick %d 50ms", f.name, i, faultTicks)
	}
	want := tickText(faultTicks)
	key := func(i int) string { return fmt.Sprintf("%s-%d", f.name, i) }
	// Each prompt's client retries a retryable error with its key, against
	// the other gateway first, unless the fault must not show.
	answers := make([]answer, faultSessions)
	retried := make([]bool, faultSessions)
	returned := make([]time.Time, faultSessions)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range faultSessions {
		wg.Go(func() {
			code, body := r.prompt(pctx, i, fmt.Sprint("f", i), key(i), script(i))
			answers[i] = answer{code, body}
			if !f.strict && answers[i].retryable() && pctx.Err() == nil {
				retried[i] = true
				answers[i] = r.retryKeyed(pctx, i+1, fmt.Sprint("f", i), key(i), script(i))
			}
			returned[i] = time.Now()
		})
	}
	for i := range faultSessions {
		if err := testagent.WaitPaused(pctx, r.control, key(i)); err != nil {
			t.Fatalf("%s: session f%d never paused: %v", f.name, i, err)
		}
	}
	for i := range faultSessions {
		if err := testagent.Release(pctx, r.control, key(i)); err != nil {
			t.Fatal(err)
		}
	}

	killed := time.Now()
	note := f.inject()
	if f.runnerOn != nil && f.runnerOn() {
		note += " runner_conn=lost"
	}
	restored := killed
	if f.early {
		f.restore()
		restored = time.Now()
	}
	recovery, probeErr := r.probe(ctx, killed, f.gw, probe, f.name)
	wg.Wait()
	turns := make([]time.Duration, faultSessions)
	for i, at := range returned {
		turns[i] = at.Sub(killed)
	}
	slices.Sort(turns)
	if f.returnWithin > 0 {
		if late := slices.MaxFunc(returned, time.Time.Compare).Sub(restored); late > f.returnWithin {
			t.Errorf("%s: the last prompt in flight returned %.1fs after the cluster was back, want within %v", f.name, late.Seconds(), f.returnWithin)
		}
	}

	// A prompt that never returned is a turn that hangs: the session
	// services' goroutines say where (SIGQUIT), in a copy of their logs
	// that outlives the test's temporary directory.
	if pctx.Err() != nil {
		r.dumpSessions(f.name)
	}

	// Every prompt in flight returns: its outcome, or (where the fault
	// may show) an error it retries with its key until it gets one.
	nretried, outcomes := 0, map[string]int{}
	for i := range faultSessions {
		a := answers[i]
		if retried[i] {
			nretried++
		}
		got := a.errorCode()
		switch {
		case a.completed(want):
			got = "completed"
		case a.code == 0 || a.code == http.StatusOK:
			got = "?"
			t.Errorf("%s: session f%d: the prompt in flight = %v, want the turn's outcome with its whole message", f.name, i, a)
		}
		if got != "completed" && got != "?" {
			// What ACP_IO holds of the turn's process tells output the
			// stream lost from output the owner missed.
			t.Logf("%s: session f%d: %s; ACP_IO holds %s", f.name, i, a.body, r.ioRecords(fmt.Sprint("f", i)))
		}
		outcomes[got]++
		if len(f.want) > 0 && !slices.Contains(f.want, got) {
			t.Errorf("%s: session f%d: the prompt in flight = %v, want %s", f.name, i, a, strings.Join(f.want, " or "))
		}
	}
	r.viewersCaughtUp(f)
	if !f.early {
		f.restore()
	}
	settled := time.Now()
	r.settle()
	r.phases++
	// recovery: from the kill until a new prompt was answered; inflight:
	// until the last prompt in flight at the kill returned its outcome.
	cost := ""
	if r.baseline != nil {
		cost = fmt.Sprintf(" cost_p50=%+.2fs cost_max=%+.2fs", (turns[len(turns)/2] - r.baseline[len(turns)/2]).Seconds(),
			(turns[len(turns)-1] - r.baseline[len(turns)-1]).Seconds())
	}
	t.Logf("fault=%s recovery=%s inflight=%.2fs retried=%d/%d outcomes=%v settle=%.2fs turn_p50=%.2fs turn_max=%.2fs%s %s",
		f.name, seconds(recovery, probeErr), slices.MaxFunc(returned, time.Time.Compare).Sub(killed).Seconds(),
		nretried, faultSessions, outcomes, time.Since(settled).Seconds(),
		turns[len(turns)/2].Seconds(), turns[len(turns)-1].Seconds(), cost, note)
	if f.name == "none" {
		r.baseline = turns
	}
	if probeErr != nil {
		t.Errorf("%s: no new prompt was answered after the fault: %v", f.name, probeErr)
	}
	r.audit(f)
}

func seconds(d time.Duration, err error) string {
	if err != nil {
		return "none"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// retryKeyed retries a keyed prompt, alternating gateways from gw, while
// its answer is retryable and ctx lasts, and returns the last.
func (r *faultRig) retryKeyed(ctx context.Context, gw int, sid, key, text string) answer {
	for {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		code, body := r.prompt(actx, gw, sid, key, text)
		cancel()
		a := answer{code, body}
		if !a.retryable() || !wait(ctx, 100*time.Millisecond) {
			return a
		}
		gw++
	}
}

// probe prompts sid through gateway gw, each attempt with a new key, until
// a turn completes, and returns how long that took from since.
func (r *faultRig) probe(ctx context.Context, since time.Time, gw int, sid, name string) (time.Duration, error) {
	deadline := time.Now().Add(3 * time.Minute)
	var last answer
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		code, body := r.prompt(actx, gw, sid, fmt.Sprintf("%s-%d", sid, attempt), "say probe "+name)
		cancel()
		last = answer{code, body}
		if last.completed("probe " + name) {
			return time.Since(since), nil
		}
		if time.Now().After(deadline) || !wait(ctx, 50*time.Millisecond) {
			return 0, fmt.Errorf("last answer %v", last)
		}
	}
}

// streamInfo is what STREAM.INFO says of a stream's cluster.
type streamInfo struct {
	Cluster struct {
		Leader   string `json:"leader"`
		Replicas []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
			Offline bool   `json:"offline"`
		} `json:"replicas"`
	} `json:"cluster"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

func (r *faultRig) streamInfo(stream string) (*streamInfo, error) { return streamInfoOf(r.nc, stream) }

// streamInfoOf asks for stream's info as nc's user.
func streamInfoOf(nc *nats.Conn, stream string) (*streamInfo, error) {
	msg, err := nc.Request("$JS.API.STREAM.INFO."+stream, nil, 2*time.Second)
	if err != nil {
		return nil, err
	}
	var info streamInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return nil, err
	}
	if info.Error != nil {
		return nil, errors.New(info.Error.Description)
	}
	return &info, nil
}

// leader returns the server name (n1, n2, n3) of the stream's leader.
func (r *faultRig) leader(stream string) string {
	r.t.Helper()
	info, err := r.streamInfo(stream)
	if err != nil || info.Cluster.Leader == "" {
		r.t.Fatalf("%s has no leader: %v", stream, err)
	}
	return info.Cluster.Leader
}

// awaitLeader polls until the stream has a leader other than old, and
// returns it and the time it was first seen.
func (r *faultRig) awaitLeader(stream, old string) (string, time.Time) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if info, err := r.streamInfo(stream); err == nil && info.Cluster.Leader != "" && info.Cluster.Leader != old {
			return info.Cluster.Leader, time.Now()
		}
		if time.Now().After(deadline) || !wait(r.t.Context(), 20*time.Millisecond) {
			r.t.Fatalf("%s elected no leader after %s", stream, old)
		}
	}
}

// faultStreams are Skein's streams and buckets, all R3 on the cluster.
var faultStreams = []string{events.StreamLog, events.StreamIO, "KV_" + events.BucketSessions, "KV_" + events.BucketOwners, "KV_" + events.BucketRunners}

// settle waits until every node and service runs, every node is healthy
// (current with the meta leader), and every stream has a leader and two
// current followers, so that the next fault starts from a whole cluster.
func (r *faultRig) settle() {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var behind []string
		for _, p := range append(slices.Clone(r.c.Nodes), r.c.Services...) {
			if !p.Running() {
				behind = append(behind, p.Name+" not running")
			}
		}
		behind = append(behind, nodesBehind(r.t.Context(), r.c)...)
		behind = append(behind, streamsBehind(r.nc)...)
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) || !wait(r.t.Context(), 100*time.Millisecond) {
			r.t.Fatalf("the cluster did not recover: %s", strings.Join(behind, "; "))
		}
	}
}

// viewersCaughtUp checks, once the prompts in flight returned, that every
// viewer has every durable event of its session's log within 5 s, on the
// connection it has: a gateway whose NATS connection was on a killed node,
// or that missed the stream's republish of a turn's last events, catches
// up from the log by itself.
func (r *faultRig) viewersCaughtUp(f fault) {
	t := r.t
	t.Helper()
	stalled := false
	defer func() {
		if stalled {
			r.dumpServices(f.name, cluster.Gateway)
		}
	}()
	for i, v := range r.viewers {
		sid := events.SessionID(fmt.Sprint("f", i))
		// The newest public event, by a direct get: the node just killed
		// may have led JetStream's meta layer, and until another does, no
		// consumer (an audit's replay) can be made.
		last, err := eventlog.Last(t.Context(), r.js, events.StreamLog, events.LogSubject(events.DefaultNamespace, sid, events.LogEvents))
		if err != nil {
			t.Fatalf("%s: session %s's newest event: %v", f.name, sid, err)
		}
		if last == nil {
			continue
		}
		newest := last.Sequence
		deadline := time.Now().Add(5 * time.Second)
		for v.newest() < newest {
			if time.Now().After(deadline) || !wait(t.Context(), 20*time.Millisecond) {
				t.Errorf("%s: session %s's viewer is at %d 5 s after the turn's end, the log at %d (reconnects %d)", f.name, sid, v.newest(), newest, v.reconnectCount())
				if !stalled {
					r.logInterest(events.TailSubject(events.DefaultNamespace, sid, events.LogEvents))
				}
				stalled = true
				break
			}
		}
	}
}

// audit checks every session's log, and that each viewer's durable events
// are in it.
func (r *faultRig) audit(f fault) {
	t := r.t
	t.Helper()
	for i, v := range r.viewers {
		sid := events.SessionID(fmt.Sprint("f", i))
		log := eventlogtest.Audit(t, r.js, events.DefaultNamespace, sid)
		if len(log.Turns) != r.phases {
			t.Errorf("%s: session %s has %d turns after %d faults", f.name, sid, len(log.Turns), r.phases)
		} else if last := log.Turns[len(log.Turns)-1]; last.Finish == nil {
			t.Errorf("%s: session %s: the turn in flight never finished", f.name, sid)
		} else if slices.Equal(f.want, []string{"completed"}) && last.Finish.Outcome != "completed" {
			t.Errorf("%s: session %s: the turn in flight ended %+v, want completed", f.name, sid, last.Finish)
		}
		stored := map[uint64]uint64{}
		for _, e := range log.Events {
			stored[e.Sequence] = eventlog.EventNo(e)
		}
		// Every durable event a viewer was sent is stored, at the same
		// sequence and number: nothing acknowledged was lost.
		for seq, no := range v.snapshot() {
			if got, ok := stored[seq]; !ok || got != no {
				t.Errorf("%s: session %s: the viewer was sent durable event %d (eventNo %d); the log has eventNo %d (present %v)", f.name, sid, seq, no, got, ok)
			}
		}
		for _, p := range v.problemsSince() {
			t.Errorf("%s: session %s's viewer: %s", f.name, sid, p)
		}
	}
	eventlogtest.Audit(t, r.js, events.DefaultNamespace, events.SessionID("p-"+f.name))
}

// sseViewer follows a session's event stream, as a client does: it
// reconnects after any failure with Last-Event-ID, to the other gateway.
type sseViewer struct {
	sid string

	mu         sync.Mutex
	seen       map[uint64]uint64 // durable sequence → eventNo
	last       uint64
	problems   []string
	reported   int
	reconnects int
}

func (v *sseViewer) run(ctx context.Context, r *faultRig, gw int) {
	for ctx.Err() == nil {
		v.follow(ctx, r, gw)
		gw++
		v.mu.Lock()
		v.reconnects++
		v.mu.Unlock()
		wait(ctx, 100*time.Millisecond)
	}
}

// follow reads one connection's events until it ends.
func (v *sseViewer) follow(ctx context.Context, r *faultRig, gw int) {
	v.mu.Lock()
	after := v.last
	v.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/sessions/%s/events?after=%d", r.c.HTTP[gw%len(r.c.HTTP)], v.sid, after), nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+r.c.Token)
	resp, err := r.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var event string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "durable" {
				v.durable(strings.Join(data, "\n"))
			}
			event, data = "", nil
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

func (v *sseViewer) durable(data string) {
	var e struct {
		Sequence uint64 `json:"sequence"`
		EventNo  uint64 `json:"eventNo"`
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		v.problems = append(v.problems, fmt.Sprintf("durable event %q: %v", data, err))
		return
	}
	if e.Sequence <= v.last {
		v.problems = append(v.problems, fmt.Sprintf("durable event %d after %d", e.Sequence, v.last))
		return
	}
	if prev := v.seen[v.last]; v.last != 0 && e.EventNo != prev+1 {
		v.problems = append(v.problems, fmt.Sprintf("durable event %d is eventNo %d after eventNo %d", e.Sequence, e.EventNo, prev))
	}
	v.seen[e.Sequence] = e.EventNo
	v.last = e.Sequence
}

func (v *sseViewer) snapshot() map[uint64]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.seen)
}

func (v *sseViewer) reconnectCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reconnects
}

func (v *sseViewer) newest() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

func (v *sseViewer) problemsSince() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.problems[v.reported:]
	v.reported = len(v.problems)
	return p
}

// dumpSessions makes the session services print their goroutines and
// exit (SIGQUIT), copies their logs and the runner's out of the test's
// directory, says where, and restarts them.
func (r *faultRig) dumpSessions(name string) {
	r.t.Helper()
	r.dumpServices(name, cluster.Session)
	r.t.Errorf("%s: prompts in flight never returned; see the services' logs above", name)
}

// logInterest logs, for each running node, the subscriptions it knows of
// that match subject (its clients' and its routes'), from /subsz: where a
// stalled viewer's gateway lost the stream's republish, it shows which
// node has no interest.
func (r *faultRig) logInterest(subject string) {
	r.t.Helper()
	for i, n := range r.c.Nodes {
		if !n.Running() {
			continue
		}
		resp, err := r.client.Get(fmt.Sprintf("http://127.0.0.1:%d/subsz?subs=1&acc=SKEIN&limit=1024&test=%s", r.c.MonitorPorts[i], subject))
		if err != nil {
			r.t.Logf("interest in %s on %s: %v", subject, n.Name, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var subsz struct {
			Subs []struct {
				Subject string `json:"subject"`
				CID     uint64 `json:"cid"`
				Account string `json:"account"`
			} `json:"subscriptions_list"`
		}
		_ = json.Unmarshal(b, &subsz)
		r.t.Logf("interest in %s on %s: %+v", subject, n.Name, subsz.Subs)
		if resp, err := r.client.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?auth=true&subs=1&limit=1024", r.c.MonitorPorts[i])); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var connz struct {
				Conns []struct {
					CID  uint64   `json:"cid"`
					User string   `json:"authorized_user"`
					Subs []string `json:"subscriptions_list"`
				} `json:"connections"`
			}
			_ = json.Unmarshal(b, &connz)
			for _, c := range connz.Conns {
				if strings.HasPrefix(c.User, "skein-gateway") {
					r.t.Logf("%s: gateway connection cid %d has %d subscriptions, %s among them: %v", n.Name, c.CID, len(c.Subs), subject, slices.ContainsFunc(c.Subs, covers(subject)))
				}
			}
		}
		if resp, err := r.client.Get(fmt.Sprintf("http://127.0.0.1:%d/routez?subs=1", r.c.MonitorPorts[i])); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var routez struct {
				Routes []struct {
					RID    uint64   `json:"rid"`
					Remote string   `json:"remote_name"`
					Subs   []string `json:"subscriptions_list"`
				} `json:"routes"`
			}
			_ = json.Unmarshal(b, &routez)
			for _, rt := range routez.Routes {
				r.t.Logf("%s: route %d to %s: %d subscriptions, %s among them: %v", n.Name, rt.RID, rt.Remote, len(rt.Subs), subject, slices.ContainsFunc(rt.Subs, covers(subject)))
			}
		}
	}
}

// covers returns whether a subscription's subject (a route's subjects
// start with the account's name) covers subject: the same, or a ">"
// filter above it.
func covers(subject string) func(sub string) bool {
	return func(sub string) bool {
		sub = sub[strings.LastIndex(sub, " ")+1:]
		return sub == subject || strings.HasSuffix(sub, ".>") && strings.HasPrefix(subject, strings.TrimSuffix(sub, ">"))
	}
}

// dumpServices makes the services of target print their goroutines and
// exit (SIGQUIT), copies every service's log out of the test's directory,
// says where, and restarts them.
func (r *faultRig) dumpServices(name, target string) {
	r.t.Helper()
	dir, err := os.MkdirTemp("", "skein-fault-"+name+"-")
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range r.c.Services {
		if strings.HasPrefix(p.Name, target+"-") && p.Pid != 0 {
			_ = syscall.Kill(p.Pid, syscall.SIGQUIT)
			select {
			case <-p.Exited():
			case <-time.After(30 * time.Second):
			}
		}
		if b, err := os.ReadFile(p.Log); err == nil {
			_ = os.WriteFile(filepath.Join(dir, p.Name+".log"), b, 0o600)
		}
	}
	r.t.Logf("%s: the goroutines of %s and every service's log are in %s", name, target, dir)
	for _, p := range r.c.Services {
		if !p.Running() {
			r.restart(p)
		}
	}
}

// ioRecords describes what ACP_IO holds of the session's newest adapter
// process: how many records, and the gaps in their numbers (in stream
// order: a record stored late after a retry shows as one).
func (r *faultRig) ioRecords(sid string) string {
	// Right after a node's death the read may time out: read again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		held, err := r.readIO(sid)
		if err == nil || time.Now().After(deadline) || !wait(r.t.Context(), 100*time.Millisecond) {
			return held
		}
	}
}

func (r *faultRig) readIO(sid string) (string, error) {
	var proc string
	var nos []uint64
	for rec, err := range eventlog.Replay(r.t.Context(), r.js, events.StreamIO, events.IOSubject(events.DefaultNamespace, events.SessionID(sid)), 0) {
		if err != nil {
			return err.Error(), err
		}
		if p := rec.Header.Get(events.HeaderProcessID); p != proc {
			proc, nos = p, nil
		}
		n, _ := strconv.ParseUint(rec.Header.Get(events.HeaderRecordNo), 10, 64)
		nos = append(nos, n)
	}
	var gaps []string
	for i := 1; i < len(nos); i++ {
		if nos[i] != nos[i-1]+1 {
			gaps = append(gaps, fmt.Sprintf("%d->%d", nos[i-1], nos[i]))
		}
	}
	return fmt.Sprintf("%d records of process %s, gaps %v", len(nos), proc, gaps), nil
}

// killNode kills a node with SIGKILL.
func (r *faultRig) killNode(name string) {
	r.t.Helper()
	if err := r.c.Node(name).Kill(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *faultRig) restart(p *cluster.Proc) {
	r.t.Helper()
	if err := p.Restart(r.t.Context()); err != nil {
		r.t.Fatal(err)
	}
}

// leaderFault kills stream's leader mid-turn; the node comes back once the
// prompts in flight have returned. Every other stream's and bucket's
// leader is moved off that node first, so that the fault is this stream's
// election alone.
func (r *faultRig) leaderFault(stream string) fault {
	var node, runnerNode string
	return fault{
		name: "leader-" + stream,
		inject: func() string {
			node = r.leader(stream)
			runnerNode = r.connectedNode(cluster.UserRunner)
			for _, other := range faultStreams {
				if other != stream && r.leader(other) == node {
					r.stepDown(other, r.otherNode(node))
				}
			}
			killed := time.Now()
			r.killNode(node)
			leader, at := r.awaitLeader(stream, node)
			return fmt.Sprintf("node=%s election=%.2fs new_leader=%s", node, at.Sub(killed).Seconds(), leader)
		},
		restore:  func() { r.restart(r.c.Node(node)) },
		strict:   true,
		want:     []string{"completed"},
		runnerOn: func() bool { return runnerNode == node },
	}
}

// connectionFault kills the node a service's connection is on, with every
// stream's and bucket's leadership moved off it first: the service
// reconnects to another node, and nothing else happens.
func (r *faultRig) connectionFault(name, user string) fault {
	var node string
	return fault{
		name: name,
		inject: func() string {
			node = r.connectedNode(user)
			if node == "" {
				r.t.Fatalf("no connection of %s on any node", user)
			}
			for _, s := range faultStreams {
				if r.leader(s) == node {
					r.stepDown(s, r.otherNode(node))
				}
			}
			r.killNode(node)
			return "node=" + node
		},
		restore: func() { r.restart(r.c.Node(node)) },
		strict:  true,
		want:    []string{"completed"},
	}
}

// TestClusterFaultNodes kills nodes mid-turn, each restarted once the
// prompts in flight returned: first no node (the baseline every fault's
// cost is measured against), then a node that leads nothing and holds no
// service's connection, the node the runner is connected to, the node a
// gateway is connected to, the ACP_LOG leader, the ACP_IO leader, the
// leader of each bucket, and then all three at once. No single node's
// death shows: every prompt in flight returns its turn completed with its
// whole message, with no retry, and every log passes the audit (DESIGN.md
// invariant 11: the runner's every ACP_IO record is acknowledged and
// retried until stored, the owner applies them in record-number order).
// After all three die, every turn ends within 30 s of the cluster's return,
// with its output or an outcome of its own (a keyed retry may be needed
// for the request's first answer), new prompts work, and history reads
// whole.
func TestClusterFaultNodes(t *testing.T) {
	r := startFaultRig(t)
	r.run(fault{
		name:    "none",
		inject:  func() string { return "" },
		restore: func() {},
		strict:  true,
		want:    []string{"completed"},
	})
	// A follower of every stream and bucket that holds neither the
	// runner's nor a gateway's connection, if there is one.
	var follower string
	r.run(fault{
		name: "follower",
		inject: func() string {
			busy := map[string]bool{}
			for _, u := range []string{cluster.UserRunner, cluster.UserGateway} {
				busy[r.connectedNode(u)] = true
			}
			lead := r.leader(events.StreamLog)
			if busy[lead] {
				lead = r.otherNode(lead)
			}
			for _, s := range faultStreams {
				if r.leader(s) != lead {
					r.stepDown(s, lead)
				}
			}
			follower = ""
			for _, n := range r.c.Nodes {
				if n.Name != lead && (follower == "" || !busy[n.Name]) {
					follower = n.Name
				}
			}
			r.killNode(follower)
			return fmt.Sprintf("node=%s leader=%s connections_lost=%v", follower, lead, busy[follower])
		},
		restore: func() { r.restart(r.c.Node(follower)) },
		strict:  true,
		want:    []string{"completed"},
	})
	r.run(r.connectionFault("node-runner", cluster.UserRunner))
	r.run(r.connectionFault("node-gateway", cluster.UserGateway))
	for _, s := range faultStreams {
		r.run(r.leaderFault(s))
	}
	r.run(fault{
		name: "all-nodes",
		inject: func() string {
			var wg sync.WaitGroup
			for _, n := range r.c.Nodes {
				wg.Go(func() { _ = n.Kill() })
			}
			wg.Wait()
			return ""
		},
		restore: func() {
			for _, n := range r.c.Nodes {
				if err := n.Start(); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range r.c.Nodes {
				if err := n.WaitReady(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
		},
		// Every turn ends, as the product defines for what happened to it:
		// completed, or prompt_delivery_uncertain (taken over by a replica
		// that could not learn from the runner in time whether the adapter
		// has the prompt); never a wait on a cluster that is back.
		early:        true,
		returnWithin: 30 * time.Second,
	})
	// Old sessions' history reads, whole, after the restart.
	for i := range faultSessions {
		sid := fmt.Sprint("f", i)
		log := eventlogtest.Audit(t, r.js, events.DefaultNamespace, events.SessionID(sid))
		code, body := r.do(t.Context(), i, http.MethodGet, "/v1/sessions/"+sid+"/history?after=0&limit=10000", nil)
		var page struct {
			Events []json.RawMessage `json:"events"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Events) != len(log.Events) {
			t.Errorf("history of %s after the restart = %d (%d events), want 200 and its %d events", sid, code, len(page.Events), len(log.Events))
		}
	}
}

// stepDown moves stream's leadership to node.
func (r *faultRig) stepDown(stream, node string) {
	r.t.Helper()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": node}})
	deadline := time.Now().Add(time.Minute)
	for r.leader(stream) != node {
		if _, err := r.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, req, 5*time.Second); err != nil {
			r.t.Logf("step down %s: %v", stream, err)
		}
		r.awaitLeaderAny(stream)
		if time.Now().After(deadline) {
			r.t.Fatalf("%s's leadership did not move to %s", stream, node)
		}
	}
}

// connectedNode returns the node (n1, n2, n3) a client connected as user
// is connected to, from the nodes' /connz, or "".
func (r *faultRig) connectedNode(user string) string {
	r.t.Helper()
	for i, n := range r.c.Nodes {
		resp, err := r.client.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?auth=true&limit=1024", r.c.MonitorPorts[i]))
		if err != nil {
			continue
		}
		var connz struct {
			Connections []struct {
				User string `json:"authorized_user"`
			} `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&connz)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, c := range connz.Connections {
			if c.User == user {
				return n.Name
			}
		}
	}
	return ""
}

// otherNode returns a node other than name.
func (r *faultRig) otherNode(name string) string {
	for _, n := range r.c.Nodes {
		if n.Name != name {
			return n.Name
		}
	}
	return ""
}

// awaitLeaderAny polls until stream has a leader.
func (r *faultRig) awaitLeaderAny(stream string) {
	r.t.Helper()
	r.awaitLeader(stream, "")
}

// TestClusterFaultServices kills each service process in turn with SIGKILL
// mid-turn, with two replicas of the gateway and of the session service,
// and restarts it. No prompt a client waits on is lost: it returns its
// turn's outcome, or an error it retries with its idempotency key against
// the other gateway. Killing the adapter-runner kills the adapters: the
// turns in flight fail adapter_exited, and once it is back new prompts
// work.
func TestClusterFaultServices(t *testing.T) {
	r := startFaultRig(t)
	for _, name := range []string{"gateway-1", "session-1", "adapter-runner-1", "history-1", "gateway-2", "session-2"} {
		p := r.c.Service(name)
		f := fault{
			name:    name,
			inject:  func() string { _ = p.Kill(); return "" },
			restore: func() { r.restart(p) },
			want:    []string{"completed"},
		}
		switch name {
		case "gateway-1":
			f.gw = 1
		case "adapter-runner-1":
			// A supervisor restarts it at once.
			f.early = true
			f.want = []string{string(events.CodeAdapterExited)}
		}
		r.run(f)
	}
}
