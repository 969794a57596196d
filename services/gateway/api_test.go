package gateway_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/gateway"
)

func TestOpenAndGetSession(t *testing.T) {
	e := newEnv(t)
	// JsonUtf8 fields must reach the session service byte for byte,
	// spaces and key order included.
	work, a, b := e.backend.WorkDir("work"), e.backend.WorkDir("a"), e.backend.WorkDir("b")
	var (
		dirs    = `[ "` + a + `", "` + b + `" ]`
		env     = `{"B": "2", "A": "1"}`
		servers = `[{"name":"fs","command":"mcp-fs","args":[],"env":[]}]`
	)
	body := `{"agent":"demo","cwd":"` + work + `","additionalDirectories":` + dirs + `,"env":` + env +
		`,"mcpServers":` + servers + `,"permissionPolicy":"ask","skipOsInstructions":true,"additionalInstructions":"be brief"}`
	r := e.do(http.MethodPut, "/v1/sessions/s1", body)
	if r.status != http.StatusOK || string(r.body) != "{}" {
		t.Fatalf("PUT = %d %s, want 200 {}", r.status, r.body)
	}
	req, _ := e.backend.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
	if req == nil {
		t.Fatal("the session service got no open request")
	}
	if got := deref(req.SessionID); got != "s1" {
		t.Errorf("sessionId = %q, want s1", got)
	}
	for name, c := range map[string][2]string{
		"agent":                  {req.Agent, "demo"},
		"cwd":                    {deref(req.Cwd), work},
		"additionalDirectories":  {string(req.AdditionalDirectories), dirs},
		"env":                    {string(req.Env), env},
		"mcpServers":             {string(req.McpServers), servers},
		"permissionPolicy":       {deref(req.PermissionPolicy), "ask"},
		"additionalInstructions": {deref(req.AdditionalInstructions), "be brief"},
	} {
		if c[0] != c[1] {
			t.Errorf("%s = %q, want %q", name, c[0], c[1])
		}
	}
	if req.SkipOsInstructions == nil || !*req.SkipOsInstructions {
		t.Errorf("skipOsInstructions = %v, want true", req.SkipOsInstructions)
	}

	// Opening again with the same options is idempotent.
	if r := e.do(http.MethodPut, "/v1/sessions/s1", body); r.status != http.StatusOK {
		t.Fatalf("second PUT = %d %s, want 200", r.status, r.body)
	}

	r = e.do(http.MethodGet, "/v1/sessions/s1", "")
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET = %d %s, want 200 application/json", r.status, r.header.Get("Content-Type"))
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("GET body %s: %v", r.body, err)
	}
	for k, want := range map[string]string{
		"sessionId":             `"s1"`,
		"agent":                 `"demo"`,
		"cwd":                   `"` + work + `"`,
		"additionalDirectories": `["` + a + `","` + b + `"]`,
		"state":                 `{"status":"idle"}`,
		"latestSequence":        `0`, // no public event yet
	} {
		if string(got[k]) != want {
			t.Errorf("GET %s = %s, want %s", k, got[k], want)
		}
	}
	for _, k := range []string{"createdAt", "updatedAt"} {
		if len(got[k]) == 0 {
			t.Errorf("GET has no %s", k)
		}
	}
	if _, ok := got["title"]; ok {
		t.Errorf("GET has title %s, want it omitted", got["title"])
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestOpenRejectsBadInput(t *testing.T) {
	e := newEnv(t, withConfig(func(c *gateway.Config) { c.MaxBodyBytes = 1024 }))
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		code   events.Code
	}{
		{"malformed JSON", "/v1/sessions/s1", `{"agent":`, 400, events.CodeInvalidRequest},
		{"not an object", "/v1/sessions/s1", `["demo"]`, 400, events.CodeInvalidRequest},
		{"null", "/v1/sessions/s1", `null`, 400, events.CodeInvalidRequest},
		{"empty body", "/v1/sessions/s1", ``, 400, events.CodeInvalidRequest},
		{"unknown field", "/v1/sessions/s1", `{"agent":"demo","agnet":"x"}`, 400, events.CodeInvalidRequest},
		{"session ID in body", "/v1/sessions/s1", `{"agent":"demo","sessionId":"s2"}`, 400, events.CodeInvalidRequest},
		{"trailing data", "/v1/sessions/s1", `{"agent":"demo"} {}`, 400, events.CodeInvalidRequest},
		{"missing agent", "/v1/sessions/s1", `{"cwd":"/x"}`, 400, events.CodeInvalidRequest},
		{"empty cwd", "/v1/sessions/s1", `{"agent":"demo","cwd":""}`, 400, events.CodeInvalidRequest},
		{"directories not strings", "/v1/sessions/s1", `{"agent":"demo","additionalDirectories":[1]}`, 400, events.CodeInvalidRequest},
		{"env not an object", "/v1/sessions/s1", `{"agent":"demo","env":["A=1"]}`, 400, events.CodeInvalidRequest},
		{"env value not a string", "/v1/sessions/s1", `{"agent":"demo","env":{"A":1}}`, 400, events.CodeInvalidRequest},
		{"mcpServers not an array", "/v1/sessions/s1", `{"agent":"demo","mcpServers":{}}`, 400, events.CodeInvalidRequest},
		{"bad policy", "/v1/sessions/s1", `{"agent":"demo","permissionPolicy":"yolo"}`, 400, events.CodeInvalidRequest},
		{"wrong type", "/v1/sessions/s1", `{"agent":"demo","skipOsInstructions":"yes"}`, 400, events.CodeInvalidRequest},
		{"oversize body", "/v1/sessions/s1", `{"agent":"demo","additionalInstructions":"` + strings.Repeat("x", 2048) + `"}`, 413, events.CodePayloadTooLarge},
		{"dot in ID", "/v1/sessions/a.b", `{"agent":"demo"}`, 400, events.CodeInvalidSessionID},
		{"wildcard ID", "/v1/sessions/a*", `{"agent":"demo"}`, 400, events.CodeInvalidSessionID},
		{"escaped space in ID", "/v1/sessions/a%20b", `{"agent":"demo"}`, 400, events.CodeInvalidSessionID},
		{"escaped slash in ID", "/v1/sessions/a%2Fb", `{"agent":"demo"}`, 400, events.CodeInvalidSessionID},
		{"long ID", "/v1/sessions/" + strings.Repeat("a", 129), `{"agent":"demo"}`, 400, events.CodeInvalidSessionID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(http.MethodPut, tt.path, tt.body), tt.status, tt.code)
		})
	}
	if n := e.backend.Calls(events.OpOpenSession); n != 0 {
		t.Errorf("bad input reached NATS: %d open_session calls, want 0", n)
	}
}

