package test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"skein.dev/internal/cluster"
	"skein.dev/internal/edgeusers"
	"skein.dev/pkg/client"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// TestEdgeRunner runs issue 31's edge runner on make cluster's topology:
// a runner of another machine, skein runner --join, joined to the nodes'
// leafnodes listener with the credential skein provision runner issued.
//
//   - It is the cluster's only runner, and a session placed on it opens
//     and streams a turn end to end through the leaf, with no node logging
//     a permission violation.
//   - Its credential is refused everything else: reading ACP_LOG (direct
//     get, consumer, stream info, the tail and the log's subjects),
//     another runner's control subjects and heartbeat, any other KV
//     bucket, the live deltas. Through a leaf node as skein runner runs it,
//     each refusal is an error returned or nothing ever delivered, and the
//     hub never learns the subscription; through a leaf that ignores what
//     the hub told it (the protocol spoken by hand), the hub logs each
//     violation and cuts the connection.
//   - A password of accounts.conf gets nowhere on the leafnodes listener.
//   - The credential run as another runner's ID is refused, and skein
//     runner says so and exits.
//   - --revoke cuts the runner's link within seconds: the hub holds no
//     leaf connection of it, and skein runner exits saying why.
func TestEdgeRunner(t *testing.T) {
	exe := skeinBin(t)
	c := startCluster(t, cluster.Options{})
	ctx := t.Context()
	// The cluster's own runner goes: a session can only run on the edge.
	if err := c.Service(cluster.Runner + "-1").Stop(); err != nil {
		t.Fatal(err)
	}
	env := clusterEnv(t, c)
	dir := t.TempDir()
	creds := filepath.Join(dir, "laptop.creds")
	if code, out, errOut := runSkein(t, env, "provision", "runner", "laptop", "--out", creds); code != 0 ||
		strings.Count(out, ": reloaded") != 3 {
		t.Fatalf("skein provision runner laptop: exit %d, want every node reloaded:\n%s%s", code, out, errOut)
	}
	if code, out, _ := runSkein(t, env, "provision", "runner", "laptop", "--out", creds); code != 0 || !strings.Contains(out, "unchanged") {
		t.Errorf("skein provision runner laptop again, same --out: exit %d, %s; want unchanged", code, out)
	}
	b, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := edgeusers.ParseCredential(b)
	if err != nil {
		t.Fatal(err)
	}

	laptop := startEdgeRunner(t, exe, env, filepath.Join(dir, "laptop"), "--creds", creds, "--id", "laptop", "--label", "where=laptop")
	ops, err := nats.Connect(c.URL(cluster.UserOps))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	js, err := jetstream.New(ops)
	if err != nil {
		t.Fatal(err)
	}
	runners, err := js.KeyValue(ctx, events.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	e, err := runners.Get(ctx, "laptop")
	if err != nil {
		t.Fatalf("the edge runner's heartbeat: %v", err)
	}
	info, err := events.Decode[events.RunnerInfo](e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if !info.PlacedOnly || info.Labels["where"] != "laptop" {
		t.Errorf("the edge runner's heartbeat: placed only %v, labels %v; want true, where=laptop", info.PlacedOnly, info.Labels)
	}

	// A session placed on it, over NATS as a service would: its turn
	// streams live deltas, and its whole message is in the log.
	cl, err := client.New(ops)
	if err != nil {
		t.Fatal(err)
	}
	live, err := ops.SubscribeSync("acp.live.default.edge1")
	if err != nil {
		t.Fatal(err)
	}
	if err := ops.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Open(ctx, "edge1", events.AcpOpenSessionRequest{Agent: "test", Placement: &events.Placement{Runner: new("laptop")}}); err != nil {
		t.Fatal(err)
	}
	resp, err := cl.PromptText(ctx, "edge1", "tick 20 20ms")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "end_turn" {
		t.Errorf("the edge runner's turn ended %q, want end_turn", resp.StopReason)
	}
	if m, err := live.NextMsg(10 * time.Second); err != nil {
		t.Errorf("no live delta of the edge runner's turn: %v", err)
	} else if v, err := events.Unmarshal(m.Data); err != nil {
		t.Errorf("a live delta: %v", err)
	} else {
		t.Logf("live: %s", v.VariantName())
	}
	var want strings.Builder
	for i := range 20 {
		fmt.Fprintf(&want, "%d ", i+1)
	}
	if !strings.Contains(string(resp.Message), want.String()) {
		t.Errorf("the edge runner's turn's message is %s, want every chunk: %q", resp.Message, want.String())
	}
	if v := c.Violations(); len(v) > 0 {
		t.Fatalf("permission violations while an edge runner ran a turn:\n%s", strings.Join(v, "\n"))
	}

	// What the credential may not do, through a leaf node as skein runner
	// makes one: every request is refused, every subscription receives
	// nothing, and the hub never learns of them.
	probe := edgeProbeLeaf(t, c, cred)
	refusedRequests := map[string][]byte{
		"$JS.skein.API.DIRECT.GET.ACP_LOG":                                        []byte(`{"seq":1}`),
		"$JS.skein.API.DIRECT.GET.ACP_LOG.acp.log.default.edge1.ev":               nil,
		"$JS.skein.API.CONSUMER.CREATE.ACP_LOG":                                   []byte(`{"stream_name":"ACP_LOG","config":{"ack_policy":"none","deliver_policy":"all"}}`),
		"$JS.skein.API.STREAM.INFO.ACP_LOG":                                       []byte(`{"subjects_filter":">"}`),
		"$JS.skein.API.DIRECT.GET.KV_ACP_RUNNERS.$KV.ACP_RUNNERS.laptop":          nil,
		"$JS.skein.API.DIRECT.GET.KV_ACP_SESSIONS.$KV.ACP_SESSIONS.default.edge1": nil,
		"$JS.skein.API.$KV.ACP_RUNNERS.desk":                                      []byte("a heartbeat for another runner"),
		"$JS.skein.API.$KV.ACP_SESSIONS.default.edge1":                            []byte("a session's metadata"),
		"$JS.API.DIRECT.GET.ACP_LOG":                                              []byte(`{"seq":1}`),
		"acp.io.default.edge1.desk":                                               []byte("a record on another runner's subject"),
		"acp.api.default.prompt":                                                  nil,
		"acp.runner.desk.status":                                                  nil,
	}
	for subject, body := range refusedRequests {
		if m, err := probe.Request(subject, body, time.Second); err == nil {
			t.Errorf("the edge credential's request to %s was answered: %s", subject, m.Data)
		}
	}
	forgeRecord(t, c, probe, cl, js)

	refusedSubs := []string{"acp.log.>", "acp.tail.>", "acp.live.>", "acp.iotail.>", "acp.runner.desk.>", "$KV.ACP_RUNNERS.>", "_INBOX.session.>"}
	subs := make([]*nats.Subscription, len(refusedSubs))
	for i, s := range refusedSubs {
		if subs[i], err = probe.SubscribeSync(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := probe.Flush(); err != nil {
		t.Fatal(err)
	}
	// What they would see: a turn (the log, its tail, the live deltas, the
	// runner's records), a request to another runner, a heartbeat.
	if _, err := cl.PromptText(ctx, "edge1", "say while the probe listens"); err != nil {
		t.Fatal(err)
	}
	_, _ = ops.Request("acp.runner.desk.status", nil, 500*time.Millisecond)
	desk, err := events.Marshal(&events.RunnerInfo{ID: "desk", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runners.Put(ctx, "desk", desk); err != nil {
		t.Fatal(err)
	}
	for i, sub := range subs {
		if m, err := sub.NextMsg(500 * time.Millisecond); err == nil {
			t.Errorf("the edge credential's subscription to %s received %s", refusedSubs[i], m.Subject)
		}
	}
	for _, s := range edgeHubSubs(t, c) {
		if slices.Contains(refusedSubs, s) {
			t.Errorf("a hub holds the edge credential's subscription to %s", s)
		}
	}
	if _, err := runners.Get(ctx, "desk"); err != nil {
		t.Fatal(err)
	}
	if err := runners.Delete(ctx, "desk"); err != nil {
		t.Fatal(err)
	}
	if v := c.Violations(); len(v) > 0 {
		t.Fatalf("the probes through a well-behaved leaf reached a hub:\n%s", strings.Join(v, "\n"))
	}

	// The same, spoken by hand: the hub refuses each, logs it, and cuts
	// the connection. A subject the domain maps is logged as mapped.
	for _, p := range []struct{ kind, subject, logged string }{
		{"Subscription", "acp.log.default.edge1.ev", ""},
		{"Subscription", "acp.runner.desk.status", ""},
		{"Subscription", "$KV.ACP_RUNNERS.desk", ""},
		{"Publish", "acp.log.default.edge1.ev", ""},
		{"Publish", "$JS.skein.API.$KV.ACP_RUNNERS.desk", "$KV.ACP_RUNNERS.desk"},
		{"Publish", "$JS.skein.API.DIRECT.GET.ACP_LOG", "$JS.API.DIRECT.GET.ACP_LOG"},
		{"Publish", "acp.runner.desk.status", ""},
		{"Publish", "acp.io.default.edge1.desk", ""},
	} {
		before := len(c.Violations())
		rawLeafViolation(t, c, cred, p.kind, p.subject)
		if p.logged == "" {
			p.logged = p.subject
		}
		want := fmt.Sprintf("%s Violation on %q", p.kind, p.logged)
		if err := pollFor(ctx, "the hub to log "+want, func() bool {
			return slices.ContainsFunc(c.Violations()[before:], func(l string) bool { return strings.Contains(l, want) })
		}); err != nil {
			t.Error(err)
		}
	}

	// A service's password is no way in through the leafnodes listener.
	for _, user := range []string{cluster.UserOps, cluster.UserRunner} {
		if err := passwordLeaf(t, c, user); err == nil {
			t.Errorf("user %s connected to the leafnodes listener", user)
		}
	}

	// The credential run as another runner: refused, said so, exited.
	code, out, errOut := runSkein(t, env, "runner", "--creds", creds, "--id", "desk", "--data", filepath.Join(dir, "desk"), "--join-timeout", "1m")
	if code == 0 || !strings.Contains(errOut, "the cluster refused runner desk") || !strings.Contains(errOut, "runner laptop's") {
		t.Errorf("skein runner --id desk with laptop's credential: exit %d, want a refusal naming both:\n%s%s", code, out, errOut)
	}
	if _, err := runners.Get(ctx, "desk"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("runner desk's heartbeat after the refusal: %v, want none", err)
	}

	// A new key for laptop, to a new file: the old key's link is cut, and
	// its runner exits saying why; the new one joins.
	creds2 := filepath.Join(dir, "laptop2.creds")
	if code, out, errOut := runSkein(t, env, "provision", "runner", "laptop", "--out", creds2); code != 0 ||
		!strings.Contains(out, "the old one is revoked") || leafsClosed(out) == 0 {
		t.Fatalf("skein provision runner laptop to a new file: exit %d, want the old key's link cut:\n%s%s", code, out, errOut)
	}
	awaitRefused(t, laptop)
	laptop = startEdgeRunner(t, exe, env, filepath.Join(dir, "laptop"), "--creds", creds2, "--label", "where=laptop")

	// Revoked: the hub cuts the link within seconds, and the runner exits
	// saying why.
	if code, out, errOut := runSkein(t, env, "provision", "runner", "laptop", "--revoke"); code != 0 || leafsClosed(out) == 0 {
		t.Fatalf("skein provision runner laptop --revoke: exit %d, want its link cut:\n%s%s", code, out, errOut)
	}
	revoked := time.Now()
	if err := pollFor(ctx, "the hubs to hold no leaf connection", func() bool { return len(edgeLeafs(t, c)) == 0 }); err != nil {
		t.Fatal(err)
	}
	t.Logf("the revoked runner's link was cut %v after skein provision runner --revoke returned", time.Since(revoked))
	awaitRefused(t, laptop)
	if _, err := runners.Get(ctx, "laptop"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the revoked runner's heartbeat: %v, want none", err)
	}
	// Its sessions answer agent_unavailable, naming it, at once: a
	// heartbeat deleted is a runner gone, not a link that may come back.
	_, err = cl.PromptText(ctx, "edge1", "say after the revoke")
	if e := events.AsError(err); err == nil || e.Code != events.CodeAgentUnavailable || !strings.Contains(e.Message, "runner laptop") {
		t.Errorf("a prompt to a session placed on the revoked runner: %v, want agent_unavailable naming laptop", err)
	}
	if code, out, _ := runSkein(t, env, "provision", "runner", "laptop", "--revoke"); code == 0 {
		t.Errorf("revoking laptop again succeeded: %s", out)
	}
}

// forgeRecord checks that a runner writes only for the sessions placed on
// it (issue 31, §3). With the cluster's runner back, a session not placed
// on laptop runs there; laptop's credential stores a record for it, on
// its own subject, naming the session's adapter process and its next
// record number, as if it were the adapter's next words. The owner drops
// it and logs so, and the session's next turn has none of it. (A record
// on another runner's subject is never stored: refusedRequests.)
func forgeRecord(t *testing.T, c *cluster.Cluster, probe *nats.Conn, cl *client.Client, js jetstream.JetStream) {
	t.Helper()
	ctx := t.Context()
	inside := c.Service(cluster.Runner + "-1")
	if err := inside.Start(); err != nil {
		t.Fatal(err)
	}
	if err := inside.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Open(ctx, "inside", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PromptText(ctx, "inside", "say first"); err != nil {
		t.Fatal(err)
	}
	att, err := lastRecord[events.AdapterAttached](ctx, js, "inside")
	if err != nil || att == nil || att.RunnerID == "laptop" {
		t.Fatalf("inside's adapter: %+v, %v; want one on the cluster's runner", att, err)
	}
	last, err := eventlog.Last(ctx, js, events.StreamIO, events.IOSubject("default", "inside", events.RunnerID(att.RunnerID)))
	if err != nil || last == nil {
		t.Fatalf("inside's last record: %v, %v", last, err)
	}
	no, _ := strconv.ParseUint(last.Header.Get(events.HeaderRecordNo), 10, 64)
	forged, err := events.Marshal(&events.AdapterUpdate{Kind: "agent_message_chunk",
		Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"forged by laptop"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	before := len(c.Service(cluster.Session + "-1").LogSince())
	m := nats.NewMsg(events.IOSubject("default", "inside", "laptop"))
	m.Data = forged
	m.Header.Set(events.HeaderRecord, "AdapterUpdate")
	m.Header.Set(events.HeaderProcessID, att.ProcessID)
	m.Header.Set(events.HeaderRecordNo, strconv.FormatUint(no+1, 10))
	if ack, err := probe.RequestMsg(m, 5*time.Second); err != nil || strings.Contains(string(ack.Data), "error") {
		t.Fatalf("laptop's record on its own subject was not stored: %v", err)
	}
	want := "dropped a record of a runner the session's adapter does not run on"
	if err := pollFor(ctx, "the owner to log the dropped record", func() bool {
		for line := range strings.Lines(c.Service(cluster.Session + "-1").LogSince()[before:]) {
			if strings.Contains(line, want) && strings.Contains(line, "laptop") {
				return true
			}
		}
		return false
	}); err != nil {
		t.Error(err)
	}
	resp, err := cl.PromptText(ctx, "inside", "say second")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(resp.Message), "forged") || !strings.Contains(string(resp.Message), "second") {
		t.Errorf("inside's turn after the forged record: %s", resp.Message)
	}
}

// leafsClosed adds up the leaf connections skein provision runner says
// it closed on each node.
func leafsClosed(out string) int {
	n := 0
	for _, m := range regexp.MustCompile(`: reloaded; (\d+) leaf connection`).FindAllStringSubmatch(out, -1) {
		i, _ := strconv.Atoi(m[1])
		n += i
	}
	return n
}

// awaitRefused waits, for at most 30 s, for the edge runner p to exit
// because the cluster refused its credential, and fails unless it said so.
func awaitRefused(t *testing.T, p *cluster.Proc) {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still runs 30 s after its credential was withdrawn", p.Name)
	}
	if log := p.LogSince(); !strings.Contains(log, "the cluster refused the runner's credential") {
		t.Errorf("%s exited without saying why:\n%s", p.Name, log)
	}
}

// clusterEnv is what make cluster's env file exports (cluster.Env), as
// the variables a command run after `source .cluster/env` has.
func clusterEnv(t testing.TB, c *cluster.Cluster) map[string]string {
	t.Helper()
	env := map[string]string{}
	for line := range strings.Lines(c.Env()) {
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "export "), "=")
		uq, err := strconv.Unquote(v)
		if !ok || err != nil {
			t.Fatalf("cluster.Env: %q", line)
		}
		env[k] = uq
	}
	return env
}

// startEdgeRunner starts skein runner --join as a process, with env and
// its data in dataDir, and waits until it joined.
func startEdgeRunner(t testing.TB, exe string, env map[string]string, dataDir string, args ...string) *cluster.Proc {
	t.Helper()
	p := startEdgeRunnerNoWait(t, exe, env, dataDir, args...)
	if err := p.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p
}

// edgeProbeLeaf returns a client of a leaf node that joins c as cred's
// runner, as skein runner's does (its inbox the runner's), once the link
// is up.
func edgeProbeLeaf(t *testing.T, c *cluster.Cluster, cred edgeusers.Credential) *nats.Conn {
	t.Helper()
	var urls []*url.URL
	for raw := range strings.SplitSeq(c.LeafURL(), ",") {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, u)
	}
	srv, err := server.NewServer(&server.Options{ServerName: "probe", DontListen: true, NoSigs: true, NoLog: true,
		LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: urls, Nkey: string(cred.Seed)}}}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("probe leaf not ready")
	}
	if err := pollFor(t.Context(), "the probe leaf's link", func() bool {
		return srv.NumLeafNodes() > 0 && srv.GlobalAccount().SubscriptionInterest(events.IOSubject("default", "x", events.RunnerID(cred.Name)))
	}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv), nats.CustomInboxPrefix(edgeusers.InboxPrefix(cred.Name)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// leafInfo is a hub's view of a leaf connection (/leafz).
type leafInfo struct {
	ID      uint64   `json:"id"`
	Name    string   `json:"name"`
	Account string   `json:"account"`
	Subs    []string `json:"subscriptions_list"`
}

// edgeLeafs returns the leaf connections the nodes hold.
func edgeLeafs(t *testing.T, c *cluster.Cluster) []leafInfo {
	t.Helper()
	var out []leafInfo
	for _, p := range c.MonitorPorts {
		var leafz struct {
			Leafs []leafInfo `json:"leafs"`
		}
		if err := getJSON(t.Context(), fmt.Sprintf("http://127.0.0.1:%d/leafz?subs=1", p), &leafz); err != nil {
			t.Fatalf("leafz: %v", err)
		}
		out = append(out, leafz.Leafs...)
	}
	return out
}

// edgeHubSubs returns the subscriptions the nodes hold of their leaf
// connections.
func edgeHubSubs(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	var out []string
	for _, l := range edgeLeafs(t, c) {
		out = append(out, l.Subs...)
	}
	return out
}

// rawLeaf opens a leaf connection to n1's leafnodes listener by hand,
// authenticated as connect says, and returns it once the hub took it
// (answered a PING), or the hub's refusal.
func rawLeaf(t *testing.T, c *cluster.Cluster, connect func(nonce string) map[string]any) (net.Conn, *bufio.Reader, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.LeafPorts[0]), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("the leafnodes listener's first line: %q, %v", line, err)
	}
	var info struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(connect(info.Nonce))
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", b); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, nil, err
		}
		switch {
		case strings.HasPrefix(line, "PONG"):
			return conn, r, nil
		case strings.HasPrefix(line, "-ERR"):
			return nil, nil, errors.New(strings.TrimSpace(line))
		}
	}
}

