package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"skein.dev/internal/acpbridge"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// The /acp endpoint's Streamable HTTP profile, against the bridge behind
// it: requests in, answers routed to the stream the official SDK's client
// reads them on. The tests ask what any bridge answers (an unknown
// method's -32601, a JSON-RPC response with the request's ID), so that
// they hold for the bridge as it grows.

// Headers of the transport.
const (
	hdrConn    = "Acp-Connection-Id"
	hdrSession = "Acp-Session-Id"
)

const acpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`

// acpPost posts one ACP message, as application/json unless hdr says
// otherwise.
func (e *env) acpPost(auth []string, body string, hdr ...string) response {
	e.t.Helper()
	return e.send(http.MethodPost, "/acp", body, auth, append([]string{"Content-Type", "application/json"}, hdr...)...)
}

// acpOpen opens a Streamable HTTP connection and returns its ID.
func (e *env) acpOpen(auth []string) string {
	e.t.Helper()
	r := e.acpPost(auth, acpInitialize)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		e.t.Fatalf("POST initialize = %d %s %s, want 200 application/json", r.status, r.header.Get("Content-Type"), r.body)
	}
	wantRPCResponse(e.t, string(r.body), "1")
	id := r.header.Get(hdrConn)
	if id == "" {
		e.t.Fatalf("POST initialize: no %s", hdrConn)
	}
	return id
}

// acpStream opens the connection's stream, or session sid's.
func (e *env) acpStream(auth []string, conn, sid string, opts ...func(*streamOptions)) *sseStream {
	e.t.Helper()
	h := func(o *streamOptions) {
		if o.header == nil {
			o.header = http.Header{}
		}
		o.header.Set("Accept", "text/event-stream")
		o.header.Set(hdrConn, conn)
		if sid != "" {
			o.header.Set(hdrSession, sid)
		}
		for _, a := range auth {
			o.header.Add("Authorization", a)
		}
	}
	return e.stream("/acp", append([]func(*streamOptions){h}, opts...)...)
}

// rpcMessage is the part of a JSON-RPC message the tests look at.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// wantRPCResponse checks that data is a JSON-RPC response to the request
// id (raw JSON), a result or an error, and returns it.
func wantRPCResponse(t testing.TB, data, id string) rpcMessage {
	t.Helper()
	var m rpcMessage
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("message %q: %v", data, err)
	}
	if m.JSONRPC != "2.0" || string(m.ID) != id || m.Method != "" || (m.Result == nil) == (m.Error == nil) {
		t.Fatalf("message %s, want a JSON-RPC response to request %s", data, id)
	}
	return m
}

// wantRPCError checks that data is an error response to id with code.
func wantRPCError(t testing.TB, data, id string, code int) {
	t.Helper()
	if m := wantRPCResponse(t, data, id); m.Error == nil || m.Error.Code != code {
		t.Fatalf("message %s, want error %d", data, code)
	}
}

// A request the bridge answers with -32601 whatever it implements: an
// extension method no one has, which may name a session.
func unknownMethod(id int, sid string) string {
	params := `{}`
	if sid != "" {
		params = `{"sessionId":"` + sid + `"}`
	}
	return `{"jsonrpc":"2.0","id":` + jsonNumber(uint64(id)) + `,"method":"_skein_test/nothing","params":` + params + `}`
}

const methodNotFound = -32601

// TestACPHTTPRouting: initialize opens a connection with 200 and its ID;
// every later message is 202, and its answer comes on the stream its
// request's route names: a session's for a request of a session, the
// connection's for one of none.
func TestACPHTTPRouting(t *testing.T) {
	e := newEnv(t, withoutBackend)
	conn := e.acpOpen(nil)
	main := e.acpStream(nil, conn, "")
	s1 := e.acpStream(nil, conn, "s1")

	if r := e.acpPost(nil, unknownMethod(2, ""), hdrConn, conn); r.status != http.StatusAccepted {
		t.Fatalf("POST a request = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, main.next().Data, "2", methodNotFound)

	if r := e.acpPost(nil, unknownMethod(3, "s1"), hdrConn, conn, hdrSession, "s1"); r.status != http.StatusAccepted {
		t.Fatalf("POST a request of session s1 = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, s1.next().Data, "3", methodNotFound)

	// session/load's answer comes on the session's stream, after the
	// replay the bridge sent there before it (the SDK's own server puts
	// it on the connection's, where it may overtake the replay).
	load := `{"jsonrpc":"2.0","id":4,"method":"session/load","params":{"sessionId":"s1","cwd":"/","mcpServers":[]}}`
	if r := e.acpPost(nil, load, hdrConn, conn, hdrSession, "s1"); r.status != http.StatusAccepted {
		t.Fatalf("POST session/load = %d %s, want 202", r.status, r.body)
	}
	wantRPCResponse(t, s1.next().Data, "4")

	// A notification is 202 too, and answered by nothing.
	if r := e.acpPost(nil, `{"jsonrpc":"2.0","method":"_skein_test/note","params":{}}`, hdrConn, conn); r.status != http.StatusAccepted {
		t.Fatalf("POST a notification = %d %s, want 202", r.status, r.body)
	}

	// A session's stream without a receiver keeps its messages for the
	// next one.
	if r := e.acpPost(nil, unknownMethod(5, "s2"), hdrConn, conn, hdrSession, "s2"); r.status != http.StatusAccepted {
		t.Fatalf("POST a request of session s2 = %d %s, want 202", r.status, r.body)
	}
	if r := e.acpPost(nil, unknownMethod(6, ""), hdrConn, conn); r.status != http.StatusAccepted {
		t.Fatalf("POST = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, main.next().Data, "6", methodNotFound)
	wantRPCError(t, e.acpStream(nil, conn, "s2").next().Data, "5", methodNotFound)
}

// TestACPHTTPRefusals: each malformed request gets its typed answer, and
// the connection goes on.
func TestACPHTTPRefusals(t *testing.T) {
	e := newEnv(t, withoutBackend)
	conn := e.acpOpen(nil)
	main := e.acpStream(nil, conn, "")

	tests := []struct {
		name   string
		body   string
		hdr    []string
		status int
		code   events.Code
	}{
		{"no connection", unknownMethod(2, ""), nil, http.StatusBadRequest, events.CodeInvalidRequest},
		{"unknown connection", unknownMethod(2, ""), []string{hdrConn, "nosuch"}, http.StatusNotFound, events.CodeNotFound},
		{"initialize on a connection", acpInitialize, []string{hdrConn, conn}, http.StatusBadRequest, events.CodeInvalidRequest},
		{"a session's without its header", unknownMethod(2, "s1"), []string{hdrConn, conn}, http.StatusBadRequest, events.CodeInvalidRequest},
		{"a session-scoped method without the header", `{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{}}`, []string{hdrConn, conn}, http.StatusBadRequest, events.CodeInvalidRequest},
		{"another session's header", unknownMethod(2, "s1"), []string{hdrConn, conn, hdrSession, "s2"}, http.StatusBadRequest, events.CodeInvalidRequest},
		{"text/plain", unknownMethod(2, ""), []string{hdrConn, conn, "Content-Type", "text/plain"}, http.StatusUnsupportedMediaType, events.CodeUnsupportedMediaType},
		{"no content type", unknownMethod(2, ""), []string{hdrConn, conn, "Content-Type", ""}, http.StatusUnsupportedMediaType, events.CodeUnsupportedMediaType},
		{"initialize without an ID", `{"jsonrpc":"2.0","id":null,"method":"initialize","params":{}}`, nil, http.StatusBadRequest, events.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.acpPost(nil, tt.body, tt.hdr...), tt.status, tt.code)
		})
	}

	// A body that is no message is answered as JSON-RPC answers it, as
	// the other transports do: one error, id null.
	for _, tt := range []struct {
		name, body string
		code       int
	}{
		{"a batch", `[` + unknownMethod(2, "") + `]`, -32600},
		{"not JSON", `{"jsonrpc":`, -32700},
		{"not an object", `"hello"`, -32600},
	} {
		r := e.acpPost(nil, tt.body, hdrConn, conn)
		if r.status != http.StatusBadRequest {
			t.Fatalf("POST %s = %d %s, want 400", tt.name, r.status, r.body)
		}
		wantRPCError(t, string(r.body), "null", tt.code)
	}

	// The charset parameter is fine; the connection still answers.
	if r := e.acpPost(nil, unknownMethod(7, ""), hdrConn, conn, "Content-Type", "application/json; charset=utf-8"); r.status != http.StatusAccepted {
		t.Fatalf("POST with a charset = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, main.next().Data, "7", methodNotFound)

	// GET: the stream's media type, its connection, its one receiver.
	get := func(hdr ...string) response {
		t.Helper()
		return e.do(http.MethodGet, "/acp", "", hdr...)
	}
	wantError(t, get(hdrConn, conn), http.StatusNotAcceptable, events.CodeNotAcceptable)
	wantError(t, get(hdrConn, conn, "Accept", "application/json"), http.StatusNotAcceptable, events.CodeNotAcceptable)
	wantError(t, get("Accept", "text/event-stream"), http.StatusBadRequest, events.CodeInvalidRequest)
	wantError(t, get("Accept", "text/event-stream", hdrConn, "nosuch"), http.StatusNotFound, events.CodeNotFound)
	wantError(t, get("Accept", "text/event-stream", hdrConn, conn), http.StatusConflict, events.CodeStreamBusy)
	e.acpStream(nil, conn, "s1")
	wantError(t, get("Accept", "text/event-stream", hdrConn, conn, hdrSession, "s1"), http.StatusConflict, events.CodeStreamBusy)

	// DELETE: its connection, once.
	wantError(t, e.do(http.MethodDelete, "/acp", ""), http.StatusBadRequest, events.CodeInvalidRequest)
	wantError(t, e.do(http.MethodDelete, "/acp", "", hdrConn, "nosuch"), http.StatusNotFound, events.CodeNotFound)
	if r := e.do(http.MethodPut, "/acp", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("PUT /acp = %d, want 405", r.status)
	}
}

// TestACPHTTPDelete: DELETE ends the connection: its streams end, and it
// is unknown from then on.
func TestACPHTTPDelete(t *testing.T) {
	e := newEnv(t, withoutBackend)
	conn := e.acpOpen(nil)
	main := e.acpStream(nil, conn, "")
	if r := e.do(http.MethodDelete, "/acp", "", hdrConn, conn); r.status != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s, want 202", r.status, r.body)
	}
	if got := main.ended(); len(got) != 0 {
		t.Errorf("the stream carried %v after DELETE, want nothing", got)
	}
	wantError(t, e.acpPost(nil, unknownMethod(2, ""), hdrConn, conn), http.StatusNotFound, events.CodeNotFound)
	wantError(t, e.do(http.MethodDelete, "/acp", "", hdrConn, conn), http.StatusNotFound, events.CodeNotFound)
	if n := testutil.Metric(t, e.reg, "acp_gateway_acp_connection_ends_total", "reason", "closed"); n != 1 {
		t.Errorf("connections ended closed = %v, want 1", n)
	}
}

// TestACPAuth: no token is 401 before anything else, WebSocket included;
// a connection answers its own token only; every role connects.
func TestACPAuth(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(withTokens))
	wantError(t, e.acpPost(nil, acpInitialize), http.StatusUnauthorized, events.CodeUnauthenticated)
	wantError(t, e.acpPost(bearer("not-a-token"), acpInitialize), http.StatusUnauthorized, events.CodeUnauthenticated)

	conn := e.acpOpen(bearer(userToken))
	main := e.acpStream(bearer(userToken), conn, "")
	for _, other := range [][]string{bearer(adminToken), bearer(otherToken)} {
		wantError(t, e.acpPost(other, unknownMethod(2, ""), hdrConn, conn), http.StatusNotFound, events.CodeNotFound)
		wantError(t, e.send(http.MethodGet, "/acp", "", other, "Accept", "text/event-stream", hdrConn, conn), http.StatusNotFound, events.CodeNotFound)
		wantError(t, e.send(http.MethodDelete, "/acp", "", other, hdrConn, conn), http.StatusNotFound, events.CodeNotFound)
	}
	// The same token in another of its namespaces is another caller.
	adminConn := e.acpOpen(bearer(adminToken))
	wantError(t, e.acpPost(bearer(adminToken), unknownMethod(2, ""), hdrConn, adminConn, gateway.HeaderNamespace, "team"), http.StatusNotFound, events.CodeNotFound)
	wantError(t, e.acpPost(nil, unknownMethod(2, ""), hdrConn, conn), http.StatusUnauthorized, events.CodeUnauthenticated)
	if r := e.acpPost(bearer(userToken), unknownMethod(2, ""), hdrConn, conn); r.status != http.StatusAccepted {
		t.Fatalf("POST with the owner's token = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, main.next().Data, "2", methodNotFound)

	// The read role connects: what it may do there is the API's to say.
	e.acpOpen(bearer(readToken))

	// The WebSocket's upgrade is refused before it upgrades.
	for _, auth := range [][]string{nil, bearer("not-a-token")} {
		_, resp, err := e.dialACP(auth)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("WebSocket with %q = %v, %v; want 401", auth, resp, err)
		}
	}
	ws, resp, err := e.dialACP(bearer(readToken))
	if err != nil {
		t.Fatalf("WebSocket with a read token: %v", err)
	}
	defer ws.CloseNow()
	if resp.Header.Get(hdrConn) == "" {
		t.Errorf("the 101 has no %s", hdrConn)
	}
}

// TestACPConnectionLimit: a principal holds at most ACPMaxConns
// connections of both profiles; one more is 429 with Retry-After, until
// one ends. Another principal has its own.
func TestACPConnectionLimit(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) {
		withTokens(c)
		c.ACPMaxConns = 2
	}))
	first := e.acpOpen(bearer(userToken))
	ws, _, err := e.dialACP(bearer(userToken))
	if err != nil {
		t.Fatalf("WebSocket: %v", err)
	}
	r := e.acpPost(bearer(userToken), acpInitialize)
	wantError(t, r, http.StatusTooManyRequests, events.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	if _, resp, err := e.dialACP(bearer(userToken)); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a third connection over WebSocket = %v, %v; want 429", resp, err)
	}
	e.acpOpen(bearer(adminToken))

	if r := e.send(http.MethodDelete, "/acp", "", bearer(userToken), hdrConn, first); r.status != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s, want 202", r.status, r.body)
	}
	e.acpOpen(bearer(userToken))
	// A closed WebSocket gives its place back once its handler is done.
	_ = ws.CloseNow()
	testutil.Eventually(t, "the WebSocket's place given back", func() bool {
		r := e.acpPost(bearer(userToken), acpInitialize)
		return r.status == http.StatusOK
	})
}

// TestACPIdle: a connection with no receiver and no message ends after
// ACPIdleTimeout; one whose stream is read does not. Without a backend,
// each initialize waits out rpc.NoRespondersGrace for the agents' list,
// longer than the idle timeout: a connection whose initialize is still
// being answered is not idle either.
func TestACPIdle(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) { c.ACPIdleTimeout = time.Second }))
	read := e.acpOpen(nil)
	main := e.acpStream(nil, read, "")
	idle := e.acpOpen(nil)
	testutil.Eventually(t, "the idle connection ended", func() bool {
		return testutil.Metric(t, e.reg, "acp_gateway_acp_connection_ends_total", "reason", "idle") == 1
	})
	wantError(t, e.acpPost(nil, unknownMethod(2, ""), hdrConn, idle), http.StatusNotFound, events.CodeNotFound)
	if r := e.acpPost(nil, unknownMethod(2, ""), hdrConn, read); r.status != http.StatusAccepted {
		t.Fatalf("POST to the connection being read = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, main.next().Data, "2", methodNotFound)
}

// TestACPOverflow: a connection whose client leaves more unread than its
// streams hold ends.
func TestACPOverflow(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) { c.StreamBufferBytes = 1 << 10 }))
	conn := e.acpOpen(nil)
	testutil.Eventually(t, "the connection ended", func() bool {
		r := e.acpPost(nil, unknownMethod(2, ""), hdrConn, conn)
		return r.status == http.StatusNotFound
	})
	if n := testutil.Metric(t, e.reg, "acp_gateway_acp_connection_ends_total", "reason", "overflow"); n != 1 {
		t.Errorf("connections ended by overflow = %v, want 1", n)
	}
}

// TestACPMessageSize: a message over acpbridge.MaxMessageBytes is 413 and
// read no further than that.
func TestACPMessageSize(t *testing.T) {
	e := newEnv(t, withoutBackend)
	conn := e.acpOpen(nil)
	big := `{"jsonrpc":"2.0","method":"_skein_test/note","params":{"x":"` + strings.Repeat("x", acpbridge.MaxMessageBytes) + `"}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/acp", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hdrConn, conn)
	resp, err := e.client.Do(req)
	if err != nil {
		return // the server closed the connection while the client still wrote: refused as well
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	wantError(t, response{status: resp.StatusCode, header: resp.Header, body: b}, http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
	// The connection goes on.
	main := e.acpStream(nil, conn, "")
	if r := e.acpPost(nil, unknownMethod(2, ""), hdrConn, conn); r.status != http.StatusAccepted {
		t.Fatalf("POST = %d %s, want 202", r.status, r.body)
	}
	wantRPCError(t, main.next().Data, "2", methodNotFound)
}

// dialACP opens a WebSocket to /acp with the given Authorization headers.
// The socket is closed when the test ends.
func (e *env) dialACP(auth []string, hdr ...string) (*websocket.Conn, *http.Response, error) {
	e.t.Helper()
	h := http.Header{}
	for _, a := range auth {
		h.Add("Authorization", a)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	ws, resp, err := websocket.Dial(e.t.Context(), "ws"+strings.TrimPrefix(e.url, "http")+"/acp",
		&websocket.DialOptions{HTTPHeader: h, HTTPClient: e.client})
	if err == nil {
		e.t.Cleanup(func() { _ = ws.CloseNow() })
	}
	return ws, resp, err
}
