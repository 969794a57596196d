package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
)

// TestACPSDK drives Skein's ACP agent door with the official TypeScript
// SDK's client (@agentclientprotocol/sdk, pinned in testdata/acp-sdk), on
// each of its three transports: skein acp on stdio, and the gateway's /acp
// by WebSocket and by Streamable HTTP. One behaviour on all three: each
// scenario runs on each transport, against one skein dev and its scripted
// demo agent.
//
// client.mjs reports what the client saw, every JSON-RPC message in the
// order its connection read it; the assertions are here.
func TestACPSDK(t *testing.T) {
	e := startACPEnv(t)
	scenarios := []struct {
		name string
		run  func(*testing.T, *acpEnv, acpTransport)
	}{
		{"turn", testACPTurn},
		{"config", testACPConfig},
		{"load", testACPLoad},
		{"lifecycle", testACPLifecycle},
		{"permission-in-client", testACPPermissionInClient},
		{"permission-over-http", testACPPermissionOverHTTP},
		{"cancel", testACPCancel},
		{"queue", testACPQueue},
		{"two-clients", testACPTwoClients},
		{"unknown-session", testACPUnknownSession},
		{"unauthenticated", testACPUnauthenticated},
		{"read-only", testACPReadOnly},
		{"malformed", testACPMalformed},
		{"disconnect", testACPDisconnect},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, tr := range acpTransports {
				// The transports' clients are independent: each makes
				// sessions of its own.
				t.Run(string(tr), func(t *testing.T) {
					t.Parallel()
					sc.run(t, e, tr)
				})
			}
		})
	}
}

// The scripted turns, and the agent text each makes (testagent/README.md).
const (
	turnPrompt = "chunks 3\ntool call_1 Read the README\nsay done"
	turnText   = "chunk 1 chunk 2 chunk 3 done"
	permPrompt = "permission call_1 allow_once=yes,reject_once=no\nsay done"
)

// skeinMeta is a session/new's _meta: Skein's options, with the demo agent
// unless they name another.
func skeinMeta(kv ...any) map[string]any {
	m := map[string]any{"agent": acpAgent}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return map[string]any{"skein": m}
}

func stepInit() acpStep { return acpStep{"op": "initialize"} }

func stepNew(kv ...any) acpStep { return acpStep{"op": "new", "meta": skeinMeta(kv...)} }

func stepPrompt(name, sessionID, text string) acpStep {
	return acpStep{"op": "prompt", "name": name, "sessionId": sessionID, "text": text}
}

// acpInitResult is the part of initialize's answer the door promises.
type acpInitResult struct {
	ProtocolVersion   int `json:"protocolVersion"`
	AgentCapabilities struct {
		LoadSession         bool            `json:"loadSession"`
		PromptCapabilities  json.RawMessage `json:"promptCapabilities"`
		SessionCapabilities struct {
			List   json.RawMessage `json:"list"`
			Resume json.RawMessage `json:"resume"`
			Close  json.RawMessage `json:"close"`
		} `json:"sessionCapabilities"`
	} `json:"agentCapabilities"`
	AgentInfo *struct {
		Name  string `json:"name"`
		Title string `json:"title"`
	} `json:"agentInfo"`
}

// acpConfigOption is an ACP select config option.
type acpConfigOption struct {
	ID           string `json:"id"`
	Category     string `json:"category"`
	CurrentValue any    `json:"currentValue"`
}

type acpNewResult struct {
	SessionID     string            `json:"sessionId"`
	ConfigOptions []acpConfigOption `json:"configOptions"`
	Modes         *struct {
		CurrentModeID  string `json:"currentModeId"`
		AvailableModes []struct {
			ID string `json:"id"`
		} `json:"availableModes"`
	} `json:"modes"`
}

type acpPromptResult struct {
	StopReason string `json:"stopReason"`
}

// checkSDKAccepted fails the test if the SDK refused a session/update the
// door sent: its schema validates every one, and a client drops what it
// refuses.
func checkSDKAccepted(t *testing.T, r *acpResult) {
	t.Helper()
	if n := len(r.updates("")); r.SDKUpdates != n {
		t.Errorf("the SDK accepted %d of the %d session/update notifications (the others failed its schema: see its stderr)", r.SDKUpdates, n)
	}
}

// checkLogOrder fails the test unless each update carries Skein's place in
// the log, strictly ascending.
func checkLogOrder(t *testing.T, what string, us []acpUpdate) {
	t.Helper()
	var last, lastNo int64 = -1, -1
	for _, u := range us {
		if u.Sequence == nil || u.EventNo == nil {
			t.Errorf("%s: a %s without _meta skein/sequence and skein/eventNo: %s", what, u.Kind, u.Raw)
			continue
		}
		if *u.Sequence <= last || *u.EventNo <= lastNo {
			t.Errorf("%s: a %s at sequence %d, eventNo %d after %d, %d: not in log order", what, u.Kind, *u.Sequence, *u.EventNo, last, lastNo)
		}
		last, lastNo = *u.Sequence, *u.EventNo
	}
}

