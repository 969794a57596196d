package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// wantStatus checks that r is 200 with exactly the JSON want.
func wantStatus(t *testing.T, r response, want string) {
	t.Helper()
	if r.status != http.StatusOK || string(r.body) != want {
		t.Fatalf("got %d %s, want 200 %s", r.status, r.body, want)
	}
}

// await returns what ch delivers, or fails the test if the prompt
// answers first.
func await[T any](t *testing.T, ch <-chan T, prompt <-chan response) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case r := <-prompt:
		t.Fatalf("prompt = %d %s before the turn got there", r.status, r.body)
		panic("unreachable")
	}
}

// promptAsync posts text as a prompt of sid and delivers the answer.
func (e *env) promptAsync(sid, text string) <-chan response {
	e.t.Helper()
	body, err := json.Marshal(map[string]any{"content": json.RawMessage(stacktest.TextContent(text))})
	if err != nil {
		e.t.Fatal(err)
	}
	prompt := make(chan response, 1)
	go func() { prompt <- e.do(http.MethodPost, "/v1/sessions/"+sid+"/prompt", string(body)) }()
	return prompt
}

// awaitPermission waits until sid waits on n permission requests, as
// getSession shows them, and returns their IDs; it fails the test if
// the prompt answers first.
func (e *env) awaitPermission(sid events.SessionID, n int, prompt <-chan response) []string {
	e.t.Helper()
	var ids []string
	testutil.Eventually(e.t, "the permission requests", func() bool {
		select {
		case r := <-prompt:
			e.t.Fatalf("prompt = %d %s before the permission request", r.status, r.body)
		default:
		}
		st := e.backend.State(sid)
		ids = ids[:0]
		for _, r := range st.Requests {
			ids = append(ids, r.RequestID)
		}
		return st.Status == events.StatusWaiting && len(ids) == n
	})
	return ids
}

// openAsking opens sid with the demo agent and the policy ask: the
// agent's permission requests wait for a client's answer.
func (e *env) openAsking(sid string) {
	e.t.Helper()
	wantStatus(e.t, e.do(http.MethodPut, "/v1/sessions/"+sid, `{"agent":"demo","permissionPolicy":"ask"}`), `{}`)
}

// askScript asks one permission with the options allow and deny, then
// says what came of it.
const askScript = "permission call_1 allow_once=allow,reject_once=deny"

func TestCancel(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodPost, "/v1/sessions/nobody/cancel", ""), http.StatusNotFound, events.CodeSessionNotFound)

	e.backend.Open("s1", "demo")
	for _, body := range []string{"", "{}", " { } \n"} {
		wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/cancel", body), `{"status":"no_active_prompt"}`)
	}
	req, _ := e.backend.LastRequest(events.OpCancelPrompt).(*events.AcpCancelPromptRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the session service got %+v, want session s1", req)
	}

	// A running turn is cancelled, and its prompt answers stopReason
	// cancelled.
	prompt := e.promptAsync("s1", "pause p1")
	e.backend.Paused("p1")
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/cancel", ""), `{"status":"cancelled"}`)
	if r := <-prompt; r.status != http.StatusOK || string(r.body) != `{"sessionId":"s1","stopReason":"cancelled"}` {
		t.Errorf("prompt = %d %s, want 200 stopReason cancelled", r.status, r.body)
	}
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/cancel", ""), `{"status":"no_active_prompt"}`)
}

// serviceAnswer is an answer a stand-in service gives to a request of the
// API, and what the gateway must make of it.
type serviceAnswer struct {
	op           events.Op
	method, path string // the path after /v1/sessions/s1
	body         string
	answer       any // an error, or a reply
	status       int
	want         string // the body of a 200, or the error code
}

// checkAnswers has a stand-in give each answer in turn, and checks what
// the gateway of e (which has no backend) answers. An internal error must
// be masked.
func checkAnswers(t *testing.T, e *env, answers []serviceAnswer) {
	t.Helper()
	for _, tt := range answers {
		stop := stacktest.AnswerWith(t, e.nc, tt.op, tt.answer)
		r := e.do(tt.method, "/v1/sessions/s1"+tt.path, tt.body)
		stop()
		if tt.status == http.StatusOK {
			if r.status != http.StatusOK || string(r.body) != tt.want {
				t.Errorf("%s answered %v: got %d %s, want 200 %s", tt.op, tt.answer, r.status, r.body, tt.want)
			}
			continue
		}
		body := wantError(t, r, tt.status, events.Code(tt.want))
		if tt.status == http.StatusInternalServerError && body.Error.Message != "internal error" {
			t.Errorf("%s answered %v: message %q, want a masked one", tt.op, tt.answer, body.Error.Message)
		}
	}
}

