package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/cluster"
)

// TestClusterPermissions drives every operation Skein has through make
// cluster's topology, each service its own NATS user, so that
// startCluster's check (no node logged a permission violation of a
// service's user) proves accounts.conf grants each service what it uses.
// What each grant is for is commented in accounts.conf; this test is what
// keeps those grants sufficient. Over HTTP, through two gateways to two
// session service replicas (so that requests are forwarded to a session's
// owner): open, prompt (with a tool, a thought, a title, an idempotency
// key), a permission request answered (policy ask), the events stream,
// watch, history both ways, list, get, rename, config options read and
// set, capabilities, agent info, agents, an input request answered,
// commands, folders, files uploaded, read and cancelled, fork, discard,
// cancel, unload and the prompt that restores, delete. Besides: the session service replicas killed and
// restarted, so that a successor pings the dead owner's $SRV subject and
// evicts its lease; the ops user's $SRV pings, infos and stats (nats micro
// ls) answered by every service; and skein follow run as the read-only
// reader.
func TestClusterPermissions(t *testing.T) {
	exe := skeinBin(t)
	// An agent with config options that can be loaded again after unload
	// (session/load from its state dir): the restore tier that reads most.
	agents, state := filepath.Join(t.TempDir(), "agents.json"), t.TempDir()
	registry := map[string]any{"agents": []map[string]any{{
		"id": "perm", "command": exe,
		"args": []string{testAgentCommand, "--config-options=mode,model", "--load-session", "--state-dir=" + state},
		// The sessions it keeps live outside any one session's
		// directories, so the sandbox is told.
		"sandbox": map[string]any{"write": []string{state}},
	}}}
	b, _ := json.Marshal(registry)
	if err := os.WriteFile(agents, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Two replicas of the session service, so that requests are forwarded
	// to a session's owner, and two gateways.
	c := startCluster(t, cluster.Options{Sessions: 2, Gateways: 2, Args: map[string][]string{cluster.Runner: {"--adapter-runner.agents=" + agents}}})
	ctx := t.Context()
	ops, err := nats.Connect(c.URL(cluster.UserOps))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()

	// skein follow as the reader: namespace default's durable events, over
	// NATS, with no rights but the reader's.
	follow := startFollow(t, exe, c)

	base := c.HTTP[0] + "/v1/sessions/"
	must := func(method, url, body string, want int) []byte {
		t.Helper()
		code, out := clusterDo(ctx, c, method, url, body)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, strings.TrimPrefix(url, c.HTTP[0]), code, out, want)
		}
		return out
	}
	prompt := func(sid, text, key string) []byte {
		t.Helper()
		body := map[string]any{"content": []map[string]string{{"type": "text", "text": text}}}
		if key != "" {
			body["idempotencyKey"] = key
		}
		b, _ := json.Marshal(body)
		return must(http.MethodPost, base+sid+"/prompt", string(b), http.StatusOK)
	}

	must(http.MethodPut, base+"s1", `{"agent":"perm","permissionPolicy":"ask"}`, http.StatusOK)
	sse := openPermSSE(t, c, base+"s1/events?after=0")

	// A turn that asks for permission: answered through the gateway once
	// the request shows on the events stream.
	turn := asyncPermPrompt(ctx, c, base+"s1/prompt", "think planning\ntool call_1 Read README.md\npermission call_2\ntitle Permissions\nsay done")
	req := sse.await(t, func(ev permEvent) bool { return ev.Kind == "durable" && ev.Type == "permission_request" })
	if out := must(http.MethodPost, base+"s1/permissions/"+req.RequestID, `{"optionId":"allow"}`, http.StatusOK); !bytes.Contains(out, []byte(`"accepted"`)) {
		t.Fatalf("permission answer: %s", out)
	}
	if r := <-turn; r.code != http.StatusOK || !bytes.Contains(r.body, []byte("end_turn")) {
		t.Fatalf("prompt with a permission request: %d %s", r.code, r.body)
	}
	sse.await(t, func(ev permEvent) bool { return ev.Kind == "durable" && ev.Type == "permission_response" })

	// The same keyed prompt twice is one turn.
	first := prompt("s1", "say keyed", "key-1")
	if again := prompt("s1", "say keyed", "key-1"); !bytes.Equal(first, again) {
		t.Errorf("a keyed prompt sent again answered %s, first %s", again, first)
	}

	// Reads, through the other gateway.
	base2 := c.HTTP[1] + "/v1/sessions/"
	must(http.MethodGet, base2+"s1/watch?after=0&timeout=1s", "", http.StatusOK)
	var page struct {
		Events []struct {
			Sequence uint64 `json:"sequence"`
		} `json:"events"`
	}
	if err := json.Unmarshal(must(http.MethodGet, base2+"s1/history?limit=3", "", http.StatusOK), &page); err != nil || len(page.Events) == 0 {
		t.Fatalf("history: %v %+v", err, page)
	}
	must(http.MethodGet, fmt.Sprintf("%ss1/history?before=%d&limit=3", base2, page.Events[0].Sequence), "", http.StatusOK)
	must(http.MethodGet, base2+"s1/history?after=0&limit=100", "", http.StatusOK)
	must(http.MethodGet, c.HTTP[1]+"/v1/sessions?limit=10", "", http.StatusOK)
	must(http.MethodGet, base2+"s1", "", http.StatusOK)
	must(http.MethodGet, base2+"s1/capabilities", "", http.StatusOK)
	must(http.MethodGet, base2+"s1/agent-info", "", http.StatusOK)
	must(http.MethodGet, c.HTTP[1]+"/v1/agents", "", http.StatusOK)
	must(http.MethodPatch, base2+"s1", `{"title":"renamed"}`, http.StatusOK)
	must(http.MethodGet, base2+"s1/config", "", http.StatusOK)
	must(http.MethodPut, base+"s1/config/mode", `{"value":"plan"}`, http.StatusOK)

	// The operations products build on: an input request
	// answered, the cached commands, the workspace's folders, a file
	// uploaded, listed, read and another cancelled, a fork, and a discard.
	turn = asyncPermPrompt(ctx, c, base+"s1/prompt", `elicit {"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)
	in := sse.await(t, func(ev permEvent) bool { return ev.Kind == "durable" && ev.Type == "input_request" })
	must(http.MethodPost, base2+"s1/inputs/"+in.RequestID, `{"action":"accept","content":{"name":"Ada"}}`, http.StatusOK)
	if r := <-turn; r.code != http.StatusOK || !bytes.Contains(r.body, []byte("end_turn")) {
		t.Fatalf("prompt with an input request: %d %s", r.code, r.body)
	}
	must(http.MethodGet, base2+"s1/commands", "", http.StatusOK)
	must(http.MethodGet, c.HTTP[1]+"/v1/directories", "", http.StatusOK)
	var upload struct {
		TransferID string `json:"transferId"`
	}
	for _, commit := range []bool{true, false} {
		if err := json.Unmarshal(must(http.MethodPost, base+"s1/files/uploads", `{"name":"a.txt","size":2}`, http.StatusOK), &upload); err != nil {
			t.Fatal(err)
		}
		must(http.MethodPut, base2+"s1/files/uploads/"+upload.TransferID, `{"offset":0,"data":"aGk="}`, http.StatusOK)
		if commit {
			must(http.MethodPost, base+"s1/files/uploads/"+upload.TransferID+"/commit", `{}`, http.StatusOK)
		} else {
			must(http.MethodDelete, base+"s1/files/uploads/"+upload.TransferID, "", http.StatusOK)
		}
	}
	must(http.MethodGet, base2+"s1/files?path=.skein-attachments", "", http.StatusOK)
	if out := must(http.MethodGet, base2+"s1/files/content?path=.skein-attachments/a.txt", "", http.StatusOK); string(out) != "hi" {
		t.Errorf("the uploaded file reads %q, want \"hi\"", out)
	}
	must(http.MethodPost, base+"s1/fork", `{"sessionId":"s1-fork"}`, http.StatusOK)
	must(http.MethodPut, base+"s-eager", `{"agent":"perm"}`, http.StatusOK)
	must(http.MethodPost, base2+"s-eager/discard", `{}`, http.StatusOK)

	// Cancel a running turn.
	turn = asyncPermPrompt(ctx, c, base+"s1/prompt", "say slow\nsleep 60s")
	// The agent is in its turn once its first delta streams.
	sse.await(t, func(ev permEvent) bool {
		return ev.Kind == "ephemeral" && ev.Type == "agent_message_chunk" && strings.Contains(ev.raw, "slow")
	})
	if out := must(http.MethodPost, base+"s1/cancel", `{}`, http.StatusOK); !bytes.Contains(out, []byte("cancelled")) {
		t.Errorf("cancel: %s", out)
	}
	if r := <-turn; r.code != http.StatusOK || !bytes.Contains(r.body, []byte("cancelled")) {
		t.Errorf("the cancelled prompt: %d %s", r.code, r.body)
	}

	// The replica that does not own s1 forwarded to the one that does
	// (acp.owner.<replica>.<ns>.<op>): renames until it has, since the
	// queue group picks a replica at random.
	for i := 0; forwarded(t, ops) == 0; i++ {
		if i == 50 {
			t.Fatal("50 renames and no session request was forwarded to s1's owner")
		}
		must(http.MethodPatch, base+"s1", fmt.Sprintf(`{"title":"renamed %d"}`, i), http.StatusOK)
	}

	// kill -9 both session service replicas, one of which owns s1, and
	// start them again: the one that gets the next prompt finds s1's lease
	// held by a replica that no longer answers its $SRV ping, evicts it and
	// takes the session.
	sessions := []*cluster.Proc{c.Service(cluster.Session + "-1"), c.Service(cluster.Session + "-2")}
	for _, p := range sessions {
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range sessions {
		if err := p.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.AwaitRouted(ctx); err != nil {
		t.Fatal(err)
	}
	prompt("s1", "say after the restart", "")
	if !slices.ContainsFunc(sessions, func(p *cluster.Proc) bool {
		return strings.Contains(p.LogSince(), "evicted the lease of an owner that does not answer")
	}) {
		t.Error("the restarted session service took s1 without evicting the dead owner's lease")
	}

	// Unload, and a prompt that restores the session.
	must(http.MethodPost, base+"s1/unload", `{}`, http.StatusOK)
	if out := prompt("s1", "say restored", ""); !bytes.Contains(out, []byte("end_turn")) {
		t.Errorf("the prompt after unload: %s", out)
	}

	// A second session with the built-in agent, deleted while the first is
	// deleted too.
	must(http.MethodPut, base+"s2", `{"agent":"test"}`, http.StatusOK)
	prompt("s2", "hello", "")
	for _, sid := range []string{"s2", "s1"} {
		must(http.MethodDelete, base+sid, "", http.StatusOK)
		must(http.MethodGet, base+sid, "", http.StatusNotFound)
	}

	// nats micro ls, as the ops user: every micro service answers.
	for _, subject := range []string{"$SRV.PING", "$SRV.INFO", "$SRV.STATS"} {
		if got, want := microAnswers(t, ops, subject, 4), []string{"skein-adapter-runner", "skein-history", "skein-session", "skein-session"}; !slices.Equal(got, want) {
			t.Errorf("%s answered by %v, want %v", subject, got, want)
		}
	}

	// What the reader followed: s1's events, up to the restored turn's.
	follow.await(t, `"restored"`)
	if v := c.Violations(); len(serviceViolations(c)) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}

// forwarded returns how many requests the session service replicas have
// served for another replica (their -owned endpoints), as nats micro stats
// skein-session shows it.
func forwarded(t *testing.T, nc *nats.Conn) int {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.STATS.skein-session", inbox, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	for range 2 {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("$SRV.STATS.skein-session: %v", err)
		}
		var stats struct {
			Endpoints []struct {
				Name     string `json:"name"`
				Requests int    `json:"num_requests"`
			} `json:"endpoints"`
		}
		if err := json.Unmarshal(m.Data, &stats); err != nil {
			t.Fatal(err)
		}
		for _, e := range stats.Endpoints {
			if strings.HasSuffix(e.Name, "-owned") {
				n += e.Requests
			}
		}
	}
	return n
}

// microAnswers sends a nats micro discovery request (nats micro ls's) and
// returns the sorted names of the services that answered, once n have.
func microAnswers(t *testing.T, nc *nats.Conn, subject string, n int) []string {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var names []string
	for len(names) < n {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Errorf("%s: %v after %v", subject, err, names)
			break
		}
		var resp struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			t.Fatalf("%s: %v: %s", subject, err, m.Data)
		}
		names = append(names, resp.Name)
	}
	slices.Sort(names)
	return names
}

type permPromptResult struct {
	code int
	body []byte
}

// asyncPermPrompt sends a prompt and delivers its answer on the channel.
func asyncPermPrompt(ctx context.Context, c *cluster.Cluster, url, text string) <-chan permPromptResult {
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	ch := make(chan permPromptResult, 1)
	go func() {
		code, body := clusterDo(ctx, c, http.MethodPost, url, string(b))
		ch <- permPromptResult{code, body}
	}()
	return ch
}

// permEvent is one event of the gateway's events stream.
type permEvent struct {
	Kind      string `json:"-"` // the SSE event: durable, ephemeral, error
	Type      string `json:"type"`
	RequestID string `json:"requestId"`
	raw       string
}

// permStream reads a session's events stream until the test ends.
type permStream struct {
	events chan permEvent
	done   chan struct{}
}

func openPermSSE(t *testing.T, c *cluster.Cluster, url string) *permStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	s := &permStream{events: make(chan permEvent, 1024), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var kind string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev := permEvent{Kind: kind, raw: strings.TrimPrefix(line, "data: ")}
				_ = json.Unmarshal([]byte(ev.raw), &ev)
				select {
				case s.events <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// await returns the first event, durable or ephemeral, that ok accepts.
func (s *permStream) await(t *testing.T, ok func(permEvent) bool) permEvent {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-s.events:
			if ev.Kind == "error" {
				t.Fatalf("events stream: %s", ev.raw)
			}
			if ok(ev) {
				return ev
			}
		case <-s.done:
			t.Fatal("the events stream ended")
		case <-timeout:
			t.Fatal("no such event on the events stream in 30s")
		}
	}
}

// permFollow is skein follow, run as the reader user.
type permFollow struct {
	mu  sync.Mutex
	out bytes.Buffer
	cmd *exec.Cmd
}

func (f *permFollow) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.Write(p)
}

func (f *permFollow) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.String()
}

// startFollow starts skein follow as the reader of namespace default and
// returns once a node shows its subscription to the namespace's tail.
func startFollow(t *testing.T, exe string, c *cluster.Cluster) *permFollow {
	t.Helper()
	f := &permFollow{}
	f.cmd = exec.Command(exe, "follow")
	f.cmd.Env = append(os.Environ(), "NATS_URL="+c.URL(cluster.UserReader))
	f.cmd.Stdout = f
	var stderr bytes.Buffer
	f.cmd.Stderr = &stderr
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = f.cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = f.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("skein follow: stdout:\n%s\nstderr:\n%s", f.String(), stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !followSubscribed(t, c) {
		select {
		case <-exited:
			t.Fatalf("skein follow exited: %s", stderr.String())
		case <-time.After(50 * time.Millisecond): // polls the nodes' /connz
		}
		if time.Now().After(deadline) {
			t.Fatal("skein follow did not subscribe in 30s")
		}
	}
	return f
}

// followSubscribed reports whether a node has skein follow's subscription.
func followSubscribed(t *testing.T, c *cluster.Cluster) bool {
	for _, p := range c.MonitorPorts {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?subs=1", p))
		if err != nil {
			continue
		}
		var connz struct {
			Connections []struct {
				Name string   `json:"name"`
				Subs []string `json:"subscriptions_list"`
			} `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&connz)
		resp.Body.Close()
		if err != nil {
			t.Logf("connz: %v", err)
			continue
		}
		for _, conn := range connz.Connections {
			if conn.Name == "skein follow" && slices.Contains(conn.Subs, "acp.tail.default.*.ev") {
				return true
			}
		}
	}
	return false
}