// A whole turn: initialize says what the door offers, session/new opens the
// Skein session the client named, and the prompt's answer comes after
// every update of its turn.
func testACPTurn(t *testing.T, e *acpEnv, tr acpTransport) {
	want := "acp-turn-" + string(tr)
	r := e.run(t, e.config(t, tr, acpAuth{},
		stepInit(),
		stepNew("sessionId", want),
		stepPrompt("prompt", "$new", turnPrompt)))
	checkSDKAccepted(t, r)

	init := ok[acpInitResult](t, r, "initialize")
	caps := init.AgentCapabilities
	if init.ProtocolVersion != 1 || !caps.LoadSession || caps.PromptCapabilities == nil ||
		caps.SessionCapabilities.List == nil || caps.SessionCapabilities.Resume == nil || caps.SessionCapabilities.Close == nil {
		t.Errorf("initialize = %s, want protocolVersion 1, loadSession, promptCapabilities and sessionCapabilities list, resume and close", r.step(t, "initialize").Result)
	}
	if init.AgentInfo == nil || !strings.Contains(strings.ToLower(init.AgentInfo.Name+" "+init.AgentInfo.Title), "skein") {
		t.Errorf("initialize's agentInfo = %+v, want Skein's", init.AgentInfo)
	}

	nw := ok[acpNewResult](t, r, "new")
	id := nw.SessionID
	if id != want {
		t.Errorf("session/new with _meta.skein.sessionId %q = sessionId %q", want, id)
	}
	if !slices.ContainsFunc(nw.ConfigOptions, func(o acpConfigOption) bool { return o.ID == "model" }) {
		t.Errorf("session/new's configOptions = %+v, want the demo agent's (mode, model)", nw.ConfigOptions)
	}
	if nw.Modes == nil || nw.Modes.CurrentModeID != "default" ||
		!slices.ContainsFunc(nw.Modes.AvailableModes, func(m struct {
			ID string `json:"id"`
		}) bool {
			return m.ID == "plan"
		}) {
		t.Errorf("session/new's modes = %+v, want the demo agent's mode option as modes (current default, plan among them)", nw.Modes)
	}
	if status, s, _ := e.session(t, id); status != http.StatusOK || string(s["cwd"]) != fmt.Sprintf("%q", e.project) {
		t.Errorf("GET /v1/sessions/%s = %d, cwd %s; want 200, the session/new's cwd %q", id, status, s["cwd"], e.project)
	}

	if p := ok[acpPromptResult](t, r, "prompt"); p.StopReason != "end_turn" {
		t.Errorf("session/prompt = %+v, want stopReason end_turn", p)
	}
	us := r.turn(t, "prompt", id)
	if got := text(us, "agent_message_chunk"); got != turnText {
		t.Errorf("the turn's agent text before the prompt's answer = %q, want %q (updates: %s)", got, turnText, kinds(us))
	}
	var durable []acpUpdate
	for _, u := range us {
		if u.Kind == "tool_call" || u.Kind == "tool_call_update" {
			durable = append(durable, u)
		}
	}
	if len(durable) == 0 {
		t.Errorf("no tool_call among the turn's updates (%s)", kinds(us))
	}
	checkLogOrder(t, "the tool call's updates", durable)
}

// session/set_config_option and session/set_mode are Skein's: what they set
// is what the agent runs with.
func testACPConfig(t *testing.T, e *acpEnv, tr acpTransport) {
	r := e.run(t, e.config(t, tr, acpAuth{},
		stepInit(),
		stepNew(),
		acpStep{"op": "setConfig", "name": "setModel", "configId": "model", "value": "test-large"},
		acpStep{"op": "setMode", "name": "setMode", "modeId": "plan"},
		stepPrompt("prompt", "$new", "config")))
	checkSDKAccepted(t, r)
	id := ok[acpNewResult](t, r, "new").SessionID
	set := ok[struct {
		ConfigOptions []acpConfigOption `json:"configOptions"`
	}](t, r, "setModel")
	if i := slices.IndexFunc(set.ConfigOptions, func(o acpConfigOption) bool { return o.ID == "model" }); i < 0 || set.ConfigOptions[i].CurrentValue != "test-large" {
		t.Errorf("session/set_config_option model=test-large = %+v, want model's currentValue test-large", set.ConfigOptions)
	}
	ok[json.RawMessage](t, r, "setMode")
	if got, want := text(r.turn(t, "prompt", id), "agent_message_chunk"), "config: mode=plan model=test-large"; got != want {
		t.Errorf("after set_config_option and set_mode, the agent says %q, want %q", got, want)
	}
	status, body := doAs(t, http.MethodGet, e.dev.base+id+"/config", e.admin, "")
	if status != http.StatusOK || !strings.Contains(string(body), `"test-large"`) {
		t.Errorf("GET /v1/sessions/%s/config = %d %s, want model test-large", id, status, body)
	}
}

