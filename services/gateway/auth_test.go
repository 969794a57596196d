package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/gateway"
)

// The security suite: every route of the route table, tried without a
// token, with a wrong one, with two, and with a read token where it writes;
// and every session route against another namespace's session. Each
// attempt gets its typed error, and leaves the log and the buckets as they
// were.

// The tokens of the suite, and the namespace none of them but other's holds.
const (
	adminToken = "admin-secret-token"
	userToken  = "user-secret-token"
	readToken  = "read-secret-token"
	otherToken = "other-secret-token"
	otherNS    = events.Namespace("other")
)

func suiteTokens() []gateway.Token {
	return []gateway.Token{
		{SHA256: gateway.HashToken(adminToken), Principal: "alice", Namespaces: []string{"default", "team"}, Role: gateway.RoleAdmin},
		{SHA256: gateway.HashToken(userToken), Principal: "bob", Namespaces: []string{"default"}, Role: gateway.RoleUser},
		{SHA256: gateway.HashToken(readToken), Principal: "carol", Namespaces: []string{"default"}, Role: gateway.RoleRead},
		{SHA256: gateway.HashToken(otherToken), Principal: "dave", Namespaces: []string{string(otherNS)}, Role: gateway.RoleUser},
	}
}

// withTokens configures the suite's tokens. The suite sends many requests
// without a valid token from one address, which the backoff would start
// refusing unread (429): TestSecurityFailedAuthBackoff tests it, and the
// others are let through.
func withTokens(c *gateway.Config) {
	c.Auth.Tokens = suiteTokens()
	c.AuthFailuresFree = 1 << 20
}

// routeRequest is a request of one route: a path with its wildcards filled
// in for session sid, and a body the route accepts, so that a refusal is
// the authentication's and not the body's.
func routeRequest(rt gateway.Route, sid string) (path, body string) {
	path = strings.NewReplacer("{id}", sid, "{requestId}", "perm-1", "{configId}", "mode", "{transferId}", "r1~abc").Replace(rt.Path)
	switch {
	case rt.Method == http.MethodGet || rt.Method == http.MethodDelete:
		return path, ""
	case rt.Method == http.MethodPut && rt.Path == "/v1/sessions/{id}":
		return path, `{"agent":"demo"}`
	case rt.Method == http.MethodPatch:
		return path, `{"title":"a title"}`
	case strings.HasSuffix(rt.Path, "/prompt"):
		return path, `{"content":[{"type":"text","text":"hello"}]}`
	case strings.Contains(rt.Path, "/permissions/"):
		return path, `{"optionId":"allow"}`
	case strings.Contains(rt.Path, "/inputs/"):
		return path, `{"action":"accept","content":{"name":"x"}}`
	case strings.Contains(rt.Path, "/config/"):
		return path, `{"value":"fast"}`
	case strings.HasSuffix(rt.Path, "/fork"):
		return path, `{"sessionId":"forked"}`
	case strings.HasSuffix(rt.Path, "/files/uploads"):
		return path, `{"name":"a.txt","size":1}`
	case strings.HasSuffix(rt.Path, "/files/uploads/{transferId}"):
		return path, `{"offset":0,"data":"aA=="}`
	}
	return path, `{}`
}

func isPublicRoute(rt gateway.Route) bool { return rt.Path == "/healthz" || rt.Path == "/readyz" }

// send sends one request with the given Authorization headers (each value
// its own header line) and extra headers.
func (e *env) send(method, path, body string, auth []string, hdr ...string) response {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.url+path, r)
	if err != nil {
		e.t.Fatalf("NewRequest: %v", err)
	}
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func bearer(token string) []string { return []string{"Bearer " + token} }

