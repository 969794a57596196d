package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
	"skein.dev/services/gateway/gatewaytest"
)

func TestMain(m *testing.M) { testutil.Main(m, nil) }

const ns = events.DefaultNamespace

// env is a real gateway, served over HTTP, in front of the real history
// service and the fake session service (gatewaytest) on an embedded NATS
// server.
type env struct {
	t       *testing.T
	backend *gatewaytest.Backend
	url     string
}

func newEnv(t *testing.T, opts ...gatewaytest.Option) *env {
	t.Helper()
	srv := natstest.Run(t)
	nc := natstest.Connect(t, srv)
	backend := gatewaytest.Start(t, nc, opts...)
	cfg := gateway.DefaultConfig()
	gw, err := gateway.New(cfg, slog.New(slog.NewTextHandler(t.Output(), nil)), nc, nil)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	hs := httptest.NewServer(gw.Handler())
	t.Cleanup(hs.Close)
	return &env{t: t, backend: backend, url: hs.URL}
}

// result is what one command printed and returned.
type result struct {
	stdout, stderr string
	err            error
}

// run runs `skein args...` with SKEIN_URL pointing at the gateway.
func (e *env) run(ctx context.Context, stdin string, args ...string) result {
	e.t.Helper()
	var stdout, stderr testutil.Buffer
	err := execute(ctx, map[string]string{cli.EnvServer: e.url}, stdin, &stdout, &stderr, args...)
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func execute(ctx context.Context, env map[string]string, stdin string, stdout, stderr io.Writer, args ...string) error {
	return executeWith(ctx, env, strings.NewReader(stdin), stdout, stderr, args...)
}

// executeWith runs `skein args...` with stdin as its standard input.
func executeWith(ctx context.Context, env map[string]string, stdin io.Reader, stdout, stderr io.Writer, args ...string) error {
	root := &cobra.Command{Use: "skein", SilenceErrors: true, SilenceUsage: true}
	root.AddCommand(cli.Commands(func(k string) string { return env[k] }, stdout, stderr)...)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stderr)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	apiErr, ok := errors.AsType[*cli.APIError](err)
	if !ok || apiErr.Code != code {
		t.Fatalf("err = %v, want an *APIError with code %s", err, code)
	}
}

const echoReply = `[tool] Read README.md: pending
[tool] Read README.md: completed
[plan]
  [x] Say hello
Hello, world
`

func TestPromptPrintsTheReplyLive(t *testing.T) {
	e := newEnv(t)
	r := e.run(t.Context(), "", "prompt", "hi", "there")
	if r.err != nil {
		t.Fatalf("prompt: %v\nstderr: %s", r.err, r.stderr)
	}
	if r.stdout != echoReply || r.stderr != "" {
		t.Errorf("prompt printed\n%s\nstderr %q, want\n%s", r.stdout, r.stderr, echoReply)
	}
	// The session did not exist: prompt opened it with the default agent.
	info, ok := e.backend.Session(ns, "main")
	if !ok || info.Agent != cli.DefaultAgent {
		t.Errorf("session main = %+v, %v; want it opened with agent %s", info, ok, cli.DefaultAgent)
	}
	req, _ := e.backend.LastRequest(events.OpPrompt).(*events.AcpPromptRequest)
	if req == nil || string(req.Content) != `[{"text":"hi there","type":"text"}]` || req.IdempotencyKey != nil {
		t.Errorf("prompt request = %+v, want one text block \"hi there\" without a key", req)
	}

	// A second prompt prints only its own turn, from the stdin form.
	r = e.run(t.Context(), "again\n", "prompt", "-", "--idempotency-key", "k2")
	if r.err != nil || r.stdout != echoReply {
		t.Errorf("second prompt = %v, printed\n%s\nwant\n%s", r.err, r.stdout, echoReply)
	}
	req, _ = e.backend.LastRequest(events.OpPrompt).(*events.AcpPromptRequest)
	if req == nil || string(req.Content) != `[{"text":"again\n","type":"text"}]` || req.IdempotencyKey == nil || *req.IdempotencyKey != "k2" {
		t.Errorf("prompt request = %+v, want the stdin text and key k2", req)
	}
}

