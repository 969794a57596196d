package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

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
	cli.MarkUsage(root)
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

// toolTurn is a test agent script of a turn with a tool call, a plan and
// a message, and toolReply what prompt prints of it.
const toolTurn = "tool call_1 Read README.md\nplan [x] Say hello\nsay Hello, world"

const toolReply = `[tool] Read README.md: pending
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
	// The test agent echoes a prompt that is no script.
	if want := "echo: hi there\n"; r.stdout != want || r.stderr != "" {
		t.Errorf("prompt printed %q, stderr %q, want %q", r.stdout, r.stderr, want)
	}
	// The session did not exist: prompt opened it with the default agent.
	open, _ := e.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
	if open == nil || open.Agent != cli.DefaultAgent || open.SessionID == nil || *open.SessionID != "main" {
		t.Errorf("open request = %+v, want session main opened with agent %s", open, cli.DefaultAgent)
	}
	req, _ := e.LastRequest(events.OpPrompt).(*events.AcpPromptRequest)
	if req == nil || string(req.Content) != `[{"text":"hi there","type":"text"}]` || req.IdempotencyKey != nil {
		t.Errorf("prompt request = %+v, want one text block \"hi there\" without a key", req)
	}

	// A second prompt prints only its own turn, from the stdin form.
	r = e.run(t.Context(), toolTurn+"\n", "prompt", "-", "--idempotency-key", "k2")
	if r.err != nil || r.stdout != toolReply {
		t.Errorf("second prompt = %v, printed\n%s\nwant\n%s", r.err, r.stdout, toolReply)
	}
	req, _ = e.LastRequest(events.OpPrompt).(*events.AcpPromptRequest)
	if req == nil || !strings.Contains(string(req.Content), `"text":"tool call_1`) || req.IdempotencyKey == nil || *req.IdempotencyKey != "k2" {
		t.Errorf("prompt request = %+v, want the stdin text and key k2", req)
	}
	if n := e.Calls(events.OpOpenSession); n != 1 {
		t.Errorf("open_session calls = %d, want 1: the second prompt found main open", n)
	}
}

// TestPromptStreamsBeforeTheTurnEnds: text is printed while the turn still
// runs, not when the prompt returns.
func TestPromptStreamsBeforeTheTurnEnds(t *testing.T) {
	e := newEnv(t)
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		// The turn goes on only once the client has shown the first chunk.
		done <- execute(t.Context(), map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr,
			"prompt", "say Thinking\npause p1\nsay \"... done\"")
	}()
	e.Paused("p1")
	testutil.Eventually(t, "the streamed chunk", func() bool { return strings.Contains(stdout.String(), "Thinking") })
	e.Release("p1")
	if err := <-done; err != nil || stdout.String() != "Thinking... done\n" {
		t.Errorf("prompt = %v, printed %q, want %q", err, stdout.String(), "Thinking... done\n")
	}
}

// TestPromptCompletesFromTheDurableMessage: a turn's messages are printed
// whole, thoughts are not, and a stop reason other than end_turn is shown.
// That the printer completes a message whose deltas it missed from the
// durable message is TestPrinter's: the real services cannot be made to
// drop a delta on cue.
func TestPromptCompletesFromTheDurableMessage(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "plain")
	opens := e.Calls(events.OpOpenSession)
	r := e.run(t.Context(), "", "prompt", "-s", "s1", "think hmm\nsay \"Partial \"\nsay \"reply.\\nSecond line.\"\nstop max_tokens")
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
	if n := e.Calls(events.OpOpenSession); n != opens {
		t.Errorf("open_session calls = %d, want %d", n, opens)
	}
}