// await waits until follow has printed a line holding s.
func (f *permFollow) await(t *testing.T, s string) {
	t.Helper()
	if err := pollFor(t.Context(), "skein follow to print "+s, func() bool { return strings.Contains(f.String(), s) }); err != nil {
		t.Fatalf("%v:\n%s", err, f.String())
	}
}

// TestClusterRefusals is the other half of least privilege: each
// service's user is refused what belongs to another service or to the
// operator: writing another's records, reading another's replies,
// serving another's requests, creating, deleting or purging streams. It
// runs its own cluster without startCluster's violation check, since
// every probe here is one.
func TestClusterRefusals(t *testing.T) {
	c, err := cluster.Start(t.Context(), clusterOptions(t, cluster.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)

	type probes struct{ publish, subscribe []string }
	anyStream := []string{"$JS.API.STREAM.CREATE.X", "$JS.API.STREAM.DELETE.ACP_LOG", "$JS.API.STREAM.UPDATE.ACP_LOG", "$JS.API.CONSUMER.CREATE.ACP_LOG.c"}
	refused := map[string]probes{
		cluster.UserGateway: {
			publish:   append([]string{"acp.log.default.s1.ev", "acp.live.default.s1", "acp.runner.r1.create", "acp.owner.x.default.prompt", "$KV.ACP_SESSIONS.default.s1", "$JS.API.DIRECT.GET.ACP_IO", "$JS.API.STREAM.PURGE.ACP_LOG"}, anyStream...),
			subscribe: []string{"acp.api.default.prompt", "acp.iotail.>", "acp.runner.>", "_INBOX.session.>", "_INBOX.>"},
		},
		cluster.UserSession: {
			publish:   append([]string{"acp.io.default.s1", "$KV.ACP_RUNNERS.r1", "acp.api.default.read_history", "$JS.API.STREAM.PURGE.KV_ACP_SESSIONS"}, anyStream...),
			subscribe: []string{"acp.runner.>", "acp.io.>", "_INBOX.gateway.>", "$SRV.PING.skein-history", "acp.api.default.read_history", "acp.api.*.list_agents"},
		},
		cluster.UserRunner: {
			publish:   append([]string{"acp.log.default.s1.ev", "acp.live.default.s1", "acp.api.default.prompt", "$KV.ACP_SESSIONS.default.s1", "$KV.ACP_OWNERS.default.s1", "$JS.API.DIRECT.GET.ACP_LOG", "$JS.API.STREAM.PURGE.ACP_IO"}, anyStream...),
			subscribe: []string{"acp.api.default.prompt", "acp.tail.>", "acp.iotail.>", "_INBOX.session.>"},
		},
		cluster.UserHistory: {
			publish:   append([]string{"acp.log.default.s1.ev", "acp.api.default.prompt", "acp.runner.r1.create", "$KV.ACP_SESSIONS.default.s1", "$JS.API.DIRECT.GET.ACP_IO", "$JS.API.STREAM.PURGE.ACP_LOG"}, anyStream...),
			subscribe: []string{"acp.iotail.>", "acp.owner.>", "acp.tail.>", "_INBOX.gateway.>", "acp.api.default.prompt", "acp.api.*.delete_session"},
		},
		cluster.UserNotify: {
			publish:   append([]string{"acp.log.default.s1.ev", "acp.api.default.prompt", "acp.runner.r1.create", "$KV.ACP_WEBHOOKS.default.wh_x", "$KV.ACP_SESSIONS.default.s1", "$JS.API.STREAM.PURGE.ACP_NOTIFY", "$JS.ACK.ACP_IO.c.1.1.1.1.1.1"}, anyStream...),
			subscribe: []string{"acp.tail.>", "acp.iotail.>", "acp.api.default.prompt", "_INBOX.gateway.>", "acp.notify.>"},
		},
	}
	for user, p := range refused {
		t.Run(user, func(t *testing.T) {
			errs := make(chan error, 64)
			nc, err := nats.Connect(c.URL(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			// Each probe, then the server's refusal of exactly it.
			expect := func(kind, subject string) {
				t.Helper()
				want := fmt.Sprintf("Permissions Violation for %s to %q", kind, subject)
				timeout := time.After(10 * time.Second)
				for {
					select {
					case err := <-errs:
						if strings.Contains(err.Error(), want) {
							return
						}
					case <-timeout:
						t.Errorf("%s: %s %s was not refused", user, kind, subject)
						return
					}
				}
			}
			for _, subject := range p.publish {
				if err := nc.Publish(subject, []byte("{}")); err != nil {
					t.Fatal(err)
				}
				expect("Publish", subject)
			}
			for _, subject := range p.subscribe {
				if _, err := nc.SubscribeSync(subject); err != nil {
					t.Fatal(err)
				}
				expect("Subscription", subject)
			}
		})
	}
}