// TestPromptStreamsBeforeTheTurnEnds: text is printed while the turn still
// runs, not when the prompt returns.
func TestPromptStreamsBeforeTheTurnEnds(t *testing.T) {
	e := newEnv(t)
	var stdout, stderr testutil.Buffer
	streamed := func() bool { return strings.Contains(stdout.String(), "Thinking") }
	e.backend.OnPrompt(func(ctx context.Context, turn *gatewaytest.Turn) (*events.AcpPromptResponse, error) {
		after, err := turn.Append(gatewaytest.TextChunk("user_message_chunk", "hi"))
		if err != nil {
			return nil, err
		}
		if err := turn.Delta(after, gatewaytest.TextChunk("agent_message_chunk", "Thinking")); err != nil {
			return nil, err
		}
		// The turn goes on until the client has shown the delta.
		for !streamed() {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err := turn.Delta(after, gatewaytest.TextChunk("agent_message_chunk", "... done")); err != nil {
			return nil, err
		}
		if _, err := turn.Append(gatewaytest.TextChunk("agent_message_chunk", "Thinking... done")); err != nil {
			return nil, err
		}
		return &events.AcpPromptResponse{SessionID: "main", StopReason: "end_turn"}, nil
	})
	err := execute(t.Context(), map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr, "prompt", "hi")
	if err != nil || stdout.String() != "Thinking... done\n" {
		t.Errorf("prompt = %v, printed %q, want %q", err, stdout.String(), "Thinking... done\n")
	}
}

// TestPromptCompletesFromTheDurableMessage: deltas cover only part of the
// reply; the rest is printed from the durable completed message.
func TestPromptCompletesFromTheDurableMessage(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "s1", "other")
	e.backend.OnPrompt(func(_ context.Context, turn *gatewaytest.Turn) (*events.AcpPromptResponse, error) {
		after, err := turn.Append(`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm"}}`)
		if err != nil {
			return nil, err
		}
		// Deltas of half the message, then the durable message.
		if err := turn.Delta(after, gatewaytest.TextChunk("agent_message_chunk", "Partial ")); err != nil {
			return nil, err
		}
		if _, err := turn.Append(gatewaytest.TextChunk("agent_message_chunk", "Partial reply.\nSecond line.")); err != nil {
			return nil, err
		}
		return &events.AcpPromptResponse{SessionID: "s1", StopReason: "max_tokens"}, nil
	})
	r := e.run(t.Context(), "", "prompt", "-s", "s1", "go")
	if r.err != nil {
		t.Fatalf("prompt: %v", r.err)
	}
	if want := "Partial reply.\nSecond line.\n"; r.stdout != want {
		t.Errorf("prompt printed %q, want %q", r.stdout, want)
	}
	if want := "stop reason: max_tokens\n"; r.stderr != want {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
	// The existing session was used, not reopened with the default agent.
	if n := e.backend.Calls(events.OpOpenSession); n != 0 {
		t.Errorf("open_session calls = %d, want 0", n)
	}
}

func TestPromptErrors(t *testing.T) {
	e := newEnv(t)
	r := e.run(t.Context(), "", "prompt", "fail")
	wantCode(t, r.err, "adapter_exited")
	if !strings.Contains(r.err.Error(), "the demo agent exited") {
		t.Errorf("err = %v, want the gateway's message", r.err)
	}
	wantCode(t, e.run(t.Context(), "", "prompt", "-s", "bad.id", "hi").err, "invalid_session_id")
	wantCode(t, e.run(t.Context(), "", "prompt", "-s", "s2", "--agent", "nope", "hi").err, "unknown_agent")
	if r := e.run(t.Context(), "  \n", "prompt", "-"); r.err == nil {
		t.Error("an empty prompt succeeded")
	}
}

func TestOpen(t *testing.T) {
	e := newEnv(t)
	r := e.run(t.Context(), "", "open", "-s", "work", "--cwd", "/src", "--permission-policy", "ask")
	if r.err != nil || r.stdout != "session work is open\n" {
		t.Fatalf("open = %v, printed %q", r.err, r.stdout)
	}
	req, _ := e.backend.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
	if req == nil || req.Agent != "demo" || req.Cwd == nil || *req.Cwd != "/src" ||
		req.PermissionPolicy == nil || *req.PermissionPolicy != "ask" || *req.SessionID != "work" {
		t.Errorf("open request = %+v, want agent demo, cwd /src, policy ask, session work", req)
	}
	wantCode(t, e.run(t.Context(), "", "open", "-s", "work", "--agent", "other").err, "session_conflict")
	wantCode(t, e.run(t.Context(), "", "open", "--permission-policy", "yolo").err, "invalid_request")
}

func TestServerFlagWinsOverEnvironment(t *testing.T) {
	e := newEnv(t)
	var stdout, stderr testutil.Buffer
	err := execute(t.Context(), map[string]string{cli.EnvServer: "http://127.0.0.1:1"}, "", &stdout, &stderr, "open", "--server", e.url+"/")
	if err != nil || stdout.String() != "session main is open\n" {
		t.Fatalf("open --server = %v, printed %q", err, stdout.String())
	}
	// And without the flag, the (unreachable) environment is used.
	if err := execute(t.Context(), map[string]string{cli.EnvServer: "http://127.0.0.1:1"}, "", &stdout, &stderr, "open"); err == nil {
		t.Error("open against SKEIN_URL=http://127.0.0.1:1 succeeded")
	}
}

func TestHistory(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "main", "demo")
	s1 := e.backend.Append(ns, "main", gatewaytest.TextChunk("user_message_chunk", "hi"))
	s2 := e.backend.Append(ns, "main", `{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Run tests","status":"pending"}`)
	s3 := e.backend.Append(ns, "main", gatewaytest.TextChunk("agent_message_chunk", "Done.\nAll green."))

	r := e.run(t.Context(), "", "history", "--json")
	if r.err != nil {
		t.Fatalf("history --json: %v", r.err)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("history --json printed %d lines, want 3:\n%s", len(lines), r.stdout)
	}
	for i, seq := range []uint64{s1, s2, s3} {
		var ev struct {
			Sequence   uint64 `json:"sequence"`
			Durability string `json:"durability"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &ev); err != nil || ev.Sequence != seq || ev.Durability != "durable" {
			t.Errorf("line %d = %s, want durable event %d", i, lines[i], seq)
		}
	}

	r = e.run(t.Context(), "", "history", "--after", strconv.FormatUint(s1, 10), "--limit", "1")
	if r.err != nil {
		t.Fatalf("history: %v", r.err)
	}
	fields := strings.Fields(r.stdout)
	if want := ` tool_call c1 "Run tests" pending`; len(fields) != 7 || fields[0] != strconv.FormatUint(s2, 10) ||
		!strings.HasSuffix(r.stdout, want+"\n") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("history --after %d --limit 1 printed %q, want the tool call on one line ending in %q", s1, r.stdout, want)
	}
	r = e.run(t.Context(), "", "history", "--before", strconv.FormatUint(s3+1, 10), "--limit", "1")
	if want := `"Done.\nAll green."`; r.err != nil || !strings.HasSuffix(strings.TrimSpace(r.stdout), want) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("history --before = %v, printed %q, want one line ending in %s", r.err, r.stdout, want)
	}
	if r := e.run(t.Context(), "", "history", "--after", "1", "--before", "2"); r.err == nil {
		t.Error("history --after --before succeeded")
	}
	wantCode(t, e.run(t.Context(), "", "history", "-s", "nobody").err, "session_not_found")
}

func TestEventsFollowsUntilInterrupted(t *testing.T) {
	e := newEnv(t)
	e.backend.CreateSession(ns, "main", "demo")
	s1 := e.backend.Append(ns, "main", gatewaytest.TextChunk("user_message_chunk", "one"))
	s2 := e.backend.Append(ns, "main", gatewaytest.TextChunk("agent_message_chunk", "two"))

	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(ctx, map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr, "events", "--after", strconv.FormatUint(s1, 10))
	}()
	testutil.Eventually(t, "the backfilled event", func() bool { return strings.Count(stdout.String(), "\n") == 1 })
	e.backend.Delta(ns, "main", s2, gatewaytest.TextChunk("agent_message_chunk", "th"))
	s3 := e.backend.Append(ns, "main", gatewaytest.TextChunk("agent_message_chunk", "three"))
	testutil.Eventually(t, "the live events", func() bool { return strings.Count(stdout.String(), "\n") == 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events = %v after interrupt, want nil", err)
	}
	var got []string
	for line := range strings.SplitSeq(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
		var ev struct {
			Sequence      uint64 `json:"sequence"`
			AfterSequence uint64 `json:"afterSequence"`
			Durability    string `json:"durability"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, ev.Durability+"@"+strconv.FormatUint(ev.Sequence+ev.AfterSequence, 10))
	}
	want := []string{"durable@" + strconv.FormatUint(s2, 10), "ephemeral@" + strconv.FormatUint(s2, 10), "durable@" + strconv.FormatUint(s3, 10)}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events printed %v, want %v", got, want)
	}

	wantCode(t, e.run(t.Context(), "", "events", "-s", "nobody").err, "session_not_found")
}

