package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/cluster"
	"skein.dev/internal/testutil"
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

// faultSessions is how many sessions have a turn in flight at each fault
// of the long tests; a quick rig (rigOptions.quick) has fewer.
const faultSessions = 20

// rigOptions say what cluster a fault rig runs.
type rigOptions struct {
	// sessions have a turn in flight at each fault (faultSessions when 0).
	sessions int
	// relayed runs every route and service connection through a relay,
	// for partitions (cluster.Options.Relayed).
	relayed bool
	// quick runs in make test, not only make test-long.
	quick bool
	// args are extra skein serve flags per target.
	args map[string][]string
}

// faultRig is a cluster with faultSessions sessions open, each followed
// by an SSE viewer for the whole test.
type faultRig struct {
	t        *testing.T
	c        *cluster.Cluster
	nc       *nats.Conn // the ops user's
	js       jetstream.JetStream
	control  string // the test agent's control dir
	sessions int    // with a turn in flight at each fault
	// hist records every client operation on a session, checked for
	// linearizability after each fault (linearize_test.go).
	hist    *opHistory
	client  *http.Client
	viewers []*sseViewer
	phases  int // faults run so far: each put one turn in every session

	// baseline is how long the turns took with no fault (turn durations,
	// sorted), once the "none" phase ran: each fault's cost is beside it.
	baseline []time.Duration
}

func startFaultRig(t *testing.T, o rigOptions) *faultRig {
	if !o.quick && !testutil.Long() {
		t.Skip("fault tests on a cluster of processes: make test-long (SKEIN_LONG=1)")
	}
	if o.sessions == 0 {
		o.sessions = faultSessions
	}
	exe := skeinBin(t)
	// The runner's adapters get a minimal environment, so the test agent
	// learns its control dir from its arguments, in an agents file entry
	// that replaces the built-in "test".
	control := testutil.TempDir(t)
	agents := filepath.Join(t.TempDir(), "agents.json")
	b, _ := json.Marshal(map[string]any{"agents": []map[string]any{{"id": "test", "command": exe, "args": []string{testAgentCommand, "--control-dir", control},
		// The test agent's pause points live outside its session.
		"sandbox": map[string]any{"write": []string{control}}}}})
	if err := os.WriteFile(agents, b, 0o600); err != nil {
		t.Fatal(err)
	}
	args := map[string][]string{cluster.Runner: {"--adapter-runner.agents=" + agents}}
	for target, a := range o.args {
		args[target] = append(args[target], a...)
	}
	c := startCluster(t, cluster.Options{Sessions: 2, Gateways: 2, Relayed: o.relayed, Args: args})
	nc, err := nats.Connect(c.URL(cluster.UserOps), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := &faultRig{t: t, c: c, nc: nc, js: js, control: control, sessions: o.sessions, hist: newOpHistory(),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	for i := range r.sessions {
		r.open(fmt.Sprint("f", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range r.sessions {
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
	code, b, _ := r.send(ctx, gw, method, path, body)
	return code, b
}

// send is do, with the answer's headers.
func (r *faultRig) send(ctx context.Context, gw int, method, path string, body any) (int, []byte, http.Header) {
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(ctx, method, r.c.HTTP[gw%len(r.c.HTTP)]+path, rd)
	if err != nil {
		return 0, []byte(err.Error()), nil
	}
	req.Header.Set("Authorization", "Bearer "+r.c.Token)
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error()), nil
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	if err != nil {
		return 0, []byte(err.Error()), nil
	}
	return resp.StatusCode, []byte(b.String()), resp.Header
}

// open opens a session of the test agent, retrying for a minute while the
// cluster cannot serve it.
func (r *faultRig) open(sid string) { r.openWith(sid, map[string]string{"agent": "test"}) }

// openWith is open with the request body of PUT /v1/sessions/{id}.
func (r *faultRig) openWith(sid string, req map[string]string) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	call := r.hist.now()
	for i := 0; ; i++ {
		code, body := r.do(r.t.Context(), i, http.MethodPut, "/v1/sessions/"+sid, req)
		if code == http.StatusOK {
			r.hist.add(0, call, sessionOp{Session: sid, Kind: "open"}, sessionResult{Status: "ok"})
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
func (r *faultRig) prompt(ctx context.Context, gw int, sid, key, text string) answer {
	code, body, h := r.send(ctx, gw, http.MethodPost, "/v1/sessions/"+sid+"/prompt",
		map[string]any{"idempotencyKey": key, "content": []map[string]string{{"type": "text", "text": text}}})
	return answer{code: code, body: body, turn: h.Get("X-Skein-Turn-Id")}
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

// answer is what an HTTP prompt returned: with the turn it was accepted
// as, when it was.
type answer struct {
	code int
	body []byte
	turn string
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
	answers := make([]answer, r.sessions)
	retried := make([]bool, r.sessions)
	returned := make([]time.Time, r.sessions)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range r.sessions {
		wg.Go(func() {
			sid := fmt.Sprint("f", i)
			call := r.hist.now()
			answers[i] = r.prompt(pctx, i, sid, key(i), script(i))
			if !f.strict && answers[i].retryable() && pctx.Err() == nil {
				retried[i] = true
				answers[i] = r.retryKeyed(pctx, i+1, sid, key(i), script(i))
			}
			r.recordPrompt(i, call, sid, key(i), answers[i])
			returned[i] = time.Now()
		})
	}
	// A reader of every session's state for the whole fault, through
	// both gateways, for the checked history.
	gctx, stopGets := context.WithCancel(pctx)
	var gets sync.WaitGroup
	gets.Go(func() { r.readStates(gctx) })
	for i := range r.sessions {
		if err := testagent.WaitPaused(pctx, r.control, key(i)); err != nil {
			t.Fatalf("%s: session f%d never paused: %v", f.name, i, err)
		}
	}
	for i := range r.sessions {
		if err := testagent.Release(pctx, r.control, key(i)); err != nil {
			t.Fatal(err)
		}
	}

	// Sessions of their own take every kind of operation meanwhile.
	mctx, stopMixed := context.WithCancel(ctx)
	var mixed sync.WaitGroup
	for i := range mixedSessions {
		mixed.Go(func() { r.mixedOps(mctx, r.sessions+3+3*i, fmt.Sprintf("m-%s-%d", f.name, i)) })
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
	stopGets()
	gets.Wait()
	stopMixed()
	mixed.Wait()
	turns := make([]time.Duration, r.sessions)
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
	for i := range r.sessions {
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
		nretried, r.sessions, outcomes, time.Since(settled).Seconds(),
		turns[len(turns)/2].Seconds(), turns[len(turns)-1].Seconds(), cost, note)
	if f.name == "none" {
		r.baseline = turns
	}
	if probeErr != nil {
		t.Errorf("%s: no new prompt was answered after the fault: %v", f.name, probeErr)
	}
	r.audit(f)
	r.hist.check(t, f.name)
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
		a := r.prompt(actx, gw, sid, key, text)
		cancel()
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
		call := r.hist.now()
		last = r.prompt(actx, gw, sid, fmt.Sprintf("%s-%d", sid, attempt), "say probe "+name)
		cancel()
		r.recordPrompt(r.sessions+2, call, sid, fmt.Sprintf("%s-%d", sid, attempt), last)
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