// awaitProjected waits until the projection of session sid of namespace ns
// reflects the newest record of its log: the session service writes it
// after the append a prompt's caller saw, so a snapshot of the streams
// taken before that would see it change.
func (e *env) awaitProjected(ns events.Namespace, sid events.SessionID) {
	e.t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	kv, err := js.KeyValue(e.t.Context(), events.BucketSessions)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := testutil.Poll(e.t.Context(), "the projection of "+string(sid), func() (bool, error) {
		last, err := eventlog.Last(e.t.Context(), js, events.StreamLog, events.LogFilter(ns, sid))
		if err != nil || last == nil {
			return false, err
		}
		entry, err := kv.Get(e.t.Context(), events.SessionKey(ns, sid))
		if err != nil {
			return false, nil
		}
		m, err := events.Decode[events.SessionMeta](entry.Value())
		return err == nil && m.LogPosition >= last.Sequence, err
	}); err != nil {
		e.t.Fatal(err)
	}
}

// streamStates returns the state of every stream, the log's and the
// buckets', but ACP_RUNNERS: the fake runner's heartbeat refreshes it on a
// timer of its own.
func (e *env) streamStates() map[string]jetstream.StreamState {
	e.t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]jetstream.StreamState{}
	names := js.StreamNames(e.t.Context())
	for name := range names.Name() {
		if name == "KV_"+events.BucketRunners {
			continue
		}
		s, err := js.Stream(e.t.Context(), name)
		if err != nil {
			e.t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(e.t.Context())
		if err != nil {
			e.t.Fatalf("stream %s: %v", name, err)
		}
		st := info.State
		st.Consumers = 0 // a watch's or a stream's reader comes and goes
		out[name] = st
	}
	if err := names.Err(); err != nil {
		e.t.Fatalf("stream names: %v", err)
	}
	if _, ok := out[events.StreamLog]; !ok {
		e.t.Fatalf("no %s among the streams %v", events.StreamLog, out)
	}
	return out
}

func (e *env) wantStreamsUnchanged(before map[string]jetstream.StreamState) {
	e.t.Helper()
	after := e.streamStates()
	for name, b := range before {
		a := after[name]
		if a.Msgs != b.Msgs || a.Bytes != b.Bytes || a.LastSeq != b.LastSeq || a.FirstSeq != b.FirstSeq {
			e.t.Errorf("stream %s changed: before %d msgs (seq %d..%d), after %d msgs (seq %d..%d)",
				name, b.Msgs, b.FirstSeq, b.LastSeq, a.Msgs, a.FirstSeq, a.LastSeq)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			e.t.Errorf("stream %s was created", name)
		}
	}
}

func TestAuthEveryRoute(t *testing.T) {
	e := newEnv(t, withConfig(withTokens))
	e.backend.Open("s1", "demo")
	e.backend.Say("s1", "secret")
	e.awaitProjected(events.DefaultNamespace, "s1")
	before := e.streamStates()

	attempts := []struct {
		name string
		auth []string
	}{
		{"missing", nil},
		{"empty", []string{""}},
		{"wrong", bearer("not-a-token")},
		{"wrong scheme", []string{"Basic " + adminToken}},
		{"no scheme", []string{adminToken}},
		{"empty bearer", []string{"Bearer "}},
		{"hash as token", bearer(gateway.HashToken(adminToken))},
		{"duplicate", []string{"Bearer " + adminToken, "Bearer " + adminToken}},
		{"duplicate, one wrong", []string{"Bearer not-a-token", "Bearer " + adminToken}},
	}
	var bodies []string
	for _, rt := range gateway.Routes() {
		path, body := routeRequest(rt, "s1")
		if isPublicRoute(rt) {
			if r := e.send(rt.Method, path, "", nil); r.status != http.StatusOK {
				t.Errorf("%s %s without a token = %d %s, want 200", rt.Method, rt.Path, r.status, r.body)
			}
			continue
		}
		for _, a := range attempts {
			r := e.send(rt.Method, path, body, a.auth)
			got := wantError(t, r, http.StatusUnauthorized, events.CodeUnauthenticated)
			if h := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
				t.Errorf("%s %s, %s: WWW-Authenticate = %q, want a Bearer challenge", rt.Method, rt.Path, a.name, h)
			}
			bodies = append(bodies, got.Error.Message)
		}
		if rt.Method != http.MethodGet {
			r := e.send(rt.Method, path, body, bearer(readToken))
			wantError(t, r, http.StatusForbidden, events.CodeForbidden)
		}
	}
	// Nothing else is revealed: every refusal says the same.
	for _, m := range bodies {
		if m != bodies[0] {
			t.Errorf("401 messages differ: %q and %q", bodies[0], m)
		}
	}
	e.wantStreamsUnchanged(before)
	for _, secret := range []string{adminToken, userToken, readToken, gateway.HashToken(adminToken), gateway.HashToken(readToken)} {
		if strings.Contains(e.logs.String(), secret) {
			t.Errorf("the log holds a token or its hash")
		}
	}
}