func TestOpenServiceErrors(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodPut, "/v1/sessions/s0", `{"agent":"nope"}`), http.StatusNotFound, events.CodeUnknownAgent)
	if r := e.do(http.MethodPut, "/v1/sessions/s1", `{"agent":"demo"}`); r.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}
	wantError(t, e.do(http.MethodPut, "/v1/sessions/s1", `{"agent":"plain"}`), http.StatusConflict, events.CodeSessionConflict)
}

func TestGetSessionNotFound(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody", ""), http.StatusNotFound, events.CodeSessionNotFound)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/no.body", ""), http.StatusBadRequest, events.CodeInvalidSessionID)
}

func TestPrompt(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	content := `[ {"type":"text", "text":"say Hello, world"} ]`
	r := e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"idempotencyKey":"k1","content":`+content+`}`)
	if r.status != http.StatusOK {
		t.Fatalf("POST prompt = %d %s, want 200", r.status, r.body)
	}
	var got struct {
		SessionID  string          `json:"sessionId"`
		Message    json.RawMessage `json:"message"`
		StopReason string          `json:"stopReason"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("prompt body %s: %v", r.body, err)
	}
	// The message as history shows it: Skein's envelope, then the update.
	wantMsg := regexp.MustCompile(`^\{"sessionId":"s1","sequence":\d+,"eventNo":\d+,"timestamp":"[^"]+","durability":"durable","type":"agent_message_chunk","content":\{"type":"text","text":"Hello, world"\},"messageId":"msg_1"\}$`)
	if got.SessionID != "s1" || got.StopReason != "end_turn" || !wantMsg.Match(got.Message) {
		t.Errorf("prompt = %s, want sessionId s1, stopReason end_turn, message matching %s", r.body, wantMsg)
	}
	req, _ := e.backend.LastRequest(events.OpPrompt).(*events.AcpPromptRequest)
	if req == nil || string(req.Content) != content || deref(req.IdempotencyKey) != "k1" || deref(req.SessionID) != "s1" {
		t.Errorf("session service got %+v, want content %s byte for byte, key k1, session s1", req, content)
	}
	// The first prompt titles the session, as GET shows it once the
	// session service has written it.
	var info struct {
		Title *string `json:"title"`
	}
	testutil.Eventually(t, "the session's title", func() bool {
		r := e.do(http.MethodGet, "/v1/sessions/s1", "")
		return json.Unmarshal(r.body, &info) == nil && info.Title != nil
	})
	if got := deref(info.Title); got != "say Hello, world" {
		t.Errorf("title after the first prompt = %q, want %q", got, "say Hello, world")
	}

	// A turn without a message omits it.
	r = e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"stop max_tokens"}]}`)
	if r.status != http.StatusOK || string(r.body) != `{"sessionId":"s1","stopReason":"max_tokens"}` {
		t.Errorf("POST prompt = %d %s, want 200 without message", r.status, r.body)
	}
}

func TestPromptRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	tests := []struct {
		name   string
		body   string
		status int
		code   events.Code
	}{
		{"no content", `{}`, 400, events.CodeInvalidRequest},
		{"null content", `{"content":null}`, 400, events.CodeInvalidRequest},
		{"empty content", `{"content":[]}`, 400, events.CodeInvalidRequest},
		{"content not an array", `{"content":"hi"}`, 400, events.CodeInvalidRequest},
		{"block not an object", `{"content":["hi"]}`, 400, events.CodeInvalidRequest},
		{"block without type", `{"content":[{"text":"hi"}]}`, 400, events.CodeInvalidRequest},
		{"empty idempotency key", `{"idempotencyKey":"","content":[{"type":"text"}]}`, 400, events.CodeInvalidRequest},
		{"long idempotency key", `{"idempotencyKey":"` + strings.Repeat("k", 257) + `","content":[{"type":"text"}]}`, 400, events.CodeInvalidRequest},
		{"unknown field", `{"content":[{"type":"text"}],"stream":true}`, 400, events.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(http.MethodPost, "/v1/sessions/s1/prompt", tt.body), tt.status, tt.code)
		})
	}
	if n := e.backend.Calls(events.OpPrompt); n != 0 {
		t.Errorf("bad input reached NATS: %d prompt calls, want 0", n)
	}
}

func TestPromptServiceErrors(t *testing.T) {
	e := newEnv(t)
	const prompt = `{"content":[{"type":"text","text":"hi"}]}`
	wantError(t, e.do(http.MethodPost, "/v1/sessions/nobody/prompt", prompt), http.StatusNotFound, events.CodeSessionNotFound)

	e.backend.Open("s1", "demo")
	wantError(t, e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"crash 3"}]}`),
		http.StatusBadGateway, events.CodeAdapterExited)

	// A second prompt while one runs is session_busy.
	first := make(chan response, 1)
	go func() {
		first <- e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"pause p1"}]}`)
	}()
	e.backend.Paused("p1")
	wantError(t, e.do(http.MethodPost, "/v1/sessions/s1/prompt", prompt), http.StatusConflict, events.CodeSessionBusy)
	e.backend.Release("p1")
	if r := <-first; r.status != http.StatusOK {
		t.Errorf("first prompt = %d %s, want 200", r.status, r.body)
	}
}

func TestHistory(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	seqs := e.backend.Say("s1", "a", "b") // the prompt, then a and b
	type page struct {
		Events        []json.RawMessage `json:"events"`
		HasMoreBefore bool              `json:"hasMoreBefore"`
		HasMoreAfter  bool              `json:"hasMoreAfter"`
	}
	get := func(query string) page {
		t.Helper()
		r := e.do(http.MethodGet, "/v1/sessions/s1/history"+query, "")
		if r.status != http.StatusOK {
			t.Fatalf("GET history%s = %d %s", query, r.status, r.body)
		}
		var p page
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("history body %s: %v", r.body, err)
		}
		return p
	}
	seqOf := func(p page) []uint64 {
		var out []uint64
		for _, raw := range p.Events {
			out = append(out, decodeEvent(t, string(raw)).Sequence)
		}
		return out
	}

	p := get("?after=0&limit=2")
	if got := seqOf(p); len(got) != 2 || got[0] != seqs[0] || got[1] != seqs[1] || !p.HasMoreAfter || p.HasMoreBefore {
		t.Errorf("after=0&limit=2 = %v more before %v after %v, want %v false true", got, p.HasMoreBefore, p.HasMoreAfter, seqs[:2])
	}
	second := decodeEvent(t, string(p.Events[1]))
	if second.SessionID != "s1" || second.EventNo != 2 || second.Durability != "durable" || second.Type != "agent_message_chunk" ||
		string(second.Content) != `{"type":"text","text":"a"}` {
		t.Errorf("second event = %s, want the public form of event 2", p.Events[1])
	}
	p = get("?before=" + jsonNumber(seqs[2]))
	if got := seqOf(p); len(got) != 2 || got[1] != seqs[1] || !p.HasMoreAfter {
		t.Errorf("before=%d = %v, more after %v, want %v true", seqs[2], got, p.HasMoreAfter, seqs[:2])
	}
	p = get("?after=" + jsonNumber(seqs[2]))
	if len(p.Events) != 0 || p.Events == nil || p.HasMoreAfter {
		t.Errorf("after the end = %+v, want an empty (not null) page", p)
	}
	r := e.do(http.MethodGet, "/v1/sessions/s1/history?after="+jsonNumber(seqs[2]), "")
	if !strings.Contains(string(r.body), `"events":[]`) {
		t.Errorf("empty page = %s, want events []", r.body)
	}
}

func TestHistoryRejectsBadQueries(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	tests := []struct {
		query string
		code  events.Code
	}{
		{"?after=1&before=5", events.CodeInvalidCursor}, // as the history service answers
		{"?limit=10001", events.CodeInvalidRequest},     // past events.MaxHistoryLimit
		{"?after=-1", events.CodeInvalidCursor},
		{"?after=+1", events.CodeInvalidCursor},
		{"?after=1.0", events.CodeInvalidCursor},
		{"?after=", events.CodeInvalidCursor},
		{"?after=0x10", events.CodeInvalidCursor},
		{"?before=18446744073709551616", events.CodeInvalidCursor},
		{"?after=1&after=2", events.CodeInvalidRequest},
		{"?limit=0", events.CodeInvalidRequest},
		{"?limit=4294967296", events.CodeInvalidRequest},
		{"?limit=ten", events.CodeInvalidRequest},
		{"?cursor=1", events.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/history"+tt.query, ""), http.StatusBadRequest, tt.code)
		})
	}
	if n := e.backend.Calls(events.OpReadHistory); n != 0 {
		t.Errorf("bad queries reached NATS: %d read_history calls, want 0", n)
	}
}

// TestHistoryValidationAgrees: what the gateway rejects, the history
// service rejects with the same code when it gets the request directly
// (both call AcpReadHistoryRequest.Validate).
func TestHistoryValidationAgrees(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	for name, tc := range map[string]struct {
		query string
		req   events.AcpReadHistoryRequest
	}{
		"before and after": {"?after=1&before=5", events.AcpReadHistoryRequest{After: new(uint64(1)), Before: new(uint64(5))}},
		"zero limit":       {"?limit=0", events.AcpReadHistoryRequest{Limit: new(uint32(0))}},
		"limit too large":  {"?limit=10001", events.AcpReadHistoryRequest{Limit: new(uint32(events.MaxHistoryLimit + 1))}},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do(http.MethodGet, "/v1/sessions/s1/history"+tc.query, "")
			var body struct {
				Error struct {
					Code events.Code `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			req := tc.req
			req.SessionID = new("s1")
			_, err := rpc.Request(t.Context(), e.nc, events.APISubject(ns, events.OpReadHistory), &req, nil)
			if e := events.AsError(err); e == nil || e.Code != body.Error.Code {
				t.Errorf("gateway says %s, history service says %v", body.Error.Code, err)
			}
		})
	}
}

