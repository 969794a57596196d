package acpbridge_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"skein.dev/internal/acpbridge"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

func TestMain(m *testing.M) { stacktest.Main(m, nil) }

const token = "acpbridge-test-token"

// startSkein runs the four services as skein does, the gateway on a
// loopback port taking token.
func startSkein(t *testing.T) string {
	t.Helper()
	st := stacktest.Start(t, stacktest.AsSkein(testutil.TempDir(t), func(c *stacktest.Config) {
		c.Gateway.Auth.Tokens = []gateway.Token{{SHA256: gateway.HashToken(token), Principal: "dev",
			Namespaces: []string{string(events.DefaultNamespace)}, Role: gateway.RoleAdmin}}
	}))
	return st.URL()
}

// pipe is a transport whose client is the test: what the test sends the
// bridge reads, and what the bridge writes the test receives.
type pipe struct {
	in   chan []byte
	out  chan json.RawMessage
	once sync.Once
	done chan struct{}
}

func newPipe() *pipe {
	return &pipe{in: make(chan []byte), out: make(chan json.RawMessage, 4096), done: make(chan struct{})}
}

func (p *pipe) Read(ctx context.Context) ([]byte, error) {
	select {
	case m := <-p.in:
		return m, nil
	case <-p.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipe) Write(ctx context.Context, msg []byte) error {
	p.out <- json.RawMessage(append([]byte(nil), msg...))
	return nil
}

func (p *pipe) close() { p.once.Do(func() { close(p.done) }) }

// client is a test's side of one bridge connection.
type client struct {
	t      *testing.T
	p      *pipe
	nextID int
	seen   []map[string]any // every message the bridge sent, in order
	served chan error
}

func connect(t *testing.T, url string) *client {
	return connectWith(t, url, map[string]any{})
}

// connectWith is connect for a client of the capabilities caps.
func connectWith(t *testing.T, url string, caps map[string]any) *client {
	t.Helper()
	p := newPipe()
	c := &client{t: t, p: p, served: make(chan error, 1)}
	cfg := acpbridge.Config{BaseURL: url, Header: http.Header{"Authorization": {"Bearer " + token}}, Agent: "test"}
	go func() { c.served <- acpbridge.Serve(context.Background(), cfg, p) }()
	t.Cleanup(func() {
		p.close()
		<-c.served
	})
	c.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": caps})
	return c
}

// send writes one message to the bridge.
func (c *client) send(m any) {
	b, err := json.Marshal(m)
	if err != nil {
		c.t.Fatal(err)
	}
	c.p.in <- b
}

// next returns the bridge's next message.
func (c *client) next() map[string]any {
	c.t.Helper()
	select {
	case raw := <-c.p.out:
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			c.t.Fatalf("the bridge wrote %s: %v", raw, err)
		}
		c.seen = append(c.seen, m)
		return m
	case <-time.After(testutil.PollTimeout):
		c.t.Fatal("no message from the bridge")
		return nil
	}
}

// call sends a request and returns its response, keeping every message
// before it in seen.
func (c *client) call(method string, params any) map[string]any {
	c.t.Helper()
	c.nextID++
	id := float64(c.nextID)
	c.send(map[string]any{"jsonrpc": "2.0", "id": c.nextID, "method": method, "params": params})
	for {
		m := c.next()
		if m["id"] == id && m["method"] == nil {
			return m
		}
	}
}

// result is a response's result; a response with an error fails the test.
func (c *client) result(resp map[string]any) map[string]any {
	c.t.Helper()
	r, ok := resp["result"].(map[string]any)
	if !ok {
		c.t.Fatalf("response %v, want a result", resp)
	}
	return r
}

