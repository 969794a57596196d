package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
)

// skein dev, one person in one namespace, opens and prompts more sessions
// than its runner holds: each open answers, the least recently used idle
// adapters make room, and every session answers its next prompt, its
// adapter restored where it was evicted. The eviction runs under dev's
// own NATS users, whose permissions are production's.
func TestDevEvictsIdleAdaptersWhenFull(t *testing.T) {
	if testing.Short() {
		t.Skip("runs skein dev with 100 sessions; skipped in -short")
	}
	const capacity, sessions = 64, 100
	project, err := filepath.EvalSymlinks(testutil.TempDir(t)) // searchable by the agents' user, under root
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(project, ".skein")
	dev := mustStartDev(t, devOptions{data: data, dir: project, auth: true, flags: []string{"--adapter-runner.capacity", fmt.Sprint(capacity)}})
	t.Cleanup(func() { dev.stop(t) })
	url := dev.url
	token, err := os.ReadFile(filepath.Join(data, devTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	// hang bounds each request: a request that takes it is a hang, not a
	// slow answer.
	const hang = 30 * time.Second
	call := func(method, path, body string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), hang)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: no answer: %v\n%s", method, path, err, dev.output())
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	prompt := promptBody("hello")
	start := time.Now()
	for i := range sessions {
		path := fmt.Sprintf("/v1/sessions/s%d", i)
		if status, body := call(http.MethodPut, path, `{"agent":"demo"}`); status != http.StatusOK {
			t.Fatalf("open %d of %d = %d %s, want 200", i+1, sessions, status, body)
		}
		if status, body := call(http.MethodPost, path+"/prompt", prompt); status != http.StatusOK {
			t.Fatalf("prompt %d of %d = %d %s, want 200", i+1, sessions, status, body)
		}
	}
	// The least recently used went: those evicted are the oldest
	// sessions, at least as many as did not fit. (A heartbeat put just
	// before an eviction's stop may show the runner full once more, and
	// the next oldest goes too.)
	t.Logf("%d sessions opened and prompted in %v", sessions, time.Since(start))
	evicted := evictedSessions(dev.output())
	if len(evicted) < sessions-capacity {
		t.Errorf("%d sessions on a runner of %d, and %d evicted (%v), want at least %d", sessions, capacity, len(evicted), evicted, sessions-capacity)
	}
	for i := range len(evicted) {
		if sid := fmt.Sprintf("s%d", i); !evicted[sid] {
			t.Errorf("%d adapters evicted, and not %s, one of the %d least recently used: %v", len(evicted), sid, len(evicted), evicted)
		}
	}
	// Every session answers its next prompt: the evicted ones restored,
	// evicting the least recently used in their turn. Newest first, so
	// that the live ones are prompted before any restore evicts them.
	start = time.Now()
	for i := sessions - 1; i >= 0; i-- {
		path := fmt.Sprintf("/v1/sessions/s%d", i)
		if status, body := call(http.MethodPost, path+"/prompt", prompt); status != http.StatusOK {
			t.Fatalf("second prompt of session %d = %d %s, want 200", i, status, body)
		}
	}
	t.Logf("%d sessions prompted again in %v", sessions, time.Since(start))
}

// evictedSessions returns the sessions whose adapters skein dev's log
// says were evicted.
func evictedSessions(log string) map[string]bool {
	evicted := map[string]bool{}
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `msg="adapter evicted"`) {
			continue
		}
		for field := range strings.FieldsSeq(line) {
			if sid, ok := strings.CutPrefix(field, "session_id="); ok {
				evicted[sid] = true
			}
		}
	}
	return evicted
}
