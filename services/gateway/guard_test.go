package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// The security suite's share of connections: clients that hold the
// gateway's connections without using them. Each test talks raw TCP, so
// that it sees what the server does with the connection itself.

// dial opens a raw connection to the gateway.
func dial(t *testing.T, e *env) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c: a read returns EOF
// (or a reset) after whatever response came first. The deadline only
// bounds a test that would otherwise hang on a connection left open.
func closedByServer(t *testing.T, c net.Conn) (status string, closed bool) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "", false // no answer, and the connection still open
	}
	if err != nil {
		return "", true
	}
	_, err = io.Copy(io.Discard, br) // the rest of the response, then the close
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return strings.TrimSpace(line), false
	}
	return strings.TrimSpace(line), true
}

// An unauthenticated request whose body trickles in is answered 401 at
// once, without the body, and its connection is closed: the server once
// read the body first, and 19,995 such clients held as many connections.
func TestSecuritySlowBodyUnauthenticated(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(withTokens))
	c := dial(t, e)
	fmt.Fprintf(c, "PUT /v1/sessions/s1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	status, closed := closedByServer(t, c)
	if !strings.Contains(status, " 401 ") || !closed {
		t.Errorf("slow unauthenticated body: status %q, closed %v; want 401 and the connection closed", status, closed)
	}
}

// An authenticated request whose body does not arrive within the body's
// deadline is cut off, its connection closed.
func TestSecuritySlowBodyDeadline(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) {
		withTokens(c)
		c.BodyReadTimeout = 200 * time.Millisecond
	}))
	c := dial(t, e)
	fmt.Fprintf(c, "PUT /v1/sessions/s1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{", adminToken)
	status, closed := closedByServer(t, c)
	if !closed || strings.Contains(status, " 200 ") {
		t.Errorf("a body that never arrives: status %q, closed %v; want no success and the connection closed", status, closed)
	}
}

// One client address holds at most MaxConnsPerAddr connections; the next
// is closed as it is accepted, and a place freed is usable again.
func TestSecurityConnectionsPerAddress(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) { c.MaxConnsPerAddr = 3 }))
	var held []net.Conn
	for range 3 {
		c := dial(t, e)
		// A request answered proves the connection was accepted and
		// counted before the next one is made.
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
			t.Fatalf("connection %d: %q, %v", len(held)+1, line, err)
		}
		held = append(held, c)
	}
	over := dial(t, e)
	fmt.Fprintf(over, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if status, closed := closedByServer(t, over); status != "" || !closed {
		t.Errorf("a 4th connection: status %q, closed %v; want closed unanswered", status, closed)
	}
	held[0].Close()
	// The server sees the close when it next reads the connection; until
	// then the place is taken, so the test asks until one is free.
	deadline := time.Now().Add(time.Minute)
	for {
		c := dial(t, e)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		if line, err := bufio.NewReader(c).ReadString('\n'); err == nil && strings.Contains(line, " 200 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted after one of three closed")
		}
	}
}

// An address whose requests keep failing authentication waits: past the
// free failures its requests without a valid token are refused unread,
// rate_limited with Retry-After.
func TestSecurityFailedAuthBackoff(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) {
		withTokens(c)
		c.AuthFailuresFree = 3
		c.AuthBackoffMax = time.Hour // the test never waits one out
	}))
	for i := range 4 {
		r := e.send(http.MethodGet, "/v1/sessions", "", bearer(fmt.Sprintf("guess-%d", i)))
		if r.status != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, r.status)
		}
	}
	for _, auth := range [][]string{bearer("guess-4"), nil} {
		r := e.send(http.MethodGet, "/v1/sessions", "", auth)
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
			t.Errorf("a request without a valid token (%q) from a waiting address: %d (Retry-After %q), want 429 with Retry-After", auth, r.status, r.header.Get("Retry-After"))
		}
	}
}