// rawLeafViolation connects as cred's runner by hand and subscribes (LS+)
// or publishes (LMSG) subject, as a leaf that ignores the permissions the
// hub sent it would; the hub must answer -ERR and close the connection.
func rawLeafViolation(t *testing.T, c *cluster.Cluster, cred edgeusers.Credential, kind, subject string) {
	t.Helper()
	kp, err := nkeys.FromSeed(cred.Seed)
	if err != nil {
		t.Fatal(err)
	}
	conn, r, err := rawLeaf(t, c, func(nonce string) map[string]any {
		sig, _ := kp.Sign([]byte(nonce))
		return map[string]any{"nkey": cred.Nkey, "sig": base64.RawURLEncoding.EncodeToString(sig), "name": "raw-probe"}
	})
	if err != nil {
		t.Fatalf("the hub refused a leaf connection with the edge credential: %v", err)
	}
	op := "LS+ " + subject + "\r\n"
	if kind == "Publish" {
		op = "LMSG " + subject + " 2\r\nhi\r\n"
	}
	if _, err := conn.Write([]byte(op + "PING\r\n")); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Errorf("%s %s by hand: the hub closed the connection (%v) without a -ERR", kind, subject, err)
			return
		}
		if strings.HasPrefix(line, "-ERR") {
			if !strings.Contains(line, "Permissions Violation for "+kind) {
				t.Errorf("%s %s by hand: %s", kind, subject, strings.TrimSpace(line))
			}
			// Then the hub closes it.
			if _, err := r.ReadString('\n'); err == nil {
				t.Errorf("%s %s by hand: the hub kept the connection after its -ERR", kind, subject)
			}
			return
		}
		if strings.HasPrefix(line, "PONG") {
			t.Errorf("%s %s by hand: the hub took it", kind, subject)
			return
		}
	}
}

// passwordLeaf tries a leaf connection as user, with its password.
func passwordLeaf(t *testing.T, c *cluster.Cluster, user string) error {
	t.Helper()
	_, _, err := rawLeaf(t, c, func(string) map[string]any {
		return map[string]any{"user": user, "pass": c.Passwords[user], "name": "password-probe"}
	})
	if err != nil && !regexp.MustCompile(`Authorization Violation`).MatchString(err.Error()) {
		t.Errorf("a leaf connection as %s: %v, want an authorization violation", user, err)
	}
	return err
}
