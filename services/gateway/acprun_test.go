package gateway_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/services/gateway"
)

// TestACPInProcessAPI: the bridge's API client reaches the gateway's own
// routes in process, with the caller's token: a read token reads and
// follows a session, as a stream that arrives event by event, and its
// prompt is refused (403); the stream ends when its request does.
func TestACPInProcessAPI(t *testing.T) {
	e := newEnv(t, withConfig(withTokens))
	e.backend.Open("s1", "demo")
	e.backend.Say("s1", "first")
	c := gateway.InProcessClient(e.gw, "192.0.2.1:4711")
	call := func(ctx context.Context, method, path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "http://gateway.skein.invalid"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+readToken)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	resp := call(t.Context(), http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a read token's prompt = %d, want 403", resp.StatusCode)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp = call(ctx, http.MethodGet, "/v1/sessions/s1/events?after=0", "")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events = %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body := bufio.NewScanner(resp.Body)
	until := func(text string) {
		t.Helper()
		for body.Scan() {
			if strings.HasPrefix(body.Text(), "data:") && strings.Contains(body.Text(), text) {
				return
			}
		}
		t.Fatalf("the stream ended (%v) before %q", body.Err(), text)
	}
	until("first")
	if n := testutil.Metric(t, e.reg, "acp_gateway_sse_streams"); n != 1 {
		t.Errorf("event streams = %v, want 1", n)
	}
	// An event stored after the stream began arrives on it.
	e.backend.Say("s1", "second")
	until("second")
	cancel()
	testutil.Eventually(t, "the stream ended", func() bool {
		return testutil.Metric(t, e.reg, "acp_gateway_sse_streams") == 0
	})
}

// TestACPHTTP2: the Streamable HTTP profile over HTTP/2 without TLS
// (h2c, prior knowledge), as the transport RFD asks.
func TestACPHTTP2(t *testing.T) {
	e := newEnv(t, withoutBackend)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	e.client = &http.Client{Transport: tr}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/acp", strings.NewReader(acpInitialize))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("initialize = %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	conn := resp.Header.Get(hdrConn)
	main := e.acpStream(nil, conn, "")
	s1 := e.acpStream(nil, conn, "s1")
	if r := e.acpPost(nil, unknownMethod(2, "s1"), hdrConn, conn, hdrSession, "s1"); r.status != http.StatusAccepted {
		t.Fatalf("POST = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, s1.next().Data, "2", methodNotFound)
	if r := e.acpPost(nil, unknownMethod(3, ""), hdrConn, conn); r.status != http.StatusAccepted {
		t.Fatalf("POST = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, main.next().Data, "3", methodNotFound)
}

// TestACPRunEndsConnections: when the gateway stops, every ACP connection
// ends, of either profile (the WebSocket with 1001), and Run returns
// after their bridges: no goroutine is left.
func TestACPRunEndsConnections(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	// The connection's reply subscription lives as long as it does.
	if _, err := nc.Request("skein.test.nobody", nil, streamWait); err == nil {
		t.Fatal("a request nobody serves was answered")
	}
	before := goleak.IgnoreCurrent()

	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := gateway.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	gw, err := gateway.New(cfg, lg, nc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	select {
	case <-gw.Ready():
	case err := <-done:
		t.Fatalf("Run before ready = %v", err)
	}
	tr := &http.Transport{}
	e := &env{t: t, url: "http://" + gw.Addr(), client: &http.Client{Transport: tr}}
	conn := e.acpOpen(nil)
	main := e.acpStream(nil, conn, "")
	ws, _, err := e.dialACP(nil)
	if err != nil {
		t.Fatal(err)
	}
	wsSend(t, ws, acpInitialize)
	wantRPCResponse(t, wsNext(t, ws), "1")

	// A client reads all the time: it answers the server's close.
	closed := make(chan websocket.StatusCode, 1)
	go func() {
		for {
			if _, _, err := ws.Read(t.Context()); err != nil {
				closed <- websocket.CloseStatus(err)
				return
			}
		}
	}()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Run ended both before it returned.
	if got := <-closed; got != websocket.StatusGoingAway {
		t.Errorf("close status = %v, want %v", got, websocket.StatusGoingAway)
	}
	main.ended()
	tr.CloseIdleConnections()
	testutil.VerifyNone(t, before)
}