func TestPromptErrors(t *testing.T) {
	e := newEnv(t)
	r := e.run(t.Context(), "", "prompt", "crash 3")
	wantCode(t, r.err, "adapter_exited")
	if !strings.Contains(r.err.Error(), "the agent exited during the turn") {
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
	cwd := e.WorkDir("src")
	r := e.run(t.Context(), "", "open", "-s", "work", "--cwd", cwd, "--permission-policy", "ask")
	if r.err != nil || r.stdout != "session work is open\n" {
		t.Fatalf("open = %v, printed %q", r.err, r.stdout)
	}
	req, _ := e.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
	if req == nil || req.Agent != "demo" || req.Cwd == nil || *req.Cwd != cwd ||
		req.PermissionPolicy == nil || *req.PermissionPolicy != "ask" || *req.SessionID != "work" {
		t.Errorf("open request = %+v, want agent demo, cwd %s, policy ask, session work", req, cwd)
	}
	wantCode(t, e.run(t.Context(), "", "open", "-s", "work", "--agent", "plain").err, "session_conflict")
	wantCode(t, e.run(t.Context(), "", "open", "--permission-policy", "yolo").err, "invalid_request")
}

// TestOpenPlaced: --runner and --label pin a new session; an existing
// pinned one is reopened where it is pinned, without the flags; what the
// flags get wrong is a usage error, what the gateway refuses its code.
func TestOpenPlaced(t *testing.T) {
	e := newEnv(t)
	placement := func() *events.Placement {
		t.Helper()
		req, _ := e.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
		if req == nil {
			t.Fatal("no open request")
		}
		return req.Placement
	}
	if r := e.run(t.Context(), "", "open", "-s", "pinned", "--runner", "r1"); r.err != nil {
		t.Fatalf("open --runner r1: %v", r.err)
	}
	if p := placement(); p == nil || p.Runner == nil || *p.Runner != "r1" || p.Labels != nil {
		t.Errorf("open --runner r1 sent placement %+v", p)
	}
	// Reopened without the flags: on the runner it is pinned to.
	if r := e.run(t.Context(), "", "open", "-s", "pinned"); r.err != nil {
		t.Fatalf("reopen of a pinned session: %v", r.err)
	}
	if p := placement(); p == nil || p.Runner == nil || *p.Runner != "r1" {
		t.Errorf("reopen sent placement %+v, want runner r1", p)
	}
	r := e.run(t.Context(), "", "open", "-s", "labelled", "--label", "where=laptop", "--label", "os=mac")
	wantCode(t, r.err, "agent_unavailable")
	if p := placement(); p == nil || !maps.Equal(p.Labels, map[string]string{"where": "laptop", "os": "mac"}) || p.Runner != nil {
		t.Errorf("open --label sent placement %+v", p)
	}
	if !strings.Contains(r.err.Error(), "no connected runner has labels os=mac,where=laptop") {
		t.Errorf("open with labels no runner has: %v, want the labels named", r.err)
	}
	wantCode(t, e.run(t.Context(), "", "open", "-s", "elsewhere", "--runner", "laptop").err, "agent_unavailable")
	wantCode(t, e.run(t.Context(), "", "open", "-s", "bad", "--label", "a b=c").err, "invalid_request")
	for _, args := range [][]string{
		{"--runner", "r1", "--label", "a=b"},
		{"--label", "ab"},
		{"--label", "=b"},
		{"--label", "a="},
		{"--label", "a=b", "--label", "a=c"},
	} {
		if r := e.run(t.Context(), "", append([]string{"open", "-s", "bad"}, args...)...); cli.ExitCode(r.err) != cli.ExitUsage {
			t.Errorf("open %v = %v (exit %d), want a usage error", args, r.err, cli.ExitCode(r.err))
		}
	}
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
	e.open("main", "plain")
	// A turn that stores three public events: the user message, the tool
	// call and the agent's message.
	script := "update {\"sessionUpdate\":\"tool_call\",\"toolCallId\":\"c1\",\"title\":\"Run tests\",\"status\":\"pending\"}\n" +
		"say \"Done.\\nAll green.\""
	if r := e.run(t.Context(), "", "prompt", script); r.err != nil {
		t.Fatalf("prompt: %v", r.err)
	}
	seqs := e.EventsFrom("main", 1)
	if len(seqs) != 3 {
		t.Fatalf("the turn stored events %v, want 3", seqs)
	}
	s1, s2, s3 := seqs[0], seqs[1], seqs[2]

	r := e.run(t.Context(), "", "history", "--json")
	if r.err != nil {
		t.Fatalf("history --json: %v", r.err)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("history --json printed %d lines, want 3:\n%s", len(lines), r.stdout)
	}
	for i, seq := range seqs {
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
	// A header, then the event's number, sequence, time, type, who (no
	// one, for the agent's) and summary; the command for the next page on
	// stderr.
	lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if want := `c1 "Run tests" pending`; len(lines) != 2 || !strings.HasPrefix(lines[0], "EVENT") ||
		len(strings.Fields(lines[1])) != 9 || strings.Fields(lines[1])[0] != "2" || strings.Fields(lines[1])[1] != strconv.FormatUint(s2, 10) ||
		strings.Fields(lines[1])[3] != "tool_call" || strings.Fields(lines[1])[4] != "-" || !strings.HasSuffix(lines[1], want) {
		t.Errorf("history --after %d --limit 1 printed %q, want a header and the tool call (event 2) ending in %q", s1, r.stdout, want)
	}
	if want := "more: skein history --after " + strconv.FormatUint(s2, 10) + " (or --all)\n"; r.stderr != want {
		t.Errorf("history --after stderr = %q, want %q", r.stderr, want)
	}
	r = e.run(t.Context(), "", "history", "--before", strconv.FormatUint(s3+1, 10), "--limit", "1")
	if want := `"Done.\nAll green."`; r.err != nil || !strings.HasSuffix(strings.TrimSpace(r.stdout), want) || strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("history --before = %v, printed %q, want one line ending in %s", r.err, r.stdout, want)
	}
	if want := "more: skein history --before " + strconv.FormatUint(s3, 10) + " (or --all)\n"; r.stderr != want {
		t.Errorf("history --before stderr = %q, want %q", r.stderr, want)
	}
	// --all pages through every event, oldest first, and there is no more.
	r = e.run(t.Context(), "", "history", "--all", "--limit", "1")
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.err != nil || len(lines) != 4 || r.stderr != "" ||
		strings.Fields(lines[1])[0] != "1" || strings.Fields(lines[3])[0] != "3" {
		t.Errorf("history --all = %v, printed %q, stderr %q; want a header and events 1 to 3", r.err, r.stdout, r.stderr)
	}
	if r := e.run(t.Context(), "", "history", "--all", "--before", "2"); cli.ExitCode(r.err) != cli.ExitUsage {
		t.Errorf("history --all --before = %v, want a usage error", r.err)
	}
	if r := e.run(t.Context(), "", "history", "--after", "1", "--before", "2"); r.err == nil {
		t.Error("history --after --before succeeded")
	}
	wantCode(t, e.run(t.Context(), "", "history", "-s", "nobody").err, "session_not_found")
}

func TestEventsFollowsUntilInterrupted(t *testing.T) {
	e := newEnv(t)
	e.open("main", "plain")
	if r := e.run(t.Context(), "", "prompt", "say two"); r.err != nil {
		t.Fatalf("prompt: %v", r.err)
	}
	seqs := e.EventsFrom("main", 1) // the user message, then "two"
	if len(seqs) != 2 {
		t.Fatalf("the turn stored events %v, want 2", seqs)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(ctx, map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr, "events", "--json", "--after", strconv.FormatUint(seqs[0], 10))
	}()
	testutil.Eventually(t, "the backfilled event", func() bool { return strings.Count(withoutState(stdout.String()), "\n") == 1 })
	// A turn that stands at a pause point once its first chunk is sent: the
	// chunk's delta is live before the turn ends, and the message that
	// holds it is durable after.
	turn := make(chan result, 1)
	go func() { turn <- e.run(t.Context(), "", "prompt", "say three\npause p1") }()
	e.Paused("p1")
	testutil.Eventually(t, "the user message and the delta", func() bool { return strings.Count(withoutState(stdout.String()), "\n") == 3 })
	e.Release("p1")
	if r := <-turn; r.err != nil {
		t.Fatalf("prompt: %v", r.err)
	}
	testutil.Eventually(t, "the completed message", func() bool { return strings.Count(withoutState(stdout.String()), "\n") == 4 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events = %v after interrupt, want nil", err)
	}
	seqs = e.EventsFrom("main", 1)
	if len(seqs) != 4 {
		t.Fatalf("the turns stored events %v, want 4", seqs)
	}
	var got []string
	for line := range strings.SplitSeq(strings.TrimSuffix(withoutState(stdout.String()), "\n"), "\n") {
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
	want := []string{"durable@" + strconv.FormatUint(seqs[1], 10), "durable@" + strconv.FormatUint(seqs[2], 10),
		"ephemeral@" + strconv.FormatUint(seqs[2], 10), "durable@" + strconv.FormatUint(seqs[3], 10)}
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
	err := execute(t.Context(), nil, "", &stdout, &stderr, "events", "--json", "--server", srv.URL, "--after", "5")
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
	e := newEnv(t, withMaxEvents(2))
	e.open("main", "plain")
	// The turns run over NATS: a prompt command would itself read the
	// history that the bound prunes.
	say := func(text string) { t.Helper(); e.Turn("main", "say "+text) }
	say("one")
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(t.Context(), map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr, "events", "--json")
	}()
	testutil.Eventually(t, "the first turn's events", func() bool { return strings.Count(withoutState(stdout.String()), "\n") == 2 })
	// Records the stream misses and history prunes: a gap it cannot fill.
	// These turns write public events and no delta: a delta would send
	// the gateway's feed to read the log before the pruning, and it
	// would fill the gap.
	e.WithoutTail(func() {
		for _, step := range []string{"two", "three"} {
			e.Turn("main", "plan "+step)
		}
	})
	say("four")
	select {
	case err := <-done:
		wantCode(t, err, "cursor_expired")
	case <-time.After(time.Minute):
		t.Fatal("events still running after the stream failed")
	}
}

func TestAgents(t *testing.T) {
	e := newEnv(t)
	r := e.run(t.Context(), "", "agents")
	// Sorted by ID; the test binary stands in for the test agent.
	want := "demo\tinstalled\t" + e.AgentCommand() + "\tr1\nother\tnot installed\tskein-no-such-agent\t-\nplain\tinstalled\t" + e.AgentCommand() + "\tr1\n"
	if r.err != nil || r.stdout != want {
		t.Errorf("agents = %v, printed %q, want %q", r.err, r.stdout, want)
	}

	r = e.run(t.Context(), "", "agents", "--json")
	if r.err != nil {
		t.Fatalf("agents --json: %v", r.err)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	wantJSON := []events.AcpAgentEntry{
		{ID: "demo", Installed: true, AdapterEntrypoint: e.AgentCommand()},
		{ID: "other", Installed: false, AdapterEntrypoint: "skein-no-such-agent"},
		{ID: "plain", Installed: true, AdapterEntrypoint: e.AgentCommand()},
	}
	if len(lines) != len(wantJSON) {
		t.Fatalf("agents --json printed %d lines, want %d:\n%s", len(lines), len(wantJSON), r.stdout)
	}
	for i, w := range wantJSON {
		var got struct {
			ID                string   `json:"id"`
			Installed         bool     `json:"installed"`
			AdapterEntrypoint string   `json:"adapterEntrypoint"`
			Runners           []string `json:"runners"`
		}
		wantOn := []string{"r1"}
		if !w.Installed {
			wantOn = []string{}
		}
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil || got.ID != w.ID || got.Installed != w.Installed || got.AdapterEntrypoint != w.AdapterEntrypoint ||
			!slices.Equal(got.Runners, wantOn) || got.Runners == nil {
			t.Errorf("line %d = %s, want %+v on runners %q", i, lines[i], w, wantOn)
		}
	}

	// The runners: labels, what they host, load, agents installed.
	r = e.run(t.Context(), "", "agents", "--runners")
	if want := "r1\t-\tany\t0/64\tdemo,plain\n"; r.err != nil || r.stdout != want {
		t.Errorf("agents --runners = %v, printed %q, want %q", r.err, r.stdout, want)
	}
	r = e.run(t.Context(), "", "agents", "--runners", "--json")
	var got struct {
		ID         string            `json:"id"`
		Agents     []json.RawMessage `json:"agents"`
		Labels     map[string]string `json:"labels"`
		PlacedOnly bool              `json:"placedOnly"`
		Load       *uint32           `json:"load"`
		Capacity   uint32            `json:"capacity"`
	}
	if r.err != nil || strings.Count(r.stdout, "\n") != 1 || json.Unmarshal([]byte(r.stdout), &got) != nil ||
		got.ID != "r1" || len(got.Agents) != 3 || got.Labels == nil || got.PlacedOnly || got.Load == nil || got.Capacity != 64 {
		t.Errorf("agents --runners --json = %v, printed %q", r.err, r.stdout)
	}

	if r := e.run(t.Context(), "", "agents", "-s", "main"); r.err == nil {
		t.Error("agents -s succeeded: the command addresses no session")
	}
	e.StopHistory()
	wantCode(t, e.run(t.Context(), "", "agents").err, "unavailable")
}

// TestAgentsNone: no runner, no agents: nothing is printed.
func TestAgentsNone(t *testing.T) {
	e := newEnv(t, withoutBackend)
	e.answerWith(events.OpListAgents, &events.AcpListAgentsResponse{})
	if r := e.run(t.Context(), "", "agents"); r.err != nil || r.stdout != "" {
		t.Errorf("agents without agents = %v, printed %q, want nothing", r.err, r.stdout)
	}
}

// withoutState returns JSON lines without the state events among them
// (events --json prints the stream's state changes too).
func withoutState(out string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(out, "\n") {
		if line != "" && !strings.Contains(line, `"type":"session_state"`) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