// session/load replays the durable history in log order before it
// answers; _meta.skein.after replays what came after a sequence only.
func testACPLoad(t *testing.T, e *acpEnv, tr acpTransport) {
	first := e.run(t, e.config(t, tr, acpAuth{}, stepInit(), stepNew(), stepPrompt("prompt", "$new", turnPrompt)))
	id := ok[acpNewResult](t, first, "new").SessionID
	if p := ok[acpPromptResult](t, first, "prompt"); p.StopReason != "end_turn" {
		t.Fatalf("the first client's prompt = %+v, want end_turn", p)
	}

	second := e.run(t, e.config(t, tr, acpAuth{}, stepInit(), acpStep{"op": "load", "sessionId": id}))
	checkSDKAccepted(t, second)
	replay := second.turn(t, "load", id)
	checkReplay(t, "session/load", replay, turnPrompt, turnText)
	checkLogOrder(t, "session/load's replay", replay)

	// After the user's message: the agent's only.
	var after int64 = -1
	for _, u := range replay {
		if u.Kind == "user_message_chunk" && u.Sequence != nil {
			after = *u.Sequence
		}
	}
	if after < 0 {
		t.Fatal("no user_message_chunk with a sequence in the replay")
	}
	third := e.run(t, e.config(t, tr, acpAuth{}, stepInit(),
		acpStep{"op": "load", "sessionId": id, "meta": map[string]any{"skein": map[string]any{"after": after}}}))
	rest := third.turn(t, "load", id)
	if got := text(rest, "user_message_chunk"); got != "" {
		t.Errorf("session/load after sequence %d replays the user's message %q, which is at or before it", after, got)
	}
	if got := text(rest, "agent_message_chunk"); got != turnText {
		t.Errorf("session/load after sequence %d replays the agent text %q, want %q", after, got, turnText)
	}
	for _, u := range rest {
		if u.Sequence != nil && *u.Sequence <= after {
			t.Errorf("session/load after %d replays a %s at sequence %d", after, u.Kind, *u.Sequence)
		}
	}
}

// checkReplay fails the test unless us holds the turn's user message, then
// its agent text.
func checkReplay(t *testing.T, what string, us []acpUpdate, prompt, agentText string) {
	t.Helper()
	if got := text(us, "user_message_chunk"); got != prompt {
		t.Errorf("%s: the user's message = %q, want %q (updates: %s)", what, got, prompt, kinds(us))
	}
	if got := text(us, "agent_message_chunk"); got != agentText {
		t.Errorf("%s: the agent text = %q, want %q (updates: %s)", what, got, agentText, kinds(us))
	}
	lastUser, firstAgent := -1, -1
	for i, u := range us {
		switch u.Kind {
		case "user_message_chunk":
			lastUser = i
		case "agent_message_chunk":
			if firstAgent < 0 {
				firstAgent = i
			}
		}
	}
	if firstAgent >= 0 && lastUser > firstAgent {
		t.Errorf("%s: the user's message comes after the agent's (updates: %s)", what, kinds(us))
	}
}

// acpListResult is session/list's answer, every page.
type acpListResult struct {
	Pages []struct {
		Sessions []struct {
			SessionID string  `json:"sessionId"`
			Cwd       string  `json:"cwd"`
			Title     *string `json:"title"`
			UpdatedAt *string `json:"updatedAt"`
		} `json:"sessions"`
		NextCursor *string `json:"nextCursor"`
	} `json:"pages"`
}