// TestEventsResumesWhenUnavailable: an "unavailable" error event (the
// gateway stopping, or the client falling behind) makes the command resume
// after the last durable event it printed. A hand-written server stands in
// for the gateway, which cannot be made to do that on cue.
func TestEventsResumesWhenUnavailable(t *testing.T) {
	var (
		mu      sync.Mutex
		cursors []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sessions/main/events" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		cursors = append(cursors, r.Header.Get("Last-Event-ID"))
		n := len(cursors)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1:
			io.WriteString(w, "id: 7\nevent: durable\ndata: {\"sequence\":7,\n: ok\ndata: \"durability\":\"durable\"}\n\n")
			io.WriteString(w, "event: error\ndata: {\"error\":{\"code\":\"unavailable\",\"message\":\"fell behind\"}}\n\n")
		case 2:
			io.WriteString(w, ": keepalive\n\nid: 9\nevent: durable\ndata: {\"sequence\":9,\"durability\":\"durable\"}\n\n")
			io.WriteString(w, "event: error\ndata: {\"error\":{\"code\":\"session_not_found\",\"message\":\"deleted\"}}\n\n")
		}
	}))
	defer srv.Close()
	var stdout, stderr testutil.Buffer
	err := execute(t.Context(), nil, "", &stdout, &stderr, "events", "--server", srv.URL, "--after", "5")
	wantCode(t, err, "session_not_found")
	want := "{\"sequence\":7,\"durability\":\"durable\"}\n{\"sequence\":9,\"durability\":\"durable\"}\n"
	if stdout.String() != want {
		t.Errorf("events printed %q, want %q", stdout.String(), want)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(cursors, ",") != "5,7" {
		t.Errorf("Last-Event-ID of the connections = %v, want [5 7]", cursors)
	}
}

