package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/testagent"
)

// TestChaosKillSessionService runs the session service as its own OS
// process, puts 20 sessions mid-turn through HTTP prompts, kills the process
// with SIGKILL and starts another. The prompts stay in flight across the
// kill: each waits on the log, not on the process, and returns its turn's
// real outcome once the new process has taken the turn over. Every log
// passes the audit.
func TestChaosKillSessionService(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	const sessions = 20
	ps := startProcessStack(t)
	base, control := ps.base, ps.control
	ctx := t.Context()
	startSession := func() *exec.Cmd { return ps.startSession(io.Discard) }
	session := startSession()

	// Open (retrying until the service answers), then start a keyed turn in
	// each session that pauses mid-way.
	for i := range sessions {
		if err := pollHTTP(t, http.MethodPut, fmt.Sprint(base, "c", i), `{"agent":"test"}`); err != nil {
			t.Fatal(err)
		}
	}
	script := func(i int) string { return fmt.Sprintf("chunks 3 before\npause c%d\nsay after %d", i, i) }
	type answer struct {
		code int
		body []byte
	}
	answers := make([]answer, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			code, body := postPrompt(ctx, fmt.Sprint(base, "c", i, "/prompt"), fmt.Sprint("key-", i), script(i))
			answers[i] = answer{code, body}
		})
	}
	for i := range sessions {
		if err := testagent.WaitPaused(ctx, control, fmt.Sprint("c", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := session.Process.Kill(); err != nil { // SIGKILL: nothing is cleaned up
		t.Fatal(err)
	}
	_ = session.Wait()

	startSession()
	for i := range sessions {
		if err := testagent.Release(ctx, control, fmt.Sprint("c", i)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait() // every prompt sent before the kill returns, none cancelled
	js := ps.js()
	for i, a := range answers {
		var res struct {
			StopReason string          `json:"stopReason"`
			Message    json.RawMessage `json:"message"`
		}
		if a.code != http.StatusOK || json.Unmarshal(a.body, &res) != nil || res.StopReason != "end_turn" || !strings.Contains(string(res.Message), fmt.Sprint("after ", i)) {
			t.Errorf("session c%d: the prompt in flight across the kill = %d %s, want 200 and the completed turn", i, a.code, a.body)
		}
		log := eventlogtest.Audit(t, js, "default", events.SessionID(fmt.Sprint("c", i)))
		if got := log.Outcomes(); len(got) != 1 || got[0] != "completed" {
			t.Errorf("session c%d: outcomes %v, want one completed turn", i, got)
		}
		// A retry with the same key returns the same turn's outcome.
		if body, ok := awaitKeyed(ctx, fmt.Sprint(base, "c", i, "/prompt"), fmt.Sprint("key-", i), script(i), fmt.Sprint("after ", i)); !ok {
			t.Errorf("session c%d: keyed retry = %s, want the turn completed", i, body)
		}
	}
}

// awaitKeyed retries a keyed prompt while Skein cannot serve it yet (no
// answer, or 503: a session service starting, or a session moving between
// replicas), for at most 30 s. It returns the last answer, and whether it
// is the turn completed with want in its message.
func awaitKeyed(ctx context.Context, url, key, script, want string) (string, bool) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := postPrompt(ctx, url, key, script)
		if (code != 0 && code != http.StatusServiceUnavailable) || time.Now().After(deadline) {
			var res struct {
				StopReason string          `json:"stopReason"`
				Message    json.RawMessage `json:"message"`
			}
			ok := json.Unmarshal(body, &res) == nil && res.StopReason == "end_turn" && strings.Contains(string(res.Message), want)
			return string(body), ok
		}
	}
}

// processStack is gateway, history and an adapter-runner (agent "test", the
// test agent driven through control) in this process, over TCP to an
// embedded NATS server, for tests that run the session service as OS
// processes.
type processStack struct {
	t       *testing.T
	ns      *server.Server
	exe     string
	base    string // the gateway's http://…/v1/sessions/
	control string
}

func startProcessStack(t *testing.T) *processStack {
	ps := &processStack{t: t, ns: natstest.Run(t, natstest.WithListen()), control: testutil.TempDir(t)}
	ps.exe = skeinBin(t)
	st := stacktest.Start(t, stacktest.WithServer(ps.ns), stacktest.AsSkein(testutil.TempDir(t), func(cfg *stackConfig) {
		cfg.Targets = []string{"gateway", "history", "adapter-runner"}
		cfg.Runner.ID = "procs"
		// The session service's processes come and go: the gateway's
		// warnings of it are expected.
		cfg.LogLevel = slog.LevelError
		cfg.Runner.Builtin = []adapterrunner.Agent{{ID: "test", Command: ps.exe, Args: []string{testAgentCommand},
			Env: map[string]string{testagent.EnvControlDir: ps.control},
			// The test agent's pause points live outside its session.
			Sandbox: adapterrunner.AgentSandbox{Write: []string{ps.control}}}}
	}))
	ps.base = st.URL() + "/v1/sessions/"
	return ps
}

// startSession starts a session service process with extra flags, its log
// (JSON, warnings and up) to stderr. It is killed when the test ends.
func (ps *processStack) startSession(stderr io.Writer, flags ...string) *exec.Cmd {
	args := append([]string{"serve", "-target=session", "-nats", ps.ns.ClientURL(), "-log-level", "warn"}, flags...)
	cmd := exec.Command(ps.exe, args...)
	cmd.Env = os.Environ()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		ps.t.Fatal(err)
	}
	ps.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func (ps *processStack) js() jetstream.JetStream {
	js, err := jetstream.New(natstest.Connect(ps.t, ps.ns))
	if err != nil {
		ps.t.Fatal(err)
	}
	return js
}

// pollHTTP retries a request until it answers 200 (the service may still be
// starting), for at most 30 seconds.
func pollHTTP(t *testing.T, method, url, body string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s %s = %d %s", method, url, resp.StatusCode, b)
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-t.Context().Done():
			return t.Context().Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// postPrompt posts a prompt of text, with an idempotency key unless key is
// empty, and returns the status and body (0 and nil if there was none).
func postPrompt(ctx context.Context, url, key, text string) (int, []byte) {
	req := map[string]any{"content": []map[string]string{{"type": "text", "text": text}}}
	if key != "" {
		req["idempotencyKey"] = key
	}
	b, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(b)))
	if err != nil {
		return 0, nil
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