// TestAuthOtherNamespace: a session of another namespace answers every
// session route exactly as a missing session does.
func TestAuthOtherNamespace(t *testing.T) {
	e := newEnv(t, withConfig(withTokens))
	const sid = "theirs"
	var routes []gateway.Route
	for _, rt := range gateway.Routes() {
		// Opening is not an answer about someone else's session: it opens
		// the caller's own, in the caller's namespace.
		if strings.Contains(rt.Path, "{id}") && !(rt.Method == http.MethodPut && rt.Path == "/v1/sessions/{id}") {
			routes = append(routes, rt)
		}
	}
	answers := func() []string {
		var out []string
		for _, rt := range routes {
			path, body := routeRequest(rt, sid)
			if rt.Path == "/v1/sessions/{id}/events" || rt.Path == "/v1/sessions/{id}/watch" {
				path += "?after=0"
			}
			r := e.send(rt.Method, path, body, bearer(userToken))
			out = append(out, rt.Method+" "+rt.Path+" → "+normalize(t, r))
		}
		return out
	}
	missing := answers()

	e.backend.In(otherNS).Open(sid, "demo")
	e.backend.In(otherNS).Say(sid, "secret")
	e.awaitProjected(otherNS, sid)
	if r := e.send(http.MethodGet, "/v1/sessions/"+sid, "", bearer(otherToken)); r.status != http.StatusOK {
		t.Fatalf("GET with the owner's token = %d %s, want 200", r.status, r.body)
	}
	before := e.streamStates()
	foreign := answers()
	e.wantStreamsUnchanged(before)
	for i := range missing {
		if foreign[i] != missing[i] {
			t.Errorf("another namespace's session:\n  %s\nwant what a missing one gets:\n  %s", foreign[i], missing[i])
		}
	}
	t.Logf("answers: %q", foreign)
	var notFound int
	for _, a := range foreign {
		if strings.Contains(a, string(events.CodeSessionNotFound)) {
			notFound++
		}
	}
	if notFound == 0 {
		t.Errorf("no route answered %s: %q", events.CodeSessionNotFound, foreign)
	}
	if e.backend.Exists(sid) {
		t.Errorf("session %s appeared in namespace %s", sid, ns)
	}
}

// normalize returns a response as status and body, the request ID left
// out, since it differs on every request.
func normalize(t *testing.T, r response) string {
	t.Helper()
	var body map[string]any
	if json.Unmarshal(r.body, &body) == nil {
		if e, ok := body["error"].(map[string]any); ok {
			delete(e, "requestId")
		}
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		return http.StatusText(r.status) + " " + string(b)
	}
	return http.StatusText(r.status) + " " + string(r.body)
}