// TestHistoryCursorExpired: a cursor before the retained history is
// cursor_expired (410), as the history service decides.
func TestHistoryCursorExpired(t *testing.T) {
	e := newEnv(t, withMaxEvents(2))
	e.backend.Open("s1", "demo")
	acc := e.backend.StartTurn("s1", nil, "say a\nmessage\nsay b\nmessage\nsay c")
	e.backend.AwaitTurn("s1", acc)
	first := acc.Sequence // the prompt, pruned
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/history?after="+jsonNumber(first-1), ""), http.StatusGone, events.CodeCursorExpired)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/history?before="+jsonNumber(first+1), ""), http.StatusGone, events.CodeCursorExpired)
}

// TestInternalErrorsAreMasked: errors a service has no reason to send
// (the real ones do not) are answered by a stand-in, for the gateway's
// mapping of every code it may meet.
func TestInternalErrorsAreMasked(t *testing.T) {
	e := newEnv(t, withoutBackend)
	const secret = "nil pointer dereference at store.go:42"
	for _, err := range []error{
		events.Errorf(events.CodeInternal, secret),
		events.Errorf(events.CodeInvalidPayload, secret),
		&events.Error{Code: "from_a_newer_registry", Message: secret},
	} {
		stop := stacktest.AnswerWith(t, e.nc, events.OpUnloadSession, err)
		r := e.do(http.MethodPost, "/v1/sessions/s1/unload", "")
		stop()
		body := wantError(t, r, http.StatusInternalServerError, events.CodeInternal)
		if body.Error.Message != "internal error" || strings.Contains(string(r.body), secret) {
			t.Errorf("%v: body %s, want a masked message", err, r.body)
		}
	}
	// The session service already masks CodeInternal (rpc.RespondError);
	// the other two reach the gateway in full and must be logged.
	if !strings.Contains(e.logs.String(), secret) {
		t.Errorf("log does not hold the masked error %q:\n%s", secret, e.logs.String())
	}
}