// session/list lists the namespace's sessions, with a cwd filter;
// session/resume follows a session without replaying it; session/close
// detaches this client only, and another client's prompt then runs.
func testACPLifecycle(t *testing.T, e *acpEnv, tr acpTransport) {
	sub := filepath.Join(e.project, "sub-"+string(tr))
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	made := e.run(t, e.config(t, tr, acpAuth{},
		stepInit(),
		acpStep{"op": "new", "name": "new1", "meta": skeinMeta()},
		stepPrompt("p1", "$new", "say hello"),
		acpStep{"op": "new", "name": "new2", "meta": skeinMeta(), "cwd": sub},
		stepPrompt("p2", "$new", "say hi there")))
	s1, s2 := ok[acpNewResult](t, made, "new1").SessionID, ok[acpNewResult](t, made, "new2").SessionID
	// A session's title is its first message until it is named; the
	// projection the list reads may trail the log by a write.
	if err := pollFor(t.Context(), "the title of "+s1, func() bool {
		_, s, _ := e.session(t, s1)
		return string(s["title"]) == `"say hello"`
	}); err != nil {
		t.Fatal(err)
	}

	c2 := e.start(t, e.config(t, tr, acpAuth{},
		stepInit(),
		acpStep{"op": "list", "name": "listAll"},
		acpStep{"op": "list", "name": "listSub", "cwd": sub},
		acpStep{"op": "resume", "sessionId": s1},
		stepPrompt("prompt", s1, "say resumed"),
		acpStep{"op": "close", "sessionId": s1},
		acpStep{"op": "mark", "event": "closed"},
		acpStep{"op": "wait", "line": "go"}))
	c2.waitEvent("closed")
	c3 := e.run(t, e.config(t, tr, acpAuth{},
		stepInit(), acpStep{"op": "resume", "sessionId": s1}, stepPrompt("prompt", s1, "say after close")))
	if p := ok[acpPromptResult](t, c3, "prompt"); p.StopReason != "end_turn" {
		t.Errorf("another client's prompt after session/close = %+v, want end_turn", p)
	}
	if got := text(c3.turn(t, "prompt", s1), "agent_message_chunk"); got != "after close" {
		t.Errorf("another client's turn after session/close: agent text %q, want %q", got, "after close")
	}
	c2.send("go")
	r := c2.wait()
	checkSDKAccepted(t, r)

	all := ok[acpListResult](t, r, "listAll")
	seen := map[string]int{}
	for _, p := range all.Pages {
		for _, s := range p.Sessions {
			seen[s.SessionID]++
			if s.Cwd == "" || s.UpdatedAt == nil {
				t.Errorf("session/list: %+v, want its cwd and updatedAt", s)
			} else if _, err := time.Parse(time.RFC3339, *s.UpdatedAt); err != nil {
				t.Errorf("session/list: %s's updatedAt %q: %v", s.SessionID, *s.UpdatedAt, err)
			}
			if s.SessionID == s1 && (s.Title == nil || *s.Title != "say hello" || s.Cwd != e.project) {
				t.Errorf("session/list: %+v, want title %q and cwd %q", s, "say hello", e.project)
			}
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("session/list's pages hold %s %d times", id, n)
		}
	}
	if seen[s1] != 1 || seen[s2] != 1 {
		t.Errorf("session/list (%d pages) lists %s %d times and %s %d times, want once each", len(all.Pages), s1, seen[s1], s2, seen[s2])
	}
	found := false
	for _, p := range ok[acpListResult](t, r, "listSub").Pages {
		for _, s := range p.Sessions {
			found = found || s.SessionID == s2
			if s.Cwd != sub {
				t.Errorf("session/list with cwd %s lists %s in %s", sub, s.SessionID, s.Cwd)
			}
		}
	}
	if !found {
		t.Errorf("session/list with cwd %s does not list %s", sub, s2)
	}

	if us := r.turn(t, "resume", s1); len(us) > 0 {
		t.Errorf("session/resume replayed %d updates (%s), want none", len(us), kinds(us))
	}
	if got := text(r.turn(t, "prompt", s1), "agent_message_chunk"); got != "resumed" {
		t.Errorf("the prompt after session/resume: agent text %q, want %q", got, "resumed")
	}
	cl := r.step(t, "close")
	if !cl.OK || cl.RespIndex == nil {
		t.Fatalf("session/close: %s", cl.Error)
	}
	if late := between(r.updates(s1), *cl.RespIndex, len(r.Wire)); len(late) > 0 {
		t.Errorf("after session/close, the client still got %d updates of %s (%s)", len(late), s1, kinds(late))
	}
	if status, _, _ := e.session(t, s1); status != http.StatusOK {
		t.Errorf("GET /v1/sessions/%s after session/close = %d, want 200: the session lives on", s1, status)
	}
}