// TestControlServiceAnswers: what the session service may answer to
// cancel, unload, delete and a permission response, and the gateway
// passes on, though the real one answers it only in a race (a turn that
// ends while its cancel waits) or a fault (an owner moving, a teardown
// too slow). A stand-in answers them, one at a time.
func TestControlServiceAnswers(t *testing.T) {
	const respond = `{"optionId":"allow"}`
	checkAnswers(t, newEnv(t, withoutBackend), []serviceAnswer{
		{events.OpCancelPrompt, http.MethodPost, "/cancel", "", &events.AcpCancelPromptResponse{Status: events.OutcomeCompleted}, 200, `{"status":"completed"}`},
		{events.OpCancelPrompt, http.MethodPost, "/cancel", "", events.Errorf(events.CodeUnavailable, "owner moving"), 503, string(events.CodeUnavailable)},
		{events.OpUnloadSession, http.MethodPost, "/unload", "", events.Errorf(events.CodeSessionNotFound, "deleted meanwhile"), 404, string(events.CodeSessionNotFound)},
		{events.OpUnloadSession, http.MethodPost, "/unload", "", events.Errorf(events.CodeUnavailable, "owner moving"), 503, string(events.CodeUnavailable)},
		{events.OpDeleteSession, http.MethodDelete, "", "", events.Errorf(events.CodeUnavailable, "owner moving"), 503, string(events.CodeUnavailable)},
		{events.OpDeleteSession, http.MethodDelete, "", "", events.Errorf(events.CodeTimeout, "teardown too slow"), 504, string(events.CodeTimeout)},
		{events.OpDeleteSession, http.MethodDelete, "", "", errors.New("disk on fire"), 500, string(events.CodeInternal)},
		{events.OpRespondPermission, http.MethodPost, "/permissions/perm_1", respond,
			&events.AcpRespondPermissionResponse{Status: events.PermissionNotPending, Reason: new(events.ReasonAdapterExited)},
			200, `{"status":"not_pending","reason":"adapter_exited"}`},
		{events.OpRespondPermission, http.MethodPost, "/permissions/perm_1", respond, events.Errorf(events.CodeInternal, "boom"), 500, string(events.CodeInternal)},
	})
}

// TestControlRejectsBadInput: cancel, unload and delete take an empty body
// (or {}); anything else is rejected at the gateway and reaches neither
// NATS nor the session.
func TestControlRejectsBadInput(t *testing.T) {
	routes := []struct {
		method, path string
		op           events.Op
		untouched    func(e *env) bool
	}{
		{http.MethodPost, "/cancel", events.OpCancelPrompt, nil},
		{http.MethodPost, "/unload", events.OpUnloadSession, func(e *env) bool { return !e.backend.Unloaded("s1") }},
		{http.MethodDelete, "", events.OpDeleteSession, func(e *env) bool { return e.do(http.MethodGet, "/v1/sessions/s1", "").status == http.StatusOK }},
	}
	for _, rt := range routes {
		t.Run("op="+string(rt.op), func(t *testing.T) {
			e := newEnv(t)
			e.backend.Open("s1", "demo")
			tests := []struct {
				name   string
				sid    string
				body   string
				status int
				code   events.Code
			}{
				{"unknown field", "s1", `{"force":true}`, 400, events.CodeInvalidRequest},
				{"session ID in body", "s1", `{"sessionId":"s2"}`, 400, events.CodeInvalidRequest},
				{"null", "s1", `null`, 400, events.CodeInvalidRequest},
				{"not an object", "s1", `[]`, 400, events.CodeInvalidRequest},
				{"trailing data", "s1", `{} {}`, 400, events.CodeInvalidRequest},
				{"malformed", "s1", `{`, 400, events.CodeInvalidRequest},
				{"oversize body", "s1", `{` + strings.Repeat(" ", 64<<10) + `}`, 413, events.CodePayloadTooLarge},
				{"bad session ID", "a.b", ``, 400, events.CodeInvalidSessionID},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					wantError(t, e.do(rt.method, "/v1/sessions/"+tt.sid+rt.path, tt.body), tt.status, tt.code)
				})
			}
			if n := e.backend.Calls(rt.op); n != 0 {
				t.Errorf("bad input reached NATS: %d %s calls, want 0", n, rt.op)
			}
			if rt.untouched != nil && !rt.untouched(e) {
				t.Errorf("bad input changed s1 through %s", rt.op)
			}
		})
	}
}