func TestAuthNamespaces(t *testing.T) {
	e := newEnv(t, withConfig(withTokens))
	e.backend.In("team").Open("s1", "demo")
	e.backend.Open("s1", "plain")
	agentOf := func(r response) string {
		t.Helper()
		var s struct{ Agent string }
		if r.status != http.StatusOK || json.Unmarshal(r.body, &s) != nil {
			t.Fatalf("GET = %d %s, want 200", r.status, r.body)
		}
		return s.Agent
	}
	// The first namespace is the default; the header picks another of the
	// token's.
	if got := agentOf(e.send(http.MethodGet, "/v1/sessions/s1", "", bearer(adminToken))); got != "plain" {
		t.Errorf("default namespace: agent %q, want plain", got)
	}
	if got := agentOf(e.send(http.MethodGet, "/v1/sessions/s1", "", bearer(adminToken), gateway.HeaderNamespace, "team")); got != "demo" {
		t.Errorf("namespace team: agent %q, want demo", got)
	}
	// A namespace the token does not hold, whether it exists or not.
	for _, other := range []string{"team", string(otherNS), "nosuch"} {
		r := e.send(http.MethodGet, "/v1/sessions/s1", "", bearer(userToken), gateway.HeaderNamespace, other)
		wantError(t, r, http.StatusForbidden, events.CodeForbidden)
	}
	r := e.send(http.MethodGet, "/v1/sessions/s1", "", bearer(adminToken), gateway.HeaderNamespace, "Not.Valid")
	wantError(t, r, http.StatusBadRequest, events.CodeInvalidNamespace)
	// The read role reads.
	if got := agentOf(e.send(http.MethodGet, "/v1/sessions/s1", "", bearer(readToken))); got != "plain" {
		t.Errorf("read token: agent %q, want plain", got)
	}
	if r := e.send(http.MethodGet, "/v1/sessions/s1/history?after=0", "", bearer(readToken)); r.status != http.StatusOK {
		t.Errorf("read token, history = %d %s, want 200", r.status, r.body)
	}
}

// TestAuthTokensFileReload: the file is read at the start and again when it
// changes; a change that does not parse keeps the tokens read before.
func TestAuthTokensFileReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	writeTokens := func(tokens ...gateway.Token) { t.Helper(); writeTokensFile(t, file, tokens...) }
	bob := gateway.Token{SHA256: gateway.HashToken(userToken), Principal: "bob", Namespaces: []string{"default"}, Role: gateway.RoleUser}
	carol := gateway.Token{SHA256: gateway.HashToken(readToken), Principal: "carol", Namespaces: []string{"default"}, Role: gateway.RoleUser}
	writeTokens(bob)
	e := newEnv(t, withConfig(func(c *gateway.Config) {
		c.Auth.TokensFile = file
		c.Auth.TokensReload = 0 // every request checks the file
	}))
	status := func(token string) int {
		t.Helper()
		return e.send(http.MethodGet, "/v1/agents", "", bearer(token)).status
	}
	if status(userToken) != http.StatusOK || status(readToken) != http.StatusUnauthorized {
		t.Fatalf("bob %d, carol %d: want 200 and 401", status(userToken), status(readToken))
	}
	writeTokens(carol)
	if status(userToken) != http.StatusUnauthorized || status(readToken) != http.StatusOK {
		t.Fatalf("after the change: bob %d, carol %d: want 401 and 200", status(userToken), status(readToken))
	}
	if err := os.WriteFile(file, []byte(`[{"sha256":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if status(readToken) != http.StatusOK {
		t.Fatalf("after a broken change: carol %d, want 200 (the tokens read before)", status(readToken))
	}
	if !strings.Contains(e.logs.String(), "tokens file not reloaded") {
		t.Errorf("the broken file was not logged")
	}
}

func TestAuthConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(file, []byte(`[{"sha256":"00","principal":"x","namespaces":["default"],"role":"user"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*gateway.Config)
	}{
		{"insecure with tokens", func(c *gateway.Config) { c.Auth.InsecureNoAuth = true; c.Auth.Tokens = suiteTokens() }},
		{"bad static token", func(c *gateway.Config) {
			c.Auth.Tokens = []gateway.Token{{SHA256: "xyz", Principal: "p", Namespaces: []string{"default"}, Role: gateway.RoleUser}}
		}},
		{"missing file", func(c *gateway.Config) { c.Auth.TokensFile = file + ".missing" }},
		{"bad file", func(c *gateway.Config) { c.Auth.TokensFile = file }},
	}
	nc := natstest.Connect(t, natstest.Run(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := gateway.DefaultConfig()
			tt.edit(&cfg)
			var logs bytes.Buffer
			if _, err := gateway.New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), nc, nil); err == nil {
				t.Fatal("New = nil error, want one")
			} else if strings.Contains(err.Error(), "xyz") {
				t.Errorf("error %q quotes the hash", err)
			}
		})
	}
}
