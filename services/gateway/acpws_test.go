package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"skein.dev/internal/acpbridge"
	"skein.dev/internal/testutil"
	"skein.dev/services/gateway"
)

// wsSend writes one text frame.
func wsSend(t testing.TB, ws *websocket.Conn, msg string) {
	t.Helper()
	if err := ws.Write(t.Context(), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("write %s: %v", msg, err)
	}
}

// wsNext reads the next frame, which must be text, within streamWait.
func wsNext(t testing.TB, ws *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), streamWait)
	defer cancel()
	typ, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("a %v frame, want text", typ)
	}
	return string(b)
}

// wsClosed waits for the server to close ws and returns its status.
func wsClosed(t testing.TB, ws *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), streamWait)
	defer cancel()
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("the socket is still open after %v", streamWait)
			}
			return websocket.CloseStatus(err)
		}
	}
}

// TestACPWebSocket: the 101 names the connection; every message is a text
// frame both ways; what the bridge could not take is answered at once,
// id null; binary frames are ignored.
func TestACPWebSocket(t *testing.T) {
	e := newEnv(t, withoutBackend)
	ws, resp, err := e.dialACP(nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get(hdrConn) == "" {
		t.Fatalf("upgrade = %d, %s %q; want 101 with an ID", resp.StatusCode, hdrConn, resp.Header.Get(hdrConn))
	}
	wsSend(t, ws, acpInitialize)
	wantRPCResponse(t, wsNext(t, ws), "1")

	// A binary frame is ignored: the next answer is the next request's.
	if err := ws.Write(t.Context(), websocket.MessageBinary, []byte(unknownMethod(2, ""))); err != nil {
		t.Fatal(err)
	}
	wsSend(t, ws, `[`+unknownMethod(3, "")+`]`)
	wantRPCError(t, wsNext(t, ws), "null", -32600)
	wsSend(t, ws, `{"jsonrpc":`)
	wantRPCError(t, wsNext(t, ws), "null", -32700)
	wsSend(t, ws, `42`)
	wantRPCError(t, wsNext(t, ws), "null", -32600)
	// A session's request needs no header here: everything is one socket.
	wsSend(t, ws, unknownMethod(4, "s1"))
	wantRPCError(t, wsNext(t, ws), "4", methodNotFound)

	if err := ws.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Errorf("close: %v", err)
	}
	testutil.Eventually(t, "the connection ended", func() bool {
		return testutil.Metric(t, e.reg, "acp_gateway_acp_connection_ends_total", "reason", "closed") == 1
	})
	if n := testutil.Metric(t, e.reg, "acp_gateway_acp_connections", "transport", "websocket"); n != 0 {
		t.Errorf("WebSocket connections open = %v, want 0", n)
	}
}

// TestACPWebSocketRefusals: a foreign Origin is refused before the
// upgrade; a frame over the message limit closes the socket (1009).
func TestACPWebSocketRefusals(t *testing.T) {
	e := newEnv(t, withoutBackend)
	if _, resp, err := e.dialACP(nil, "Origin", "https://elsewhere.example"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign Origin = %v, %v; want 403", resp, err)
	}
	// The gateway's own origin is fine.
	if _, _, err := e.dialACP(nil, "Origin", e.url); err != nil {
		t.Errorf("the gateway's own Origin: %v", err)
	}

	ws, _, err := e.dialACP(nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(1 << 10)
	big := `{"jsonrpc":"2.0","method":"_skein_test/note","params":{"x":"` + strings.Repeat("x", acpbridge.MaxMessageBytes) + `"}}`
	// The write may fail as the server closes: either way, the close.
	if err := ws.Write(t.Context(), websocket.MessageText, []byte(big)); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("write the large frame: %v", err)
	}
	if got := wsClosed(t, ws); got != websocket.StatusMessageTooBig {
		t.Errorf("close status = %v, want %v", got, websocket.StatusMessageTooBig)
	}
}

// TestACPRevoked: a connection of a token removed from the tokens file
// ends, over either profile.
func TestACPRevoked(t *testing.T) {
	file := t.TempDir() + "/tokens.json"
	bob := gateway.Token{SHA256: gateway.HashToken(userToken), Principal: "bob", Namespaces: []string{"default"}, Role: gateway.RoleUser}
	carol := gateway.Token{SHA256: gateway.HashToken(readToken), Principal: "carol", Namespaces: []string{"default"}, Role: gateway.RoleUser}
	writeTokensFile(t, file, bob, carol)
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) {
		c.Auth.TokensFile = file
		c.Auth.TokensReload = 10 * time.Millisecond
	}))
	conn := e.acpOpen(bearer(userToken))
	main := e.acpStream(bearer(userToken), conn, "")
	ws, _, err := e.dialACP(bearer(userToken))
	if err != nil {
		t.Fatal(err)
	}
	kept := e.acpOpen(bearer(readToken))

	writeTokensFile(t, file, carol)
	if got := wsClosed(t, ws); got != websocket.StatusPolicyViolation {
		t.Errorf("close status = %v, want %v", got, websocket.StatusPolicyViolation)
	}
	main.ended()
	testutil.Eventually(t, "both connections ended", func() bool {
		return testutil.Metric(t, e.reg, "acp_gateway_acp_connection_ends_total", "reason", "revoked") == 2
	})
	if r := e.acpPost(bearer(readToken), unknownMethod(2, ""), hdrConn, kept); r.status != http.StatusAccepted {
		t.Errorf("POST to another token's connection = %d %s, want 202", r.status, r.body)
	}
}
