package test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/cluster"
	"skein.dev/internal/tcprelay"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/client"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog/eventlogtest"
)

// TestEdgeLinkCut (issue 31 §2) runs an edge runner whose link to the
// cluster goes through a relay the test cuts, as a laptop's sleep or a
// change of Wi-Fi does, for longer than the runner's heartbeat lives
// (edgeCut):
//
//   - A turn streaming when the link drops completes end_turn with every
//     chunk once it is back: the adapter ran on, its output kept in the
//     runner's outbox and delivered in order.
//   - A permission request pending when the link drops stays answerable:
//     its answer, given while the link is down, reaches the agent once it
//     is back, and the turn completes.
//   - (make test-long) A runner restarted while the link is down: what
//     its outbox held arrives once the link is back, and the turn it ran
//     ends adapter_exited, its output whole up to the restart.
//
// It logs the recovery time: from the link's return until the turn in
// flight returned.
func TestEdgeLinkCut(t *testing.T) {
	exe := skeinBin(t)
	c := startCluster(t, cluster.Options{})
	ctx := t.Context()
	env := clusterEnv(t, c)
	dir := t.TempDir()
	creds := filepath.Join(dir, "laptop.creds")
	if code, out, errOut := runSkein(t, env, "provision", "runner", "laptop", "--out", creds); code != 0 {
		t.Fatalf("skein provision runner laptop: exit %d\n%s%s", code, out, errOut)
	}
	// The runner's link to every node goes through a relay of its own.
	var link relays
	var urls []string
	for _, port := range c.LeafPorts {
		r, err := tcprelay.New(fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		link = append(link, r)
		urls = append(urls, "nats-leaf://"+r.Addr())
	}
	join := []string{"--join", strings.Join(urls, ","), "--creds", creds, "--id", "laptop", "--label", "where=laptop"}
	runner := startEdgeRunner(t, exe, env, filepath.Join(dir, "laptop"), join...)

	ops, err := nats.Connect(c.URL(cluster.UserOps))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	cl, err := client.New(ops)
	if err != nil {
		t.Fatal(err)
	}
	placed := &events.Placement{Labels: map[string]string{"where": "laptop"}}
	if err := cl.Open(ctx, "stream", events.AcpOpenSessionRequest{Agent: "test", Placement: placed}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Open(ctx, "ask", events.AcpOpenSessionRequest{Agent: "test", Placement: placed, PermissionPolicy: new("ask")}); err != nil {
		t.Fatal(err)
	}

	// The turns: one streams 15 s of chunks, one waits for an answer.
	type answer struct {
		resp *events.AcpPromptResponse
		err  error
		at   time.Time
	}
	prompt := func(sid, key, text string) <-chan answer {
		done := make(chan answer, 1)
		go func() {
			resp, err := cl.PromptText(ctx, sid, text, client.WithIdempotencyKey(key))
			done <- answer{resp, err, time.Now()}
		}()
		return done
	}
	live, err := ops.SubscribeSync(events.LiveSubject(events.DefaultNamespace, "stream"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ops.Flush(); err != nil {
		t.Fatal(err)
	}
	const ticks = 300
	streaming := prompt("stream", "stream-1", fmt.Sprintf("tick %d 50ms", ticks))
	asking := prompt("ask", "ask-1", "permission c1\nsay answered")
	requestID := awaitPending(t, cl, "ask")
	awaitLive(t, live, 20)

	link.Blackhole()
	cutAt := time.Now()
	// The answer, while the link is down: the session service takes it.
	res, err := cl.RespondPermission(ctx, "ask", requestID, "allow")
	if err != nil || res.Status != "accepted" {
		t.Errorf("the answer given while the link is down = %+v, %v; want accepted", res, err)
	}
	if !wait(ctx, edgeCut-time.Since(cutAt)) {
		t.Fatal(ctx.Err())
	}
	link.Heal()
	healed := time.Now()

	want := tickText(ticks)
	s := <-streaming
	switch {
	case s.err != nil:
		t.Errorf("the streaming turn across the cut: %v", s.err)
	case s.resp.StopReason != "end_turn" || !strings.Contains(string(s.resp.Message), want):
		t.Errorf("the streaming turn across the cut ended %q with %s; want end_turn with every chunk", s.resp.StopReason, s.resp.Message)
	}
	a := <-asking
	switch {
	case a.err != nil:
		t.Errorf("the turn whose answer came during the cut: %v", a.err)
	case a.resp.StopReason != "end_turn" || !strings.Contains(string(a.resp.Message), "answered"):
		t.Errorf("the turn whose answer came during the cut ended %q with %s; want end_turn, its answer delivered", a.resp.StopReason, a.resp.Message)
	}
	t.Logf("link cut for %v: the streaming turn returned %.2fs after the link came back, the asking turn %.2fs",
		healed.Sub(cutAt).Round(time.Millisecond), s.at.Sub(healed).Seconds(), a.at.Sub(healed).Seconds())
	for _, sid := range []events.SessionID{"stream", "ask"} {
		eventlogtest.Audit(t, mustJS(t, ops), events.DefaultNamespace, sid)
	}

	if !testutil.Long() {
		return
	}
	// A runner restarted while its link is down.
	restarting := prompt("stream", "stream-2", "tick 200 50ms\nsay never")
	awaitLive(t, live, 20)
	link.Cut()
	if err := runner.Stop(); err != nil {
		t.Fatal(err)
	}
	runner = startEdgeRunnerNoWait(t, exe, env, filepath.Join(dir, "laptop"), join...)
	if !wait(ctx, 5*time.Second) {
		t.Fatal(ctx.Err())
	}
	link.Heal()
	if err := runner.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-restarting
	if r.err == nil || events.AsError(r.err).Code != events.CodeAdapterExited {
		t.Errorf("the turn whose runner restarted while the link was down = %+v, %v; want adapter_exited", r.resp, r.err)
	}
	log := eventlogtest.Audit(t, mustJS(t, ops), events.DefaultNamespace, "stream")
	if got := log.Turns[len(log.Turns)-1].Finish; got == nil || got.Outcome != events.OutcomeFailed {
		t.Errorf("the restarted runner's turn ended %+v, want failed adapter_exited", got)
	}
}

// awaitPending waits until sid's state names a pending permission
// request, and returns its ID.
func awaitPending(t *testing.T, cl *client.Client, sid string) string {
	t.Helper()
	var id string
	if err := pollFor(t.Context(), sid+"'s permission request", func() bool {
		info, err := cl.Session(t.Context(), sid)
		if err != nil {
			return false
		}
		var st events.SessionState
		if json.Unmarshal(info.State, &st) != nil || len(st.Requests) == 0 {
			return false
		}
		id = st.Requests[0].RequestID
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// awaitLive waits until n live deltas of sid arrived on sub.
func awaitLive(t *testing.T, sub *nats.Subscription, n int) {
	t.Helper()
	for range n {
		if _, err := sub.NextMsg(30 * time.Second); err != nil {
			t.Fatalf("live deltas: %v", err)
		}
	}
}

// startEdgeRunnerNoWait is startEdgeRunner without the wait for its join.
func startEdgeRunnerNoWait(t testing.TB, exe string, env map[string]string, dataDir string, args ...string) *cluster.Proc {
	t.Helper()
	p := &cluster.Proc{Name: "edge-" + filepath.Base(dataDir), Path: exe,
		Args: append([]string{"runner", "--data", dataDir, "--log-level", "debug"}, args...),
		Log:  filepath.Join(t.TempDir(), "edge.log"), Ready: "skein runner joined"}
	for k, v := range env {
		p.Env = append(p.Env, k+"="+v)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("--- %s's log (tail):\n%s", p.Name, p.Tail(6000))
		}
	})
	return p
}

func mustJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// relays act on every relay of a link at once.
type relays []*tcprelay.Relay

func (rs relays) Blackhole() {
	for _, r := range rs {
		r.Blackhole()
	}
}

func (rs relays) Cut() {
	for _, r := range rs {
		r.Cut()
	}
}

func (rs relays) Heal() {
	for _, r := range rs {
		r.Heal()
	}
}

// edgeCut is how long TestEdgeLinkCut's link stays down: past the
// runner's heartbeat (streams.DefaultRunnerTTL, 15 s), as in issue 31's
// hand test.
const edgeCut = 20 * time.Second