func TestUnload(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodPost, "/v1/sessions/nobody/unload", ""), http.StatusNotFound, events.CodeSessionNotFound)

	e.backend.Open("s1", "demo")
	// Idempotent: an unloaded session unloads again.
	for _, body := range []string{"", "{}", " { } \n"} {
		wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/unload", body), `{}`)
	}
	req, _ := e.backend.LastRequest(events.OpUnloadSession).(*events.AcpUnloadSessionRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the session service got %+v, want session s1", req)
	}
	if !e.backend.Unloaded("s1") {
		t.Error("s1 is not unloaded")
	}

	// A running turn is cancelled, as by a cancel; the prompt that
	// started it had restored the session.
	prompt := e.promptAsync("s1", "pause p1")
	e.backend.Paused("p1")
	if e.backend.Unloaded("s1") {
		t.Error("s1 is still unloaded while a prompt runs")
	}
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/unload", ""), `{}`)
	if r := <-prompt; r.status != http.StatusOK || string(r.body) != `{"sessionId":"s1","stopReason":"cancelled"}` {
		t.Errorf("prompt = %d %s, want 200 stopReason cancelled", r.status, r.body)
	}
	if !e.backend.Unloaded("s1") {
		t.Error("s1 is not unloaded after its turn")
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	// Idempotent: a missing session deletes.
	wantStatus(t, e.do(http.MethodDelete, "/v1/sessions/nobody", ""), `{}`)

	e.backend.Open("s1", "demo")
	e.backend.Say("s1", "hi")
	wantStatus(t, e.do(http.MethodDelete, "/v1/sessions/s1", ""), `{}`)
	req, _ := e.backend.LastRequest(events.OpDeleteSession).(*events.AcpDeleteSessionRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the session service got %+v, want session s1", req)
	}
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1", ""), http.StatusNotFound, events.CodeSessionNotFound)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/history", ""), http.StatusNotFound, events.CodeSessionNotFound)
	// Idempotent: a deleted session deletes again, with any empty body.
	for _, body := range []string{"", "{}", " { } \n"} {
		wantStatus(t, e.do(http.MethodDelete, "/v1/sessions/s1", body), `{}`)
	}

	// Reopening the ID starts a new, empty session, with any agent.
	wantStatus(t, e.do(http.MethodPut, "/v1/sessions/s1", `{"agent":"plain"}`), `{}`)
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/history", ""), `{"events":[],"hasMoreBefore":false,"hasMoreAfter":false}`)

	// A running turn waiting on a permission is cancelled and the session
	// goes.
	wantStatus(t, e.do(http.MethodDelete, "/v1/sessions/s1", ""), `{}`)
	e.openAsking("s1")
	prompt := e.promptAsync("s1", askScript)
	e.awaitPermission("s1", 1, prompt)
	wantStatus(t, e.do(http.MethodDelete, "/v1/sessions/s1", ""), `{}`)
	// The prompt reads its turn's end from the log: the cancellation when
	// it reads before the deletion purges the log, session_not_found after.
	// Both are right.
	r := <-prompt
	if r.status == http.StatusOK && string(r.body) != `{"sessionId":"s1","stopReason":"cancelled"}` || r.status != http.StatusOK && r.status != http.StatusNotFound {
		t.Errorf("prompt = %d %s, want 200 stopReason cancelled or 404 session_not_found", r.status, r.body)
	}
	if r.status == http.StatusNotFound {
		wantError(t, r, http.StatusNotFound, events.CodeSessionNotFound)
	}
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1", ""), http.StatusNotFound, events.CodeSessionNotFound)
}

