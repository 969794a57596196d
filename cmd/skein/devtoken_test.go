package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/testutil"
)

func TestEnsureDevToken(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	token, path, created, err := ensureDevToken(data)
	if err != nil || !created || len(token) < 20 {
		t.Fatalf("first start: %q, created %v, %v: want a new token", token, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || path != filepath.Join(data, cli.DevTokenFile) {
		t.Errorf("%s has mode %v, want 0600 in %s", path, fi.Mode().Perm(), data)
	}
	again, _, created, err := ensureDevToken(data)
	if err != nil || created || again != token {
		t.Errorf("second start: created %v, %v, same token %v: want the first token kept", created, err, again == token)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := ensureDevToken(data); err == nil {
		t.Error("an empty token file: nil error, want one")
	}
}

// TestDevToken runs skein dev as the tour does and the CLI against it: with
// the token skein dev wrote, found through the data directory as `make
// run` leaves it; with SKEIN_TOKEN; and with neither.
func TestDevToken(t *testing.T) {
	if testing.Short() {
		t.Skip("runs skein dev; skipped in -short")
	}
	data, metricsAddr := testutil.TempDir(t), freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	stdout := &testutil.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--data", data, "--http", "127.0.0.1:0", "--metrics-listen", metricsAddr, "--log-level", "warn"}, func(string) string { return "" }, nil, stdout, stdout)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("skein dev exited %d:\n%s", code, stdout)
		}
	})
	var url string
	if err := pollFor(t.Context(), "skein dev's welcome", func() bool {
		url = welcomeURL(stdout.String(), "HTTP")
		return url != ""
	}); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	token, err := os.ReadFile(filepath.Join(data, cli.DevTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), strings.TrimSpace(string(token))) {
		t.Errorf("skein dev printed its token:\n%s", stdout)
	}
	// Metrics are on their own listener, without a token, and not on the
	// gateway's port.
	// (It may start listening after the welcome: both start at once.)
	var status int
	if err := pollFor(t.Context(), "the metrics listener", func() bool {
		status = get(t, "http://"+metricsAddr+"/metrics")
		return status != 0
	}); err != nil || status != http.StatusOK {
		t.Errorf("GET /metrics on --metrics-listen = %d, %v; want 200", status, err)
	}
	if status := get(t, url+"/metrics"); status != http.StatusNotFound {
		t.Errorf("GET /metrics on the gateway's port = %d, want 404", status)
	}
	skein := func(env map[string]string, args ...string) (string, int) {
		t.Helper()
		env[cli.EnvServer] = url
		var out testutil.Buffer
		code := run(t.Context(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &out)
		return out.String(), code
	}
	if out, code := skein(map[string]string{cli.EnvData: data}, "prompt", "hello"); code != 0 || !strings.Contains(out, "hello") {
		t.Errorf("prompt with the dev token file = %d:\n%s", code, out)
	}
	if out, code := skein(map[string]string{cli.EnvData: t.TempDir(), cli.EnvToken: strings.TrimSpace(string(token))}, "history"); code != 0 {
		t.Errorf("history with SKEIN_TOKEN = %d:\n%s", code, out)
	}
	if out, code := skein(map[string]string{cli.EnvData: t.TempDir()}, "history"); code == 0 || !strings.Contains(out, "unauthenticated") {
		t.Errorf("history with no token = %d, want unauthenticated:\n%s", code, out)
	}
	if out, code := skein(map[string]string{cli.EnvData: data, cli.EnvToken: "wrong"}, "history"); code == 0 || !strings.Contains(out, "unauthenticated") {
		t.Errorf("history with a wrong SKEIN_TOKEN = %d, want unauthenticated:\n%s", code, out)
	}
}

// get returns the status of a GET without a token, or 0 when there was
// no answer.
func get(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeRefusesGatewayWithoutTokens: skein serve does not start a
// gateway without a tokens file, unless told to serve without
// authentication. It refuses before it dials NATS.
func TestServeRefusesGatewayWithoutTokens(t *testing.T) {
	var out testutil.Buffer
	code := run(t.Context(), []string{"serve", "-target=session,gateway", "-nats", "nats://127.0.0.1:1"}, func(string) string { return "" }, strings.NewReader(""), &out, &out)
	if code == 0 || !strings.Contains(out.String(), "--gateway.tokens-file") || !strings.Contains(out.String(), "--gateway.insecure-no-auth") {
		t.Errorf("serve without tokens = %d:\n%s\nwant a refusal naming both flags", code, out.String())
	}
}