// policy ask: the agent's permission request reaches the client, whose
// answer the agent gets.
func testACPPermissionInClient(t *testing.T, e *acpEnv, tr acpTransport) {
	c := e.config(t, tr, acpAuth{}, stepInit(), stepNew("permissionPolicy", "ask"), stepPrompt("prompt", "$new", permPrompt))
	c.Permission = &acpPermission{Answer: "select", OptionID: "yes"}
	r := e.run(t, c)
	checkSDKAccepted(t, r)
	id := ok[acpNewResult](t, r, "new").SessionID
	if len(r.Permissions) != 1 {
		t.Fatalf("the client got %d permission requests, want 1 (steps %s)", len(r.Permissions), r.stepSummary())
	}
	var req struct {
		SessionID string `json:"sessionId"`
		ToolCall  struct {
			ToolCallID string `json:"toolCallId"`
		} `json:"toolCall"`
		Options []struct {
			OptionID string `json:"optionId"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	if err := json.Unmarshal(r.Permissions[0].Params, &req); err != nil {
		t.Fatal(err)
	}
	if req.SessionID != id || req.ToolCall.ToolCallID != "call_1" || len(req.Options) != 2 || req.Options[0].OptionID != "yes" || req.Options[1].OptionID != "no" {
		t.Errorf("session/request_permission = %s, want the agent's: session %s, call_1, options yes and no", r.Permissions[0].Params, id)
	}
	if p := ok[acpPromptResult](t, r, "prompt"); p.StopReason != "end_turn" {
		t.Errorf("session/prompt = %+v, want end_turn", p)
	}
	if got := text(r.turn(t, "prompt", id), "agent_message_chunk"); !strings.Contains(got, "permission: selected yes") || !strings.HasSuffix(got, "done") {
		t.Errorf("the agent text = %q, want the client's answer (permission: selected yes), then done", got)
	}
	checkPermissionAnswered(t, e, id, "yes")
}

// checkPermissionAnswered fails the test unless the session's history holds
// an accepted permission_response with optionID.
func checkPermissionAnswered(t *testing.T, e *acpEnv, id, optionID string) {
	t.Helper()
	status, body := doAs(t, http.MethodGet, e.dev.base+id+"/history?after=0", e.admin, "")
	var page struct {
		Events []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Outcome struct {
				OptionID string `json:"optionId"`
			} `json:"outcome"`
		} `json:"events"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &page) != nil {
		t.Fatalf("GET %s/history = %d %s", id, status, body)
	}
	for _, ev := range page.Events {
		if ev.Type == "permission_response" {
			if ev.Status != "accepted" || ev.Outcome.OptionID != optionID {
				t.Errorf("the permission_response = %+v, want accepted with %s", ev, optionID)
			}
			return
		}
	}
	t.Errorf("no permission_response in %s's history", id)
}

// A permission request the client holds is answered over HTTP: the first
// answer wins, the turn completes, and the client's request is withdrawn
// with $/cancel_request.
func testACPPermissionOverHTTP(t *testing.T, e *acpEnv, tr acpTransport) {
	c := e.config(t, tr, acpAuth{}, stepInit(), stepNew("permissionPolicy", "ask"),
		acpStep{"op": "prompt", "sessionId": "$new", "text": permPrompt, "async": "p"},
		acpStep{"op": "waitPermission"},
		acpStep{"op": "mark", "event": "asked"},
		acpStep{"op": "await", "name": "prompt", "async": "p"})
	c.Permission = &acpPermission{Answer: "hold"}
	cl := e.start(t, c)
	id := cl.waitEvent("asked").SessionID
	st := e.waitState(t, cl, id, "waiting")
	if len(st.Requests) != 1 {
		t.Fatalf("the session waits on %+v, want one permission request", st.Requests)
	}
	status, body := doAs(t, http.MethodPost, e.dev.base+id+"/permissions/"+st.Requests[0].RequestID, e.admin, `{"optionId":"yes"}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"accepted"`) {
		t.Fatalf("POST …/permissions/%s = %d %s, want 200 accepted", st.Requests[0].RequestID, status, body)
	}
	r := cl.wait()
	checkSDKAccepted(t, r)
	if p := ok[acpPromptResult](t, r, "prompt"); p.StopReason != "end_turn" {
		t.Errorf("session/prompt = %+v, want end_turn", p)
	}
	if got := text(r.turn(t, "prompt", id), "agent_message_chunk"); !strings.Contains(got, "permission: selected yes") {
		t.Errorf("the agent text = %q, want the HTTP answer (permission: selected yes)", got)
	}
	if len(r.Permissions) != 1 {
		t.Fatalf("the client got %d permission requests, want 1", len(r.Permissions))
	}
	held := r.Permissions[0]
	if !held.Withdrawn || held.WithdrawReason == nil || held.WithdrawReason.Code != rpcCancelled {
		t.Errorf("the client's held request: withdrawn %v (%v), want withdrawn by $/cancel_request (%d)", held.Withdrawn, held.WithdrawReason, rpcCancelled)
	}
	var withdrawn bool
	for _, m := range r.wireMessages("in", "$/cancel_request") {
		var n struct {
			Params struct {
				RequestID any `json:"requestId"`
			} `json:"params"`
		}
		_ = json.Unmarshal(m, &n)
		withdrawn = withdrawn || fmt.Sprint(n.Params.RequestID) == fmt.Sprint(held.ID)
	}
	if !withdrawn {
		t.Errorf("no $/cancel_request for the client's permission request %v", held.ID)
	}
	checkPermissionAnswered(t, e, id, "yes")
}

// session/cancel ends a slow turn: cancelled, at once.
func testACPCancel(t *testing.T, e *acpEnv, tr acpTransport) {
	cl := e.start(t, e.config(t, tr, acpAuth{}, stepInit(), stepNew(),
		acpStep{"op": "prompt", "sessionId": "$new", "text": "say started\nsleep 30s\nsay too late", "async": "p"},
		acpStep{"op": "mark", "event": "prompting"},
		acpStep{"op": "wait", "line": "cancel"},
		acpStep{"op": "cancel"},
		acpStep{"op": "await", "name": "prompt", "async": "p"}))
	id := cl.waitEvent("prompting").SessionID
	e.waitState(t, cl, id, "running")
	start := time.Now()
	cl.send("cancel")
	r := cl.wait()
	checkSDKAccepted(t, r)
	if p := ok[acpPromptResult](t, r, "prompt"); p.StopReason != "cancelled" {
		t.Errorf("session/prompt after session/cancel = %+v, want stopReason cancelled", p)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the cancelled turn ended %v after the cancel", took)
	}
	if got := text(r.updates(id), "agent_message_chunk"); strings.Contains(got, "too late") {
		t.Errorf("the cancelled turn went on: %q", got)
	}
	e.waitState(t, nil, id, "idle")
}

// A client may send session/prompt while a turn of the session runs (ACP
// sets no rule against it): the door queues it (POST …/prompt with queue),
// and it runs as its own turn once the running one ends, cancelled here;
// its prompt then answers end_turn. Issue 32 §1.
func testACPQueue(t *testing.T, e *acpEnv, tr acpTransport) {
	cl := e.start(t, e.config(t, tr, acpAuth{}, stepInit(), stepNew(),
		acpStep{"op": "prompt", "sessionId": "$new", "text": "say first\nsleep 30s\nsay too late", "async": "a"},
		acpStep{"op": "waitUpdate", "textIncludes": "first"},
		acpStep{"op": "prompt", "sessionId": "$new", "text": "say second", "async": "b"},
		acpStep{"op": "mark", "event": "queued"},
		acpStep{"op": "wait", "line": "cancel"},
		acpStep{"op": "cancel"},
		acpStep{"op": "await", "name": "first", "async": "a"},
		acpStep{"op": "await", "name": "second", "async": "b"}))
	id := cl.waitEvent("queued").SessionID
	// The second prompt waits in the queue while the first turn runs.
	if err := testutil.Poll(t.Context(), "the second prompt queued", func() (bool, error) {
		status, body := doAs(t, http.MethodGet, e.dev.base+id+"/queue", e.admin, "")
		var q struct {
			Queued []struct {
				Content []struct{ Text string } `json:"content"`
			} `json:"queued"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &q) != nil {
			return false, fmt.Errorf("GET queue: %d %s", status, body)
		}
		return len(q.Queued) == 1 && len(q.Queued[0].Content) == 1 && q.Queued[0].Content[0].Text == "say second", nil
	}); err != nil {
		t.Fatal(err)
	}
	cl.send("cancel")
	r := cl.wait()
	checkSDKAccepted(t, r)
	if p := ok[acpPromptResult](t, r, "first"); p.StopReason != "cancelled" {
		t.Errorf("the first prompt = %+v, want cancelled", p)
	}
	if p := ok[acpPromptResult](t, r, "second"); p.StopReason != "end_turn" {
		t.Errorf("the queued prompt = %+v, want end_turn", p)
	}
	if got := text(r.updates(id), "agent_message_chunk"); !strings.Contains(got, "second") || strings.Contains(got, "too late") {
		t.Errorf("the client saw %q, want the queued turn's words and none of the cancelled turn's last", got)
	}
	e.waitState(t, nil, id, "idle")
}

// Two clients on one session: each sees every update of a turn one of them
// prompted, the user's message included.
func testACPTwoClients(t *testing.T, e *acpEnv, tr acpTransport) {
	a := e.start(t, e.config(t, tr, acpAuth{}, stepInit(), stepNew(),
		acpStep{"op": "mark", "event": "ready"},
		acpStep{"op": "waitUpdate", "name": "done", "textIncludes": "done"},
		acpStep{"op": "wait", "line": "go"}))
	id := a.waitEvent("ready").SessionID
	b := e.run(t, e.config(t, tr, acpAuth{}, stepInit(),
		acpStep{"op": "resume", "sessionId": id},
		stepPrompt("prompt", id, turnPrompt)))
	a.send("go")
	ra := a.wait()
	checkSDKAccepted(t, b)
	checkSDKAccepted(t, ra)
	if p := ok[acpPromptResult](t, b, "prompt"); p.StopReason != "end_turn" {
		t.Errorf("the prompting client's prompt = %+v, want end_turn", p)
	}
	bs := b.turn(t, "prompt", id)
	checkReplay(t, "the prompting client", bs, turnPrompt, turnText)
	ra.step(t, "done")
	as := ra.updates(id)
	checkReplay(t, "the other client", as, turnPrompt, turnText)

	// Every durable update the prompting client got up to the turn's last
	// words, the other got too.
	got := map[int64]bool{}
	for _, u := range as {
		if u.Sequence != nil {
			got[*u.Sequence] = true
		}
	}
	last := slices.IndexFunc(bs, func(u acpUpdate) bool { return strings.Contains(u.Text, "done") })
	for _, u := range bs[:last+1] {
		if u.Sequence != nil && !got[*u.Sequence] {
			t.Errorf("the other client never got the %s at sequence %d", u.Kind, *u.Sequence)
		}
	}
}

// An unknown session is ACP's resource-not-found, Skein's session_not_found.
func testACPUnknownSession(t *testing.T, e *acpEnv, tr acpTransport) {
	const id = "acp-no-such-session"
	c := e.config(t, tr, acpAuth{}, stepInit(),
		acpStep{"op": "load", "sessionId": id},
		acpStep{"op": "resume", "sessionId": id},
		stepPrompt("prompt", id, "say hi"))
	c.ContinueOnError = true
	r := e.run(t, c)
	ok[acpInitResult](t, r, "initialize")
	for _, name := range []string{"load", "resume", "prompt"} {
		if err := r.failed(t, name); err.Code != rpcNotFound || err.skeinCode() != "session_not_found" {
			t.Errorf("session/%s of an unknown session = %s, want code %d, data.code session_not_found", name, err, rpcNotFound)
		}
	}
}

// No token, or a wrong one: over the gateway, the connection is refused
// with 401; skein acp answers a JSON-RPC error, data.code unauthenticated.
func testACPUnauthenticated(t *testing.T, e *acpEnv, tr acpTransport) {
	auths := map[string]acpAuth{"bogus": {token: "not-a-token-" + string(tr)}}
	if tr != acpStdio {
		auths["none"] = acpAuth{none: true}
	}
	for name, auth := range auths {
		t.Run(name, func(t *testing.T) {
			c := e.config(t, tr, auth, stepInit(), stepNew())
			c.ContinueOnError = true
			r := e.run(t, c)
			if tr != acpStdio {
				if err := r.failed(t, "initialize"); err.HTTPStatus != http.StatusUnauthorized {
					t.Errorf("initialize = %s, want the connection refused with 401", err)
				}
				return
			}
			i := slices.IndexFunc(r.Steps, func(s acpStepResult) bool { return !s.OK })
			if i < 0 {
				t.Fatalf("with a bad token, initialize and session/new succeeded: %s", r.stepSummary())
			}
			if err := r.Steps[i].Error; err.skeinCode() != "unauthenticated" {
				t.Errorf("%s with a bad token = %s, want data.code unauthenticated", r.Steps[i].Name, err)
			}
			if r.AgentExitTimeout {
				t.Error("skein acp did not end when its stdin closed")
			}
		})
	}
}

// A read-only token loads a session and sees its history; it may not prompt
// it nor open one.
func testACPReadOnly(t *testing.T, e *acpEnv, tr acpTransport) {
	made := e.run(t, e.config(t, tr, acpAuth{}, stepInit(), stepNew(), stepPrompt("prompt", "$new", "say hello reader")))
	id := ok[acpNewResult](t, made, "new").SessionID
	c := e.config(t, tr, acpAuth{token: e.reader}, stepInit(),
		acpStep{"op": "load", "sessionId": id},
		stepPrompt("prompt", id, "say nope"),
		stepNew())
	c.ContinueOnError = true
	r := e.run(t, c)
	ok[json.RawMessage](t, r, "load")
	checkReplay(t, "a reader's session/load", r.turn(t, "load", id), "say hello reader", "hello reader")
	for _, name := range []string{"prompt", "new"} {
		if err := r.failed(t, name); err.skeinCode() != "forbidden" {
			t.Errorf("a reader's %s = %s, want data.code forbidden", name, err)
		}
	}
}

// Malformed JSON-RPC gets typed errors, and the connection goes on.
func testACPMalformed(t *testing.T, e *acpEnv, tr acpTransport) {
	c := e.config(t, tr, acpAuth{})
	c.Steps = nil
	c.Raw = []string{
		"this is not json",
		`[{"jsonrpc":"2.0","id":"batch","method":"session/list","params":{}}]`,
		`{"jsonrpc":"2.0","id":"unknown","method":"no/such_method","params":{}}`,
		`{"jsonrpc":"2.0","id":"badparams","method":"session/new","params":{"cwd":42,"mcpServers":"none"}}`,
	}
	r := e.run(t, c)
	raw := r.Raw
	if raw == nil {
		t.Fatalf("no raw report (%s)", r.Fatal)
	}
	if raw.Error != nil || raw.ClosedEarly {
		t.Errorf("the connection ended (%v) or failed (%s) before it answered the last request", raw.ClosedEarly, raw.Error)
	}
	// Each answer, by the request's id ("" for null), from the stream.
	type answer struct {
		ID     any `json:"id"`
		Result any `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	var answers []answer
	for _, m := range raw.Received {
		var a answer
		if json.Unmarshal(m, &a) == nil {
			answers = append(answers, a)
		}
	}
	// Over HTTP an error may come as the POST's own answer instead.
	if tr == acpHTTP {
		if len(raw.Sent) == 0 || raw.Sent[0].Status != http.StatusOK || raw.Sent[0].ConnectionID == "" {
			t.Fatalf("POST initialize = %+v, want 200 and an Acp-Connection-Id", raw.Sent)
		}
		if raw.SSEStatus != http.StatusOK {
			t.Errorf("GET /acp (the connection's stream) = %d, want 200", raw.SSEStatus)
		}
		for _, s := range raw.Sent[1:] {
			var a answer
			if s.Status >= 400 && json.Unmarshal(s.Body, &a) == nil && a.Error != nil {
				answers = append(answers, a)
			}
		}
	}
	has := func(id any, code int) bool {
		return slices.ContainsFunc(answers, func(a answer) bool {
			return fmt.Sprint(a.ID) == fmt.Sprint(id) && a.Error != nil && a.Error.Code == code
		})
	}
	for _, want := range []struct {
		what string
		id   any
		code int
	}{
		{"text that is not JSON", nil, rpcParseError},
		{"a batch", nil, rpcInvalidRequest},
		{"an unknown method", "unknown", rpcMethodNotFound},
		{"session/new with a bad cwd", "badparams", rpcInvalidParams},
	} {
		if has(want.id, want.code) {
			continue
		}
		// The Streamable HTTP profile may refuse a batch with 501.
		if tr == acpHTTP && want.code == rpcInvalidRequest && len(raw.Sent) > 2 && raw.Sent[2].Status == http.StatusNotImplemented {
			continue
		}
		t.Errorf("%s: no error %d for id %v among the answers %s%s", want.what, want.code, want.id, raw.Received, raw.posts())
	}
	if !slices.ContainsFunc(answers, func(a answer) bool { return a.ID == "final" && a.Result != nil }) {
		t.Errorf("no answer to the session/list after the malformed messages: %s", raw.Received)
	}
}

// A client that goes mid-turn takes nothing with it: the turn completes,
// and a new client's session/load shows it.
func testACPDisconnect(t *testing.T, e *acpEnv, tr acpTransport) {
	const prompt = "say \"started \"\nsleep 2s\nsay done"
	cl := e.start(t, e.config(t, tr, acpAuth{}, stepInit(), stepNew(),
		acpStep{"op": "prompt", "sessionId": "$new", "text": prompt, "async": "p"},
		acpStep{"op": "mark", "event": "prompting"},
		acpStep{"op": "wait", "line": "never"}))
	id := cl.waitEvent("prompting").SessionID
	pid := 0
	if tr == acpStdio {
		pid = cl.event("agent").PID
		t.Cleanup(func() {
			if processAlive(pid) {
				_ = killPID(pid)
			}
		})
	}
	e.waitState(t, cl, id, "running")
	cl.kill()
	if pid != 0 {
		if err := pollFor(t.Context(), "skein acp to end once its client is gone", func() bool { return !processAlive(pid) }); err != nil {
			t.Error(err)
		}
	}
	e.waitState(t, nil, id, "idle")
	r := e.run(t, e.config(t, tr, acpAuth{}, stepInit(), acpStep{"op": "load", "sessionId": id}))
	checkSDKAccepted(t, r)
	replay := r.turn(t, "load", id)
	checkReplay(t, "session/load after the client went", replay, prompt, "started done")
}