// Every client of a skein dev is on loopback, one address: one client's
// bad tokens once made every other tenant's requests 429. Only requests
// without a valid token count against an address; a valid token's are its
// principal's alone, neither refused by its address's backoff nor
// clearing it, and one principal's burst does not limit another's.
func TestSecurityLoopbackFailuresSparePrincipals(t *testing.T) {
	const burst = 40
	e := newEnv(t, withConfig(func(c *gateway.Config) {
		withTokens(c)
		c.AuthFailuresFree = 5
		c.AuthBackoffMax = time.Hour
		c.RateLimit, c.RateBurst = 0.001, burst
	}), func(o *envOptions) {
		o.gateway = func(g *gateway.Gateway) { gateway.SetAuthBackoffFirst(g, time.Hour) }
	})
	// alice guesses from loopback past the free failures: her address
	// then waits an hour.
	guesses := 6
	for i := range guesses {
		if r := e.send(http.MethodGet, "/v1/sessions", "", bearer(fmt.Sprintf("guess-%d", i))); r.status != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, r.status)
		}
	}
	refused, guessed := 0, 0
	for i := range burst - 1 {
		// bob, with his valid token, on the address alice's guesses hold.
		if r := e.send(http.MethodGet, "/v1/sessions", "", bearer(userToken)); r.status != http.StatusOK {
			refused++
		}
		if r := e.send(http.MethodGet, "/v1/sessions", "", bearer(fmt.Sprintf("guess-%d", guesses+i))); r.status == http.StatusTooManyRequests {
			guessed++
		}
	}
	if refused > 0 || guessed != burst-1 {
		t.Errorf("bob's valid requests refused: %d of %d, want 0; guesses refused 429: %d of %d, want all", refused, burst-1, guessed, burst-1)
	}
	// alice spends her whole burst; bob, who has one request left of his,
	// is not limited by hers.
	for i := range burst {
		if r := e.send(http.MethodGet, "/v1/sessions", "", bearer(adminToken)); r.status != http.StatusOK {
			t.Fatalf("alice's request %d within her burst: %d %s", i, r.status, r.body)
		}
	}
	wantError(t, e.send(http.MethodGet, "/v1/sessions", "", bearer(adminToken)), http.StatusTooManyRequests, events.CodeRateLimited)
	if r := e.send(http.MethodGet, "/v1/sessions", "", bearer(userToken)); r.status != http.StatusOK {
		t.Errorf("bob after alice's burst: %d %s, want 200", r.status, r.body)
	}
}

// writeTokensFile puts tokens in file, by rename, as an editor or a deploy
// would.
func writeTokensFile(t *testing.T, file string, tokens ...gateway.Token) {
	t.Helper()
	b, err := json.Marshal(tokens)
	if err != nil {
		t.Fatal(err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// A token removed from the tokens file, or no longer given its namespace,
// ends the event streams and watches opened with it: they once went on
// delivering. Neither the stream nor the watch makes a request after the
// change; the gateway finds it on its own.
func TestSecurityRevokedTokenEndsStreams(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	bob := gateway.Token{SHA256: gateway.HashToken(userToken), Principal: "bob", Namespaces: []string{"default"}, Role: gateway.RoleUser}
	carol := gateway.Token{SHA256: gateway.HashToken(readToken), Principal: "carol", Namespaces: []string{"default"}, Role: gateway.RoleRead}
	alice := gateway.Token{SHA256: gateway.HashToken(adminToken), Principal: "alice", Namespaces: []string{"default"}, Role: gateway.RoleAdmin}
	writeTokensFile(t, file, alice, bob, carol)
	e := newEnv(t, withConfig(func(c *gateway.Config) {
		c.Auth.TokensFile = file
		c.Auth.TokensReload = 20 * time.Millisecond
	}))
	e.backend.Open("s1", "demo")
	e.backend.Open("s2", "demo")
	subs := func() float64 { return testutil.Metric(t, e.reg, "acp_gateway_live_subscriptions") }

	// bob's stream of s1, and carol's watch of s2, each holding a feed.
	s := e.stream("/v1/sessions/s1/events", withHeader("Authorization", "Bearer "+userToken))
	// A watch after where s2's log ends waits.
	var opened struct{ Cursor uint64 }
	if r := e.send(http.MethodGet, "/v1/sessions/s2/watch?timeout=1ms", "", bearer(readToken)); r.status != http.StatusOK || json.Unmarshal(r.body, &opened) != nil {
		t.Fatalf("carol's first watch = %d %s", r.status, r.body)
	}
	watched := make(chan response, 1)
	go func() {
		watched <- e.send(http.MethodGet, "/v1/sessions/s2/watch?timeout=30&after="+strconv.FormatUint(opened.Cursor, 10), "", bearer(readToken))
	}()
	testutil.Eventually(t, "both feeds subscribed", func() bool { return subs() == 4 })

	// bob is removed; carol keeps her token but loses the namespace.
	carol.Namespaces = []string{"elsewhere"}
	writeTokensFile(t, file, alice, carol)

	evs := s.ended()
	if len(evs) == 0 || evs[len(evs)-1].Event != "error" || !strings.Contains(evs[len(evs)-1].Data, "unauthenticated") {
		t.Errorf("bob's stream ended with %+v, want an unauthenticated error event", evs)
	}
	if r := <-watched; r.status != http.StatusUnauthorized {
		t.Errorf("carol's watch = %d %s, want 401", r.status, r.body)
	}
	// alice, untouched, still streams.
	e.stream("/v1/sessions/s1/events", withHeader("Authorization", "Bearer "+adminToken))
}