// text is the text of the agent's message chunks among the updates seen,
// joined.
func text(ms []map[string]any) string {
	var b strings.Builder
	for _, m := range ms {
		if m["method"] != "session/update" {
			continue
		}
		u := m["params"].(map[string]any)["update"].(map[string]any)
		if u["sessionUpdate"] == "agent_message_chunk" {
			b.WriteString(u["content"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

// A prompt answers once every update of its turn went to the client: the
// streamed message is whole before the answer, once, deltas and stored
// message together.
func TestPromptAnswersAfterItsUpdates(t *testing.T) {
	url := startSkein(t)
	c := connect(t, url)
	sid := c.result(c.call("session/new", map[string]any{"cwd": "", "mcpServers": []any{}}))["sessionId"].(string)
	c.seen = nil
	resp := c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "chunks 5\nplan a | b\nsay done"}}})
	if got := c.result(resp)["stopReason"]; got != "end_turn" {
		t.Fatalf("stopReason %v", got)
	}
	if got, want := text(c.seen), "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5 done"; got != want {
		t.Errorf("the client's text before the answer %q, want %q", got, want)
	}
}

// session/load replays the stored updates in log order, each with its
// place; with _meta.skein.after, only those after it.
func TestLoadReplaysInLogOrder(t *testing.T) {
	url := startSkein(t)
	a := connect(t, url)
	sid := a.result(a.call("session/new", map[string]any{"cwd": "", "mcpServers": []any{}}))["sessionId"].(string)
	a.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "say one"}}})
	a.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "say two"}}})

	b := connect(t, url)
	b.seen = nil
	b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": "", "mcpServers": []any{}}))
	var seqs []float64
	var kinds []string
	for _, m := range b.seen {
		if m["method"] != "session/update" {
			continue
		}
		u := m["params"].(map[string]any)["update"].(map[string]any)
		meta, _ := u["_meta"].(map[string]any)
		seq, ok := meta["skein/sequence"].(float64)
		if !ok {
			t.Fatalf("a replayed update without its sequence: %v", u)
		}
		seqs = append(seqs, seq)
		if k := u["sessionUpdate"].(string); k == "user_message_chunk" || k == "agent_message_chunk" {
			kinds = append(kinds, k)
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("replayed sequences %v: not in log order", seqs)
		}
	}
	if got := strings.Join(kinds, " "); got != "user_message_chunk agent_message_chunk user_message_chunk agent_message_chunk" {
		t.Errorf("replayed messages %s", got)
	}
	if got := text(b.seen); got != "onetwo" {
		t.Errorf("replayed text %q", got)
	}

	// After the first turn's last update: the second turn alone.
	c := connect(t, url)
	c.seen = nil
	after := seqs[len(seqs)/2-1]
	c.result(c.call("session/load", map[string]any{"sessionId": sid, "cwd": "", "mcpServers": []any{}, "_meta": map[string]any{"skein": map[string]any{"after": after}}}))
	if got := text(c.seen); got != "two" {
		t.Errorf("replay after %v: text %q, want the second turn's", after, got)
	}
}

// A client that goes away mid-turn leaves the turn to run on, and a new
// client's load shows it whole.
func TestDisconnectMidTurn(t *testing.T) {
	url := startSkein(t)
	p := newPipe()
	served := make(chan error, 1)
	cfg := acpbridge.Config{BaseURL: url, Header: http.Header{"Authorization": {"Bearer " + token}}, Agent: "test"}
	go func() { served <- acpbridge.Serve(context.Background(), cfg, p) }()
	a := &client{t: t, p: p, served: served}
	sid := a.result(a.call("session/new", map[string]any{"cwd": "", "mcpServers": []any{}}))["sessionId"].(string)
	a.send(map[string]any{"jsonrpc": "2.0", "id": 99, "method": "session/prompt", "params": map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": "chunks 1\nsleep 1s\nsay finished"}}}})
	for !strings.Contains(text(a.seen), "chunk 1") {
		a.next()
	}
	p.close()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	b := connect(t, url)
	testutil.Eventually(t, "the turn finished after its client left", func() bool {
		b.seen = nil
		b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": "", "mcpServers": []any{}}))
		return strings.Contains(text(b.seen), "finished")
	})
}

// An agent's input request goes to a client that takes forms as
// elicitation/create; its answer is the session's, and the turn goes on
// with it. A client that takes no forms is not asked.
func TestElicitationToAClientThatTakesForms(t *testing.T) {
	url := startSkein(t)
	forms := connectWith(t, url, map[string]any{"elicitation": map[string]any{"form": map[string]any{}}})
	sid := forms.result(forms.call("session/new", map[string]any{"cwd": "", "mcpServers": []any{}}))["sessionId"].(string)
	plain := connect(t, url)
	plain.result(plain.call("session/resume", map[string]any{"sessionId": sid, "cwd": ""}))

	forms.send(map[string]any{"jsonrpc": "2.0", "id": 77, "method": "session/prompt", "params": map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": `elicit "Your name?" {"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}` + "\nsay thanks"}}}})
	var ask map[string]any
	for ask == nil {
		if m := forms.next(); m["method"] == "elicitation/create" {
			ask = m
		}
	}
	params := ask["params"].(map[string]any)
	if params["sessionId"] != sid || params["message"] != "Your name?" || params["mode"] != "form" {
		t.Errorf("elicitation/create params %v", params)
	}
	forms.send(map[string]any{"jsonrpc": "2.0", "id": ask["id"], "result": map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}})
	for {
		m := forms.next()
		if m["id"] == float64(77) && m["method"] == nil {
			if got := forms.result(m)["stopReason"]; got != "end_turn" {
				t.Fatalf("stopReason %v", got)
			}
			break
		}
	}
	if got := text(forms.seen); !strings.Contains(got, `input: accept {"name":"Ada"}`) || !strings.Contains(got, "thanks") {
		t.Errorf("the turn's text %q: the answer did not reach the agent", got)
	}
	// The other client's stream passed the request once it shows the
	// turn's last words.
	for !strings.Contains(text(plain.seen), "thanks") {
		plain.next()
	}
	for _, m := range plain.seen {
		if m["method"] == "elicitation/create" {
			t.Errorf("a client that takes no forms was asked: %v", m)
		}
	}
}