func TestUnavailableAndTimeout(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) { c.RequestTimeout = 200 * time.Millisecond }))
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1", ""), http.StatusServiceUnavailable, events.CodeUnavailable)

	// A service that never answers.
	sub, err := e.nc.SubscribeSync(events.APISubject(ns, events.OpGetSession))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1", ""), http.StatusGatewayTimeout, events.CodeTimeout)
}

func TestHealthAndMetrics(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := e.do(http.MethodGet, path, ""); r.status != http.StatusOK {
			t.Errorf("GET %s = %d %s, want 200", path, r.status, r.body)
		}
	}
	e.do(http.MethodGet, "/v1/sessions/nobody", "")
	if got := testutil.Metric(t, e.reg, "acp_gateway_requests_total", "route", "GET /v1/sessions/{id}", "code", "404"); got != 1 {
		t.Errorf("requests_total{route=GET /v1/sessions/{id},code=404} = %v, want 1", got)
	}
	if r := e.do(http.MethodPost, "/v1/sessions/s1", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/sessions/s1 = %d, want 405", r.status)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := gateway.DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	cfg.Addr, cfg.MaxBodyBytes, cfg.StreamBuffer = "", 0, -1
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for an empty address, zero body limit and negative buffer")
	}
	for _, name := range []string{"gateway.http-addr", "gateway.max-body-bytes", "gateway.sse-buffer"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Validate() = %v, want it to name %s", err, name)
		}
	}
}

