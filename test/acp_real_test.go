package test

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// A real adapter behind the ACP door: the SDK's client (client.mjs, on
// stdio) runs `skein acp --agent claude` against a skein dev whose agent
// "claude" is the real claude-agent-acp, which `make real-adapters`
// installs (services/adapter-runner/testdata/real-adapters pins it) and
// SKEIN_REAL_ADAPTERS names. Behind the adapter is no model but
// standInModel, on loopback. The scripted demo agent of TestACPSDK is
// Skein's own; this is an agent Skein did not write, end to end. It runs
// under skein dev's sandbox as every adapter does (checkAdapterUser).

// envRealAdapters names the directory make real-adapters installs the real
// adapters in (as services/adapter-runner's realadapters_test.go reads it).
const envRealAdapters = "SKEIN_REAL_ADAPTERS"

// realClaudeAdapter returns the path of the claude-agent-acp executable
// make real-adapters installed, or skips the test, saying why.
func realClaudeAdapter(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envRealAdapters)
	if dir == "" {
		t.Skipf("%s is not set: `make real-adapters` installs the real adapters and `make test` sets it", envRealAdapters)
	}
	path := filepath.Join(dir, "node_modules", ".bin", "claude-agent-acp")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("claude-agent-acp is not installed in %s (%v): run `make real-adapters`", dir, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// standInDeltas are the text deltas the stand-in model streams to the
// prompt, and standInText what they join to: what the client must see.
var (
	standInDeltas = []string{"Hello", " from the", " stand-in", " model."}
	standInText   = strings.Join(standInDeltas, "")
)

// standInModel is a loopback stand-in for the Anthropic Messages API
// (POST /v1/messages, streamed as server-sent events when the request asks,
// and /v1/messages/count_tokens), the API claude-agent-acp's Claude Code
// calls at ANTHROPIC_BASE_URL. It imitates what
// services/adapter-runner/realclaude_test.go's claudeModel answers, text
// only: the agent's main loop (a request that offers tools) gets
// standInText, streamed in standInDeltas; any other request (a title, a
// quota probe) a short "ok".
type standInModel struct {
	mu      sync.Mutex
	prompts []string // the last user message's text of each main-loop request
	others  int      // the other requests to /v1/messages
}

func (m *standInModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/v1/messages") {
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			_, _ = io.WriteString(w, `{"input_tokens":10}`)
			return
		}
		http.NotFound(w, r)
		return
	}
	var req struct {
		Stream   bool              `json:"stream"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	deltas := []string{"ok"}
	m.mu.Lock()
	if len(req.Tools) > 0 && len(req.Messages) > 0 {
		deltas = standInDeltas
		m.prompts = append(m.prompts, messageText(req.Messages[len(req.Messages)-1].Content))
	} else {
		m.others++
	}
	m.mu.Unlock()
	// The real API's usage always counts the cache's tokens too:
	// claude-agent-acp adds the four into its usage_update's used, which
	// would be NaN, sent as null, without them.
	usage := map[string]int{"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_standin", "type": "message", "role": "assistant", "model": "claude-standin",
			"content": []any{map[string]any{"type": "text", "text": strings.Join(deltas, "")}}, "stop_reason": "end_turn", "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	send := func(event string, data map[string]any) {
		data["type"] = event
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	send("message_start", map[string]any{"message": map[string]any{"id": "msg_standin", "type": "message", "role": "assistant",
		"model": "claude-standin", "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for _, d := range deltas {
		send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": d}})
	}
	send("content_block_stop", map[string]any{"index": 0})
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": 5}})
	send("message_stop", map[string]any{})
}

// messageText is the text of a Messages API message's content: a string,
// or the text blocks of a list, one a line.
func messageText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &blocks)
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// seen returns the main-loop requests' prompts and the count of the
// others.
func (m *standInModel) seen() ([]string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.prompts...), m.others
}

// startACPRealEnv starts skein dev as startACPEnv does, with the agents of
// the registry file agents besides its own, and the admin's token as its
// dev token.
func startACPRealEnv(t *testing.T, agents string) *acpEnv {
	t.Helper()
	sdk := acpSDKDir(t)
	script, err := filepath.Abs(filepath.Join("testdata", "acp-sdk", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := filepath.EvalSymlinks(testutil.TempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	e := &acpEnv{sdk: sdk, data: testutil.TempDir(t), project: project, admin: rand.Text(), script: script}
	if err := os.WriteFile(filepath.Join(e.data, devTokenFile), []byte(e.admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.dev = mustStartDev(t, devOptions{data: e.data, dir: project, auth: true, agents: agents, flags: []string{"--log-level", "warn"}})
	t.Cleanup(func() { e.dev.stop(t) })
	return e
}

// acpPromptCaps is initialize's promptCapabilities.
type acpPromptCaps struct {
	Image           bool `json:"image"`
	Audio           bool `json:"audio"`
	EmbeddedContext bool `json:"embeddedContext"`
}

// TestACPSDKRealClaude runs one turn of the real claude-agent-acp through
// the ACP door: the SDK's client → skein acp --agent claude → skein dev →
// claude-agent-acp (under the runner's sandbox, as any adapter) → the
// stand-in model. The turn streams the model's text as agent_message_chunk
// updates and ends end_turn; then another client sees what Skein learnt:
// its initialize names claude's prompt capabilities, and its session/load
// replays the turn from the log.
func TestACPSDKRealClaude(t *testing.T) {
	acpSDKDir(t) // skips first when the SDK or node is missing
	bin := realClaudeAdapter(t)
	model := &standInModel{}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)

	registry, _ := json.Marshal(map[string]any{"agents": []map[string]any{{
		"id": "claude", "command": bin,
		"env": map[string]string{
			"ANTHROPIC_BASE_URL":                       srv.URL,
			"ANTHROPIC_API_KEY":                        "sk-ant-standin",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_AUTOUPDATER":                      "1",
		},
	}}})
	agents := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(agents, registry, 0o600); err != nil {
		t.Fatal(err)
	}
	e := startACPRealEnv(t, agents)

	// claude-agent-acp starts Claude Code, which under the race detector
	// and a busy machine takes its time: the whole run has 85 s, inside
	// the 90 s acpClient.wait allows.
	const prompt = "Say hello"
	c := e.config(t, acpStdio, acpAuth{}, stepInit(), acpStep{"op": "new"}, stepPrompt("prompt", "$new", prompt))
	c.Args = append(c.Args, "--agent", "claude")
	c.TimeoutMs = 85000
	first := e.run(t, c)
	checkSDKAccepted(t, first)
	if init := ok[acpInitResult](t, first, "initialize"); init.AgentInfo == nil || init.AgentInfo.Title != "Skein: claude" {
		t.Errorf("initialize's agentInfo = %+v, want titled with --agent claude", init.AgentInfo)
	}
	id := ok[acpNewResult](t, first, "new").SessionID
	if status, s, _ := e.session(t, id); status != http.StatusOK || string(s["agent"]) != `"claude"` {
		t.Errorf("GET /v1/sessions/%s = %d, agent %s; want 200, the --agent claude", id, status, s["agent"])
	}
	p := ok[acpPromptResult](t, first, "prompt")
	prompts, others := model.seen()
	if p.StopReason != "end_turn" {
		t.Errorf("session/prompt = %+v, want stopReason end_turn", p)
	}
	if len(prompts) == 0 || !strings.Contains(prompts[len(prompts)-1], prompt) {
		t.Errorf("the stand-in model's main loop got the prompts %q (and %d other requests), want %q last", prompts, others, prompt)
	}
	us := first.turn(t, "prompt", id)
	if got := text(us, "agent_message_chunk"); got != standInText {
		t.Errorf("the turn's agent_message_chunk text = %q, want the model's %q (updates: %s)", got, standInText, kinds(us))
	}
	checkAdapterUser(t, e, id)

	// Another client, once Skein has seen a claude session: its
	// initialize names the prompt capabilities claude-agent-acp advertises
	// (image and embedded context, no audio: its initialize, in every
	// version Skein's transcripts and this pin hold), and session/load
	// replays the turn.
	c = e.config(t, acpStdio, acpAuth{}, stepInit(), acpStep{"op": "load", "sessionId": id})
	c.Args = append(c.Args, "--agent", "claude")
	second := e.run(t, c)
	checkSDKAccepted(t, second)
	init := ok[acpInitResult](t, second, "initialize")
	var caps acpPromptCaps
	if err := json.Unmarshal(init.AgentCapabilities.PromptCapabilities, &caps); err != nil ||
		caps != (acpPromptCaps{Image: true, EmbeddedContext: true}) {
		t.Errorf("initialize after a claude session: promptCapabilities %s, want claude-agent-acp's {image: true, embeddedContext: true} (%v)",
			init.AgentCapabilities.PromptCapabilities, err)
	}
	replay := second.turn(t, "load", id)
	checkReplay(t, "session/load", replay, prompt, standInText)
	checkLogOrder(t, "session/load's replay", replay)
	for _, kind := range []string{"user_message_chunk", "agent_message_chunk"} {
		found := false
		for _, u := range replay {
			found = found || (u.Kind == kind && u.Sequence != nil)
		}
		if !found {
			t.Errorf("session/load replays no %s with _meta skein/sequence (updates: %s)", kind, kinds(replay))
		}
	}
}

// checkAdapterUser fails the test unless claude-agent-acp kept its state in
// the session's HOME (skein dev's runner keeps it in
// <data>/sessions/<namespace>/<session>/home) and, when skein dev runs as
// root, did so as another user: the runner's sandbox runs every adapter as
// its adapters' user (uid 65534 by default), with no capability, a seccomp
// filter and, where the kernel has it, Landlock. Nothing here loosens it:
// node is under /usr and the adapter's node_modules tree is granted whole.
func checkAdapterUser(t *testing.T, e *acpEnv, id string) {
	t.Helper()
	path := filepath.Join(e.data, "sessions", string(events.DefaultNamespace), id, "home", ".claude.json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("claude-agent-acp's state in the session's HOME: %v", err)
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && st.Uid == 0 {
		t.Errorf("%s is root's: under a root skein dev, the adapter ran as root, not as the adapters' user", path)
	}
}