// TestEventsReportsStreamErrors: an error event other than unavailable
// ends the command with that error.
func TestEventsReportsStreamErrors(t *testing.T) {
	e := newEnv(t, gatewaytest.WithMaxEventsPerSession(2))
	e.backend.CreateSession(ns, "main", "demo")
	e.backend.Append(ns, "main", gatewaytest.TextChunk("user_message_chunk", "one"))
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(t.Context(), map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr, "events")
	}()
	testutil.Eventually(t, "the first event", func() bool { return strings.Count(stdout.String(), "\n") == 1 })
	// Records the stream misses and history prunes: a gap it cannot fill.
	e.backend.WithoutTail(func() {
		for _, text := range []string{"two", "three", "four"} {
			e.backend.Append(ns, "main", gatewaytest.TextChunk("user_message_chunk", text))
		}
	})
	e.backend.Append(ns, "main", gatewaytest.TextChunk("user_message_chunk", "five"))
	select {
	case err := <-done:
		wantCode(t, err, "cursor_expired")
	case <-time.After(10 * time.Second):
		t.Fatal("events still running after the stream failed")
	}
}

func TestAgents(t *testing.T) {
	e := newEnv(t)
	r := e.run(t.Context(), "", "agents")
	if want := "demo\tinstalled\t/usr/local/bin/skein-demo-agent\nother\tnot installed\tother-agent\n"; r.err != nil || r.stdout != want {
		t.Errorf("agents = %v, printed %q, want %q", r.err, r.stdout, want)
	}

	r = e.run(t.Context(), "", "agents", "--json")
	if r.err != nil {
		t.Fatalf("agents --json: %v", r.err)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	want := gatewaytest.DefaultAgents()
	if len(lines) != len(want) {
		t.Fatalf("agents --json printed %d lines, want %d:\n%s", len(lines), len(want), r.stdout)
	}
	for i, w := range want {
		var got struct {
			ID                string `json:"id"`
			Installed         bool   `json:"installed"`
			AdapterEntrypoint string `json:"adapterEntrypoint"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil || got.ID != w.ID || got.Installed != w.Installed || got.AdapterEntrypoint != w.AdapterEntrypoint {
			t.Errorf("line %d = %s, want %+v", i, lines[i], w)
		}
	}

	e.backend.SetAgents(nil)
	if r := e.run(t.Context(), "", "agents"); r.err != nil || r.stdout != "" {
		t.Errorf("agents without agents = %v, printed %q, want nothing", r.err, r.stdout)
	}
	if r := e.run(t.Context(), "", "agents", "-s", "main"); r.err == nil {
		t.Error("agents -s succeeded: the command addresses no session")
	}
	e.backend.StopHistory()
	wantCode(t, e.run(t.Context(), "", "agents").err, "unavailable")
}