func TestRespondPermission(t *testing.T) {
	e := newEnv(t)
	e.openAsking("s1")
	prompt := e.promptAsync("s1", askScript)
	id := e.awaitPermission("s1", 1, prompt)[0]

	// getSession shows the request while it waits.
	r := e.do(http.MethodGet, "/v1/sessions/s1", "")
	var info struct {
		State struct {
			Status   string `json:"status"`
			TurnID   string `json:"turnId"`
			Requests []struct {
				RequestID string          `json:"requestId"`
				Request   json.RawMessage `json:"request"`
			} `json:"requests"`
		} `json:"state"`
	}
	if err := json.Unmarshal(r.body, &info); err != nil {
		t.Fatalf("GET session %s: %v", r.body, err)
	}
	if info.State.Status != "waiting" || info.State.TurnID == "" || len(info.State.Requests) != 1 || info.State.Requests[0].RequestID != id ||
		!strings.Contains(string(info.State.Requests[0].Request), `"toolCallId":"call_1"`) {
		t.Errorf("state = %+v, want waiting with request %s for call_1", info.State, id)
	}

	// An option not on offer is a typed error listing the valid ones, and
	// consumes nothing.
	body := wantError(t, e.do(http.MethodPost, "/v1/sessions/s1/permissions/"+id, `{"optionId":"always"}`),
		http.StatusBadRequest, events.CodeInvalidPermissionOption)
	if !strings.Contains(body.Error.Message, `"allow"`) || !strings.Contains(body.Error.Message, `"deny"`) {
		t.Errorf("message %q, want it to list allow and deny", body.Error.Message)
	}
	if got := e.backend.State("s1").Requests; len(got) != 1 || got[0].RequestID != id {
		t.Fatalf("pending after an invalid option = %v, want [%s]", got, id)
	}

	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/permissions/"+id, `{"optionId":"deny"}`), `{"status":"accepted"}`)
	req, _ := e.backend.LastRequest(events.OpRespondPermission).(*events.AcpRespondPermissionRequest)
	if req == nil || req.SessionID != "s1" || req.RequestID != id || req.OptionID != "deny" {
		t.Errorf("the session service got %+v, want session s1, request %s, option deny", req, id)
	}
	if r := <-prompt; r.status != http.StatusOK || !strings.Contains(string(r.body), "permission: selected deny") {
		t.Errorf("prompt = %d %s, want the agent to see deny selected", r.status, r.body)
	}

	// A late answer is not an error.
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/permissions/"+id, `{"optionId":"allow"}`), `{"status":"not_pending","reason":"already_resolved"}`)
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/permissions/perm_nobody", `{"optionId":"allow"}`), `{"status":"not_pending","reason":"unknown_request"}`)

	// Both ends of the request are durable events in their public form.
	r = e.do(http.MethodGet, "/v1/sessions/s1/history", "")
	var page struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatalf("history %s: %v", r.body, err)
	}
	var kinds []string
	for _, raw := range page.Events {
		var ev struct {
			Type      string          `json:"type"`
			RequestID string          `json:"requestId"`
			Status    string          `json:"status"`
			ToolCall  json.RawMessage `json:"toolCall"`
			Options   json.RawMessage `json:"options"`
			Outcome   json.RawMessage `json:"outcome"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("event %s: %v", raw, err)
		}
		switch ev.Type {
		case eventjson.TypePermissionRequest:
			if ev.RequestID != id || len(ev.ToolCall) == 0 || !strings.Contains(string(ev.Options), `"optionId":"deny"`) {
				t.Errorf("permission_request = %s, want request %s with toolCall and options", raw, id)
			}
		case eventjson.TypePermissionResponse:
			if ev.RequestID != id || ev.Status != events.PermissionAccepted || string(ev.Outcome) != `{"outcome":"selected","optionId":"deny"}` {
				t.Errorf("permission_response = %s, want %s accepted with deny selected", raw, id)
			}
		}
		kinds = append(kinds, ev.Type)
	}
	if got := strings.Join(kinds, " "); got != "user_message_chunk permission_request permission_response agent_message_chunk" {
		t.Errorf("history = %s, want the prompt, the request, its response, then the message", got)
	}
}

// TestCancelEndsPendingPermissions: a cancel ends the turn's pending
// requests, and a later answer learns why.
func TestCancelEndsPendingPermissions(t *testing.T) {
	e := newEnv(t)
	e.openAsking("s1")
	prompt := e.promptAsync("s1", askScript)
	id := e.awaitPermission("s1", 1, prompt)[0]
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/cancel", `{}`), `{"status":"cancelled"}`)
	if r := <-prompt; r.status != http.StatusOK || string(r.body) != `{"sessionId":"s1","stopReason":"cancelled"}` {
		t.Errorf("prompt = %d %s, want 200 stopReason cancelled", r.status, r.body)
	}
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/permissions/"+id, `{"optionId":"allow"}`), `{"status":"not_pending","reason":"prompt_cancelled"}`)
}

func TestRespondRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	const ok = `{"optionId":"allow"}`
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		code   events.Code
	}{
		{"long request ID", "/v1/sessions/s1/permissions/" + strings.Repeat("p", 257), ok, 400, events.CodeInvalidRequest},
		{"space in request ID", "/v1/sessions/s1/permissions/perm%201", ok, 400, events.CodeInvalidRequest},
		{"control character in request ID", "/v1/sessions/s1/permissions/perm%01", ok, 400, events.CodeInvalidRequest},
		{"DEL in request ID", "/v1/sessions/s1/permissions/perm%7F", ok, 400, events.CodeInvalidRequest},
		{"non-ASCII request ID", "/v1/sessions/s1/permissions/perm%C3%A9", ok, 400, events.CodeInvalidRequest},
		{"no optionId", "/v1/sessions/s1/permissions/perm_1", `{}`, 400, events.CodeInvalidRequest},
		{"null optionId", "/v1/sessions/s1/permissions/perm_1", `{"optionId":null}`, 400, events.CodeInvalidRequest},
		{"empty optionId", "/v1/sessions/s1/permissions/perm_1", `{"optionId":""}`, 400, events.CodeInvalidRequest},
		{"long optionId", "/v1/sessions/s1/permissions/perm_1", `{"optionId":"` + strings.Repeat("o", 1025) + `"}`, 400, events.CodeInvalidRequest},
		{"optionId not a string", "/v1/sessions/s1/permissions/perm_1", `{"optionId":1}`, 400, events.CodeInvalidRequest},
		{"unknown field", "/v1/sessions/s1/permissions/perm_1", `{"optionId":"allow","remember":true}`, 400, events.CodeInvalidRequest},
		{"trailing data", "/v1/sessions/s1/permissions/perm_1", ok + `x`, 400, events.CodeInvalidRequest},
		{"empty body", "/v1/sessions/s1/permissions/perm_1", ``, 400, events.CodeInvalidRequest},
		{"not an object", "/v1/sessions/s1/permissions/perm_1", `"allow"`, 400, events.CodeInvalidRequest},
		{"oversize body", "/v1/sessions/s1/permissions/perm_1", `{"optionId":"` + strings.Repeat("o", 64<<10) + `"}`, 413, events.CodePayloadTooLarge},
		{"bad session ID", "/v1/sessions/a*b/permissions/perm_1", ok, 400, events.CodeInvalidSessionID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(http.MethodPost, tt.path, tt.body), tt.status, tt.code)
		})
	}
	if r := e.do(http.MethodPost, "/v1/sessions/s1/permissions/", ok); r.status != http.StatusNotFound {
		t.Errorf("empty request ID = %d %s, want 404", r.status, r.body)
	}
	if n := e.backend.Calls(events.OpRespondPermission); n != 0 {
		t.Errorf("bad input reached NATS: %d respond_permission calls, want 0", n)
	}

	// The longest valid IDs get through, byte for byte.
	requestID := "perm_" + strings.Repeat("~", 251)
	optionID := strings.Repeat("é", 512)
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/permissions/"+requestID, `{"optionId":"`+optionID+`"}`),
		`{"status":"not_pending","reason":"unknown_request"}`)
	req, _ := e.backend.LastRequest(events.OpRespondPermission).(*events.AcpRespondPermissionRequest)
	if req == nil || req.RequestID != requestID || req.OptionID != optionID {
		t.Errorf("the session service got %+v, want the 256-byte request ID and the 1024-byte option ID", req)
	}
}

func TestRespondServiceErrors(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodPost, "/v1/sessions/nobody/permissions/perm_1", `{"optionId":"allow"}`), http.StatusNotFound, events.CodeSessionNotFound)
}