func TestListAgents(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodGet, "/v1/agents", "")
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/agents = %d %s %s, want 200 application/json", r.status, r.header.Get("Content-Type"), r.body)
	}
	// Sorted by ID, whatever the runner's order (plain, demo).
	// And the runner that offers them, with its labels and load.
	agents := `[` +
		`{"id":"demo","installed":true,"adapterEntrypoint":"` + testAgent + `"},` +
		`{"id":"plain","installed":true,"adapterEntrypoint":"` + testAgent + `"}]`
	want := `{"agents":` + agents + `,"runners":[{"id":"r1","agents":` + agents + `,"labels":{},"placedOnly":false,"load":0,"capacity":64}]}`
	if string(r.body) != want {
		t.Errorf("GET /v1/agents = %s, want %s", r.body, want)
	}
	if req, _ := e.backend.LastRequest(events.OpListAgents).(*events.AcpListAgentsRequest); req == nil || req.Reserved {
		t.Errorf("list_agents request = %+v, want Reserved false", req)
	}

	// No runner: no agents, an empty list, never null.
	e.backend.StopRunner()
	testutil.Eventually(t, "the runner's agents to go", func() bool {
		r = e.do(http.MethodGet, "/v1/agents", "")
		return r.status != http.StatusOK || string(r.body) != want
	})
	if r.status != http.StatusOK || string(r.body) != `{"agents":[],"runners":[]}` {
		t.Errorf("GET /v1/agents without agents = %d %s, want 200 {\"agents\":[],\"runners\":[]}", r.status, r.body)
	}
}

func TestListAgentsServiceErrors(t *testing.T) {
	e := newEnv(t)
	e.backend.StopHistory()
	wantError(t, e.do(http.MethodGet, "/v1/agents", ""), http.StatusServiceUnavailable, events.CodeUnavailable)
	if r := e.do(http.MethodPost, "/v1/agents", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/agents = %d, want 405", r.status)
	}
}

func TestListAgentsTimeout(t *testing.T) {
	e := newEnv(t, withoutBackend, withConfig(func(c *gateway.Config) { c.RequestTimeout = 200 * time.Millisecond }))
	wantError(t, e.do(http.MethodGet, "/v1/agents", ""), http.StatusServiceUnavailable, events.CodeUnavailable)

	// A history service that never answers.
	sub, err := e.nc.SubscribeSync(events.APISubject(ns, events.OpListAgents))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	wantError(t, e.do(http.MethodGet, "/v1/agents", ""), http.StatusGatewayTimeout, events.CodeTimeout)
}
