package main

import (
	"context"
	"encoding/json"
	"flag"
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

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/testagent"
)

// TestChaosKillSessionService runs the session service as its own OS
// process, puts 20 sessions mid-turn, kills the process with SIGKILL and
// starts another: every turn completes (a keyed retry returns it), and every
// log passes the audit.
func TestChaosKillSessionService(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	const sessions = 20
	ns := natstest.Run(t, natstest.WithListen())
	url := ns.ClientURL()
	control := t.TempDir()

	// Gateway, history and runner in this process, over TCP.
	var cfg stackConfig
	cfg.registerFlags(flag.NewFlagSet("chaos", flag.ContinueOnError))
	cfg.Gateway.Addr = "127.0.0.1:0"
	cfg.Runner.ID = "chaos"
	cfg.Runner.DataDir = t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Runner.Builtin = []adapterrunner.Agent{{ID: "test", Command: exe, Args: []string{testAgentCommand},
		Env: map[string]string{testagent.EnvControlDir: control}}}
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := newStack(&cfg, []string{TargetGateway, TargetHistory, TargetAdapterRunner}, lg, natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- st.run(ctx, lg, "", func() { close(ready) }) }()
	<-ready
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + st.gateway.Addr() + "/v1/sessions/"

	startSession := func() *exec.Cmd {
		cmd := exec.Command(exe, "serve", "-target=session", "-nats", url, "-log-level", "error")
		cmd.Env = append(os.Environ(), envRunSkein+"=1")
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	session := startSession()

	// Open (retrying until the service answers), then start a keyed turn in
	// each session that pauses mid-way.
	for i := range sessions {
		if err := pollHTTP(t, http.MethodPut, fmt.Sprint(base, "c", i), `{"agent":"test"}`); err != nil {
			t.Fatal(err)
		}
	}
	script := func(i int) string { return fmt.Sprintf("chunks 3 before\npause c%d\nsay after %d", i, i) }
	reqCtx, cancelReqs := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			_, _ = postPrompt(reqCtx, fmt.Sprint(base, "c", i, "/prompt"), fmt.Sprint("key-", i), script(i))
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
	cancelReqs() // those requests' answers died with the process
	wg.Wait()

	startSession()
	for i := range sessions {
		if err := testagent.Release(ctx, control, fmt.Sprint("c", i)); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	for i := range sessions {
		var body string
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, b := postPrompt(ctx, fmt.Sprint(base, "c", i, "/prompt"), fmt.Sprint("key-", i), script(i))
			body = string(b)
			// Retry only while the new session service is not serving yet.
			if (code != 0 && code != http.StatusServiceUnavailable) || time.Now().After(deadline) {
				break
			}
		}
		var res struct {
			StopReason string          `json:"stopReason"`
			Message    json.RawMessage `json:"message"`
		}
		if json.Unmarshal([]byte(body), &res) != nil || res.StopReason != "end_turn" || !strings.Contains(string(res.Message), fmt.Sprint("after ", i)) {
			t.Errorf("session c%d: keyed retry = %s, want the turn completed", i, body)
			continue
		}
		log := eventlogtest.Audit(t, js, "default", events.SessionID(fmt.Sprint("c", i)))
		if got := log.Outcomes(); len(got) != 1 || got[0] != "completed" {
			t.Errorf("session c%d: outcomes %v, want one completed turn", i, got)
		}
	}
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

func postPrompt(ctx context.Context, url, key, text string) (int, []byte) {
	b, _ := json.Marshal(map[string]any{"idempotencyKey": key, "content": []map[string]string{{"type": "text", "text": text}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(b)))
	if err != nil {
		return 0, nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
