package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
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
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/testagent"
)

// The runner-loss tests take a runner machine away for good:
// two adapter-runners host sessions, each session has a turn in flight,
// and one runner is killed with SIGKILL and never restarted. Its adapters
// die with it (Pdeathsig), and no exit record is written for them: the
// session services learn of the loss only when the runner's heartbeat in
// ACP_RUNNERS expires (15 s after the last one). Then every turn the dead
// runner ran ends adapter_exited, the turns on the other runner go on as if
// nothing happened, and each affected session's next prompt restores it on
// the surviving runner and answers. Nothing durable from before the kill
// is lost. What it cost is logged as
//
//	runner_loss=<topology> exited_after=<s> first_answer_after=<s> ...
//
// measured from the kill, never asserted.

// lossPerRunner is how many sessions each runner hosts at the kill.
const lossPerRunner = 3

// lossRig is one topology the scenario runs on: its gateway, its log, the
// test agent's control dir, and the runner to kill.
type lossRig struct {
	t        *testing.T
	topology string              // for the figures: cluster, dev
	base     string              // the gateway's http://…/v1/sessions/
	token    string              // the bearer token; "" when the gateway takes none
	js       jetstream.JetStream // reads the logs directly
	control  string
	client   *http.Client
	victim   events.RunnerID // the runner killed
	survivor events.RunnerID // the runner left
	kill     func() error
}

// lossAgents writes an agents file whose "test" agent pauses through
// control and keeps its sessions in state, a directory every runner
// shares, as agents that keep their sessions on shared storage do: a
// session restored on another runner can then be resumed natively.
func lossAgents(t *testing.T, control, state string) string {
	t.Helper()
	exe := skeinBin(t)
	agents := filepath.Join(t.TempDir(), "agents.json")
	b, _ := json.Marshal(map[string]any{"agents": []map[string]any{{"id": "test", "command": exe,
		"args": []string{testAgentCommand, "--control-dir", control, "--resume", "--load-session", "--state-dir", state},
		// The test agent's pause points and the sessions it keeps live
		// outside its session.
		"sandbox": map[string]any{"write": []string{control, state}}}}})
	if err := os.WriteFile(agents, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return agents
}

// TestRunnerLostCluster runs the scenario on make cluster's topology with
// two runners, adapter-runner-1 and adapter-runner-2, each its own process
// and data directory; adapter-runner-1 is the one lost. Long: make
// test-long (SKEIN_LONG=1), as it waits out the heartbeat's TTL on top of
// a cluster's start.
func TestRunnerLostCluster(t *testing.T) {
	if !testutil.Long() {
		t.Skip("a runner lost on a cluster of processes: make test-long (SKEIN_LONG=1)")
	}
	control, state := t.TempDir(), t.TempDir()
	agents := lossAgents(t, control, state)
	c := startCluster(t, cluster.Options{Runners: 2, Sessions: 2,
		Args: map[string][]string{cluster.Runner: {"--adapter-runner.agents=" + agents}}})
	nc, err := nats.Connect(c.URL(cluster.UserOps), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.Service(cluster.Runner + "-1")
	r := &lossRig{t: t, topology: "cluster", base: c.HTTP[0] + "/v1/sessions/", token: c.Token, js: js, control: control,
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		victim: events.RunnerID(victim.Name), survivor: cluster.Runner + "-2", kill: victim.Kill}
	r.run()
}

// TestRunnerLostDev runs the scenario on skein dev, with a second runner
// that joins it as a process of its own (skein serve
// -target=adapter-runner, through --nats-listen), as a machine added to a
// dev stack would; that one is lost. It takes about 16 s, most of it the
// wait for the heartbeat's TTL, idle: it runs in make test, not in -short.
func TestRunnerLostDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits out a heartbeat's TTL; skipped in -short")
	}
	exe := skeinBin(t)
	control, state, data := testutil.TempDir(t), t.TempDir(), t.TempDir()
	agents := lossAgents(t, control, state)
	dev := mustStartDev(t, devOptions{data: data, agents: agents, natsListen: true, flags: []string{"--log-level", "warn"}})

	// The second runner works in the dev stack's workspace root: skein dev
	// records each session's cwd under it, and a runner refuses a cwd
	// outside its roots.
	runner := &cluster.Proc{Name: "runner-2", Path: exe, Log: filepath.Join(t.TempDir(), "runner-2.log"), Ready: "skein serving",
		Args: []string{"serve", "--target=adapter-runner", "--log-level=info", "--adapter-runner.id=runner-2",
			"--adapter-runner.data-dir=" + t.TempDir(), "--adapter-runner.agents=" + agents,
			"--adapter-runner.workspace-roots=" + filepath.Join(data, "workspaces")},
		Env: []string{"NATS_URL=" + devUserURL(t, data, "skein-"+targetRunner)}}
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = runner.Stop()
		if t.Failed() {
			t.Logf("runner-2's log (tail):\n%s", runner.Tail(4000))
		}
	})
	if err := runner.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := &lossRig{t: t, topology: "dev", base: dev.base, js: dev.js(t), control: control,
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		victim: "runner-2", survivor: "dev", kill: runner.Kill}
	r.run()
}

