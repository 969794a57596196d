package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"skein.dev/internal/cluster"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
)

// Skein's own functions are tested here: its commands and what skein dev
// makes. Its black-box tests, which drive the whole stack from outside,
// are in test/.

// TestMain lets this test binary stand in for skein's built-in test agent
// (stacktest.Main), and for skein itself when a test runs it as a process.
func TestMain(m *testing.M) {
	if os.Getenv(envRunSkein) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	// Every test stops what it started: the stacks' Run, the processes'
	// watchers, the gateway's handlers.
	stacktest.Main(m, nil)
}

// envRunSkein makes the test binary run skein's main (see TestMain).
const envRunSkein = "SKEIN_TEST_RUN_SKEIN"

// opsClusterDir is ops/cluster/nats, the configuration make cluster runs.
const opsClusterDir = "../../ops/cluster/nats"

// opsServiceUsers is the NATS user each skein serve target connects as:
// make cluster's.
var opsServiceUsers = map[string]string{
	cluster.Gateway: cluster.UserGateway,
	cluster.Session: cluster.UserSession,
	cluster.Runner:  cluster.UserRunner,
	cluster.History: cluster.UserHistory,
	cluster.Notify:  cluster.UserNotify,
}

// testStack is the four services in-process on one embedded NATS, as
// skein runs them (stacktest.AsSkein), the test binary their test agent.
type testStack struct {
	*stacktest.Stack
	url string
}

func startStack(t *testing.T, ns *server.Server, dataDir string) *testStack {
	t.Helper()
	st := stacktest.Start(t, stacktest.WithServer(ns), stacktest.AsSkein(dataDir))
	return &testStack{Stack: st, url: st.URL()}
}

func do(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	return doAs(t, method, url, "", body)
}

// doAs sends one API request, with token as its bearer token unless it is
// empty, and returns the answer's status and body.
func doAs(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func promptBody(text string) string {
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	return string(b)
}

// pollFor polls cond until it holds or ctx ends.
func pollFor(ctx context.Context, what string, cond func() bool) error {
	return testutil.Poll(ctx, what, func() (bool, error) { return cond(), nil })
}

// welcomeURL returns the URL skein dev's welcome prints after label
// ("HTTP", "NATS"), or "".
func welcomeURL(out, label string) string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == label {
			return f[1]
		}
	}
	return ""
}

// freeAddr returns a loopback address with a free port.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := (&net.ListenConfig{}).Listen(tb.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