// lossSession is one session of the scenario and what became of it.
type lossSession struct {
	sid      events.SessionID
	runner   events.RunnerID
	attached *events.AdapterAttached // before the kill
	history  map[uint64]string       // its durable events before the kill, by sequence

	// Written by its prompt's goroutine, read after it is done.
	inflight, next lossAnswer
	returned       time.Time // when the prompt in flight returned
	answered       time.Time // when the next prompt returned
	done           chan struct{}
}

// lossAnswer is what an HTTP prompt returned.
type lossAnswer struct {
	code int
	body []byte
}

func (a lossAnswer) String() string { return fmt.Sprintf("%d %s", a.code, a.body) }

// completed reports whether a is a completed turn whose last message is
// text.
func (a lossAnswer) completed(text string) bool {
	var res struct {
		StopReason string `json:"stopReason"`
		Message    struct {
			Content struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"message"`
	}
	return a.code == http.StatusOK && json.Unmarshal(a.body, &res) == nil && res.StopReason == "end_turn" && res.Message.Content.Text == text
}

// failed reports whether a is a turn that failed with code.
func (a lossAnswer) failed(status int, code events.Code) bool {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	return a.code == status && json.Unmarshal(a.body, &e) == nil && e.Error.Code == string(code)
}

func (r *lossRig) run() {
	t := r.t
	ctx := t.Context()
	sessions := r.openOnBoth()

	// A first turn each, so that the agent has a conversation to resume
	// and the log a finished turn; then a turn each that writes two
	// durable updates and stops at a pause point.
	for _, s := range sessions {
		if a := r.prompt(ctx, s.sid, "say hello "+string(s.sid)); !a.completed("hello " + string(s.sid)) {
			t.Fatalf("%s's first prompt = %v", s.sid, a)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute) // a prompt that never returns is a hang
	defer cancel()
	var victims sync.WaitGroup
	for _, s := range sessions {
		s.done = make(chan struct{})
		lost := s.runner == r.victim
		if lost {
			victims.Add(1)
		}
		go func() {
			defer close(s.done)
			s.inflight = r.prompt(pctx, s.sid, fmt.Sprintf("stamp 2 update\npause %s\nsay done %s", s.sid, s.sid))
			s.returned = time.Now()
			if !lost {
				return
			}
			// The client prompts again at once, as adapter_exited says.
			defer victims.Done()
			s.next = r.prompt(pctx, s.sid, "say back "+string(s.sid))
			s.answered = time.Now()
		}()
	}
	for _, s := range sessions {
		if err := testagent.WaitPaused(pctx, r.control, string(s.sid)); err != nil {
			t.Fatalf("%s never paused: %v", s.sid, err)
		}
		s.history = r.durableBefore(pctx, s.sid)
	}

	killed := time.Now()
	if err := r.kill(); err != nil {
		t.Fatal(err)
	}
	victims.Wait()
	// The turns on the surviving runner are still running: the loss of
	// the other is none of theirs. Released now, each completes.
	for _, s := range sessions {
		if s.runner == r.victim {
			continue
		}
		select {
		case <-s.done:
			t.Errorf("%s (on %s): its turn ended while the other runner's loss was handled: %v", s.sid, s.runner, s.inflight)
		default:
		}
		if err := testagent.Release(pctx, r.control, string(s.sid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sessions {
		<-s.done
	}

	var exited, answered []time.Duration
	tiers := map[string]int{}
	for _, s := range sessions {
		log := eventlogtest.Audit(t, r.js, events.DefaultNamespace, s.sid)
		r.historyIntact(s)
		if s.runner != r.victim {
			if !s.inflight.completed("done " + string(s.sid)) {
				t.Errorf("%s (on the surviving runner %s): the prompt in flight = %v, want completed", s.sid, s.runner, s.inflight)
			}
			if got := attachedIn(log); len(got) != 1 || got[0].ProcessID != s.attached.ProcessID {
				t.Errorf("%s (on the surviving runner %s) was attached again: %d attachments", s.sid, s.runner, len(got))
			}
			continue
		}
		exited = append(exited, s.returned.Sub(killed))
		answered = append(answered, s.answered.Sub(killed))
		if !s.inflight.failed(http.StatusBadGateway, events.CodeAdapterExited) {
			t.Errorf("%s (on the lost runner %s): the prompt in flight = %v, want 502 adapter_exited", s.sid, s.runner, s.inflight)
		}
		if !s.next.completed("back " + string(s.sid)) {
			t.Errorf("%s (on the lost runner %s): the next prompt = %v, want completed", s.sid, s.runner, s.next)
		}
		if got := outcomes(log); !slices.Equal(got, []string{"completed", "failed adapter_exited", "completed"}) {
			t.Errorf("%s's turns ended %v, want completed, failed adapter_exited, completed", s.sid, got)
		}
		att := attachedIn(log)
		if len(att) != 2 {
			t.Errorf("%s has %d adapter attachments, want 2: the first, and the restore after the loss", s.sid, len(att))
			continue
		}
		restored := att[1]
		tiers[restored.Tier]++
		if events.RunnerID(restored.RunnerID) != r.survivor {
			t.Errorf("%s was restored on %q, want the surviving runner %s", s.sid, restored.RunnerID, r.survivor)
		}
		// Every runner reads the agent's sessions from one state dir: the
		// agent has this one, so nothing short of a native resume is right.
		if restored.Tier != events.TierResume {
			t.Errorf("%s was restored by tier %q (%s), want %q: the agent's state dir has the session", s.sid, restored.Tier, restored.TierReason, events.TierResume)
		}
	}
	if len(exited) == 0 {
		return
	}
	slices.Sort(exited)
	slices.Sort(answered)
	t.Logf("runner_loss=%s exited_after=%.2fs first_answer_after=%.2fs exited_first=%.2fs last_answer_after=%.2fs tiers=%v lost=%d kept=%d",
		r.topology, exited[len(exited)-1].Seconds(), answered[0].Seconds(), exited[0].Seconds(), answered[len(answered)-1].Seconds(),
		tiers, len(exited), len(sessions)-len(exited))
}

// openOnBoth opens sessions of the test agent until the victim and the
// survivor host lossPerRunner each (placement picks the least-loaded
// runner, by heartbeats that lag), and returns those.
func (r *lossRig) openOnBoth() []*lossSession {
	t := r.t
	t.Helper()
	hosted := map[events.RunnerID][]*lossSession{}
	for i := 0; len(hosted[r.victim]) < lossPerRunner || len(hosted[r.survivor]) < lossPerRunner; i++ {
		if i == 8*lossPerRunner {
			t.Fatalf("after %d sessions, %s hosts %d and %s %d", i, r.victim, len(hosted[r.victim]), r.survivor, len(hosted[r.survivor]))
		}
		s := &lossSession{sid: events.SessionID(fmt.Sprint("rl", i))}
		if err := pollFor(t.Context(), "open "+string(s.sid), func() bool {
			code, _ := r.do(t.Context(), http.MethodPut, string(s.sid), `{"agent":"test"}`)
			return code == http.StatusOK
		}); err != nil {
			t.Fatal(err)
		}
		// On R3 the read may go to a follower that lags the append.
		if err := pollFor(t.Context(), string(s.sid)+"'s adapter", func() bool {
			s.attached, _ = lastRecord[events.AdapterAttached](t.Context(), r.js, s.sid)
			return s.attached != nil
		}); err != nil {
			t.Fatal(err)
		}
		s.runner = events.RunnerID(s.attached.RunnerID)
		if len(hosted[s.runner]) < lossPerRunner {
			hosted[s.runner] = append(hosted[s.runner], s)
		}
	}
	return append(hosted[r.victim], hosted[r.survivor]...)
}

// durableBefore waits until sid's turn in flight has its two durable
// updates in the history, and returns its durable events by sequence.
func (r *lossRig) durableBefore(ctx context.Context, sid events.SessionID) map[uint64]string {
	r.t.Helper()
	var page map[uint64]string
	if err := pollFor(ctx, string(sid)+"'s durable updates", func() bool {
		page = r.history(ctx, sid)
		n := 0
		for _, e := range page {
			n += strings.Count(e, `"type":"x_stamp"`)
		}
		return n == 2
	}); err != nil {
		r.t.Fatal(err)
	}
	return page
}

// historyIntact checks that every durable event sid had before the kill is
// still in its history, at the same sequence, unchanged.
func (r *lossRig) historyIntact(s *lossSession) {
	r.t.Helper()
	now := r.history(r.t.Context(), s.sid)
	for _, seq := range slices.Sorted(maps.Keys(s.history)) {
		if got, ok := now[seq]; !ok || got != s.history[seq] {
			r.t.Errorf("%s: durable event %d before the kill was %s; now %q (present %v)", s.sid, seq, s.history[seq], got, ok)
		}
	}
}

// history reads sid's history through the gateway: each event's JSON by
// its sequence.
func (r *lossRig) history(ctx context.Context, sid events.SessionID) map[uint64]string {
	r.t.Helper()
	code, body := r.do(ctx, http.MethodGet, string(sid)+"/history?after=0&limit=10000", "")
	var page struct {
		Events []json.RawMessage `json:"events"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
		r.t.Fatalf("history of %s = %d %s", sid, code, body)
	}
	out := map[uint64]string{}
	for _, e := range page.Events {
		var ev struct {
			Sequence uint64 `json:"sequence"`
		}
		if err := json.Unmarshal(e, &ev); err != nil {
			r.t.Fatalf("history of %s: %s: %v", sid, e, err)
		}
		out[ev.Sequence] = string(e)
	}
	return out
}

// prompt posts a prompt of text to sid.
func (r *lossRig) prompt(ctx context.Context, sid events.SessionID, text string) lossAnswer {
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	code, body := r.do(ctx, http.MethodPost, string(sid)+"/prompt", string(b))
	return lossAnswer{code, body}
}

// do sends a request to the gateway, path relative to its sessions, and
// returns the status and body (0 and the error's text when there was no
// answer).
func (r *lossRig) do(ctx context.Context, method, path, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, strings.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, b
}

// attachedIn returns the log's AdapterAttached records, in order.
func attachedIn(log *eventlogtest.Log) []*events.AdapterAttached {
	var out []*events.AdapterAttached
	for _, rec := range log.Records {
		if rec.Header.Get(events.HeaderRecord) != events.RecordAdapterAttached {
			continue
		}
		if a, err := events.Decode[events.AdapterAttached](rec.Data); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// outcomes returns how each of the log's turns ended: its outcome, and
// its error's code when it failed.
func outcomes(log *eventlogtest.Log) []string {
	var out []string
	for _, turn := range log.Turns {
		switch {
		case turn.Finish == nil:
			out = append(out, "open")
		case turn.Finish.Error != nil:
			out = append(out, turn.Finish.Outcome+" "+turn.Finish.Error.Code)
		default:
			out = append(out, turn.Finish.Outcome)
		}
	}
	return out
}
