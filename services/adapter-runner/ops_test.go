package adapterrunner_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/testagent"
)

// The runner's typed operations (prompt, cancel, permission, set_config,
// status), each against a real adapter process.

// A JSON-RPC error answer to session/prompt is the turn's result, with the
// agent's code and message, after the updates it sent first.
func TestPromptErrorAnswer(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "say partial\nerror -32000 Authentication required")
	res, before := until[*events.AdapterPromptResult](t, h)
	if got := strings.Join(updateTexts(before), "|"); got != "partial" {
		t.Errorf("updates before the result = %q, want partial", got)
	}
	want := events.AdapterCallError{Code: events.CodeAdapterError, RPCCode: -32000, Message: "Authentication required"}
	if res.TurnID != "t1" || res.StopReason != "" || res.Result != nil || res.Error == nil || *res.Error != want {
		t.Errorf("result = %+v, want turn t1 with error %+v", res, want)
	}
}

// An answer to session/prompt whose stopReason is missing or not a string
// breaks the protocol: the turn's result says so. The adapter is a shell
// script that answers the runner's requests by their ids (initialize 0,
// session/new 1, then the prompts): the test agent always answers well.
func TestPromptAnswerWithoutStopReason(t *testing.T) {
	script := `
read -r line; echo '{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{}}}'
read -r line; echo '{"jsonrpc":"2.0","id":1,"result":{"sessionId":"sess_sh"}}'
read -r line; echo '{"jsonrpc":"2.0","id":2,"result":{}}'
read -r line; echo '{"jsonrpc":"2.0","id":3,"result":{"stopReason":7}}'
exec cat >/dev/null`
	h := start(t, adapterrunner.Agent{ID: "sh", Command: "/bin/sh", Args: []string{"-c", script}})
	h.create(t, "s1", "p1", "sh")
	for _, turn := range []string{"t1", "t2"} {
		h.prompt(t, "s1", "p1", turn, "hi")
		res, _ := until[*events.AdapterPromptResult](t, h)
		if res.TurnID != turn || res.Error == nil || res.Error.Code != events.CodeAdapterProtocol || res.StopReason != "" {
			t.Errorf("result of %s = %+v (error %+v), want %s", turn, res, res.Error, events.CodeAdapterProtocol)
		}
	}
}

// session/cancel reaches the agent, which ends the turn cancelled.
func TestCancel(t *testing.T) {
	control := t.TempDir()
	h := start(t, adapterrunner.Agent{ID: "test", Command: testAgent, Args: []string{"--control-dir", control}})
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "say started\npause p1\nsay resumed")
	if err := testagent.WaitPaused(t.Context(), control, "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCancel),
		&events.RunnerCancelRequest{TurnID: "t1"}, header("s1", "p1")); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	res, before := until[*events.AdapterPromptResult](t, h)
	if res.TurnID != "t1" || res.StopReason != "cancelled" {
		t.Errorf("result = %+v, want t1 cancelled", res)
	}
	if got := strings.Join(updateTexts(before), "|"); got != "started" {
		t.Errorf("updates = %q, want started", got)
	}
}

// A permission request reaches ACP_IO with the runner's request ID and
// without the private session ID; the answer to that ID reaches the agent,
// once. A cancelled answer (no option) ends the agent's turn.
func TestPermission(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "permission call_1\npermission call_2")

	answer := func(requestID string, optionID *string) error {
		_, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerPermission),
			&events.RunnerPermissionAnswer{RequestID: requestID, OptionID: optionID}, header("s1", "p1"))
		return err
	}
	request := func(toolCallID string) *events.AdapterPermissionRequest {
		t.Helper()
		req, _ := until[*events.AdapterPermissionRequest](t, h)
		if !strings.HasPrefix(req.RequestID, "perm_") {
			t.Errorf("request ID = %q, want perm_…", req.RequestID)
		}
		var params map[string]json.RawMessage
		if err := json.Unmarshal(req.Request, &params); err != nil {
			t.Fatalf("request %s: %v", req.Request, err)
		}
		if _, ok := params["sessionId"]; ok {
			t.Errorf("request carries the private sessionId: %s", req.Request)
		}
		var toolCall struct{ ToolCallID string }
		_ = json.Unmarshal(params["toolCall"], &toolCall)
		if toolCall.ToolCallID != toolCallID || len(params["options"]) == 0 {
			t.Errorf("request = %s, want tool call %s and its options", req.Request, toolCallID)
		}
		return req
	}

	first := request("call_1")
	allow := "allow"
	if err := answer(first.RequestID, &allow); err != nil {
		t.Fatalf("answer %s: %v", first.RequestID, err)
	}
	for _, id := range []string{first.RequestID, "perm_unknown"} {
		err := answer(id, &allow)
		if e := events.AsError(err); e == nil || e.Code != events.CodeInvalidRequest || !strings.Contains(e.Message, events.ReasonUnknownRequest) {
			t.Errorf("answer %s = %v, want %s naming %s", id, err, events.CodeInvalidRequest, events.ReasonUnknownRequest)
		}
	}

	second := request("call_2")
	if err := answer(second.RequestID, nil); err != nil {
		t.Fatalf("answer %s cancelled: %v", second.RequestID, err)
	}
	res, before := until[*events.AdapterPromptResult](t, h)
	if got := strings.Join(updateTexts(before), "|"); got != "permission: cancelled\n" {
		t.Errorf("updates after the second request = %q, want \"permission: cancelled\\n\"", got)
	}
	if res.StopReason != "cancelled" {
		t.Errorf("result = %+v, want cancelled", res)
	}
}

// The agent's permission and input requests are kept apart: an answer of
// the other kind is unknown_request and leaves the request pending, to be
// answered by its own kind once.
func TestAnswerOfTheOtherKind(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "permission call_1\nelicit {\"type\":\"object\",\"properties\":{}}")
	permission := func(requestID string) error {
		allow := "allow"
		_, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerPermission),
			&events.RunnerPermissionAnswer{RequestID: requestID, OptionID: &allow}, header("s1", "p1"))
		return err
	}
	input := func(requestID string) error {
		_, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerInput),
			&events.RunnerInputAnswer{RequestID: requestID, Response: events.JSON(`{"action":"decline"}`)}, header("s1", "p1"))
		return err
	}
	unknown := func(what string, err error) {
		t.Helper()
		if e := events.AsError(err); e == nil || e.Code != events.CodeInvalidRequest || !strings.Contains(e.Message, events.ReasonUnknownRequest) {
			t.Errorf("%s = %v, want %s naming %s", what, err, events.CodeInvalidRequest, events.ReasonUnknownRequest)
		}
	}

	perm, _ := until[*events.AdapterPermissionRequest](t, h)
	unknown("an input answer to a permission request", input(perm.RequestID))
	if err := permission(perm.RequestID); err != nil {
		t.Fatalf("answer %s: %v", perm.RequestID, err)
	}
	in, _ := until[*events.AdapterInputRequest](t, h)
	unknown("a permission answer to an input request", permission(in.RequestID))
	if err := input(in.RequestID); err != nil {
		t.Fatalf("answer %s: %v", in.RequestID, err)
	}
	unknown("a second input answer", input(in.RequestID))
	res, before := until[*events.AdapterPromptResult](t, h)
	if got := strings.Join(updateTexts(before), "|"); got != "input: decline\n" || res.StopReason != "end_turn" {
		t.Errorf("after the answers: updates %q, result %+v; want the decline reported and end_turn", got, res)
	}
}

// Agent-to-client requests other than session/request_permission (fs/*,
// terminal/*) are answered -32601 by the runner itself and never reach
// ACP_IO. The test agent sends no such request, so a shell in front of
// it does: once it has read the runner's first line, it writes two
// requests to stdout, then hands the runner's lines (which it copies to a
// file) to the agent.
func TestAgentRequestsAreRefused(t *testing.T) {
	stdinCopy := filepath.Join(t.TempDir(), "stdin.jsonl")
	script := `IFS= read -r first
printf '%s\n' '{"jsonrpc":"2.0","id":"fs-1","method":"fs/read_text_file","params":{"sessionId":"x","path":"/etc/hosts"}}' '{"jsonrpc":"2.0","id":7,"method":"terminal/create","params":{"sessionId":"x","command":"ls"}}'
{ printf '%s\n' "$first"; cat; } | tee -a "$STDIN_COPY" | exec "$0" "$@"`
	h := start(t, adapterrunner.Agent{ID: "sh", Command: "/bin/sh", Args: []string{"-c", script, testAgent},
		Env: map[string]string{"STDIN_COPY": stdinCopy}})
	h.create(t, "s1", "p1", "sh")

	want := map[string]string{`"fs-1"`: "fs/read_text_file", `7`: "terminal/create"}
	err := testutil.Poll(t.Context(), "both requests refused", func() (bool, error) {
		data, _ := os.ReadFile(stdinCopy)
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		refused := 0
		for sc.Scan() {
			var m struct {
				ID    json.RawMessage
				Error struct {
					Code int
					Data struct{ Method string }
				}
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Error.Code == -32601 && want[string(m.ID)] == m.Error.Data.Method {
				refused++
			}
		}
		return refused == len(want), nil
	})
	if err != nil {
		data, _ := os.ReadFile(stdinCopy)
		t.Fatalf("%v: the runner did not answer both requests -32601 naming their methods; it wrote:\n%s", err, data)
	}

	h.prompt(t, "s1", "p1", "t1", "say hi")
	_, before := until[*events.AdapterPromptResult](t, h)
	for _, v := range before {
		switch v := v.(type) {
		case *events.AdapterUpdate, *events.AdapterUpdates:
		case *events.AcpAgentStderrEvent: // the agent logs the answers it did not ask for
		default:
			t.Errorf("ACP_IO has a %s", v.VariantName())
		}
	}
}

// setConfig asks the runner to set option configID to value.
func (h *harness) setConfig(t *testing.T, sid, processID, configID, value string) (*events.RunnerConfigResponse, error) {
	t.Helper()
	return rpc.Call[events.RunnerConfigResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerSetConfig),
		&events.RunnerSetConfigRequest{ConfigID: configID, Value: events.JSON(value)}, header(sid, processID))
}

// optionValues returns each option's id and current value.
func optionValues(t *testing.T, opts []events.JSON) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range opts {
		var opt struct {
			ID           string          `json:"id"`
			CurrentValue json.RawMessage `json:"currentValue"`
		}
		if err := json.Unmarshal(o, &opt); err != nil {
			t.Fatalf("option %s: %v", o, err)
		}
		out[opt.ID] = string(opt.CurrentValue)
	}
	return out
}

// wantCode checks that err is an *events.Error with code and a message
// containing text.
func wantCode(t *testing.T, what string, err error, code events.Code, text string) {
	t.Helper()
	if e := events.AsError(err); e == nil || e.Code != code || !strings.Contains(e.Message, text) {
		t.Errorf("%s = %v, want %s with %q", what, err, code, text)
	}
}

// An agent with config options is set with session/set_config_option and
// answers the complete list; a boolean value is sent with
// "type":"boolean"; the agent's refusals come back with its code.
func TestSetConfigOption(t *testing.T) {
	stdinCopy := filepath.Join(t.TempDir(), "stdin.jsonl")
	h := start(t, adapterrunner.Agent{ID: "opts", Command: "/bin/sh",
		Args: []string{"-c", `tee -a "$STDIN_COPY" | exec "$0" "$@"`, testAgent, "--config-options=mode,model"},
		Env:  map[string]string{"STDIN_COPY": stdinCopy}})
	created := h.create(t, "s1", "p1", "opts")
	if got := optionValues(t, created.ConfigOptions); got["mode"] != `"default"` || got["model"] != `"test-small"` {
		t.Fatalf("created options = %v, want mode and model", got)
	}

	resp, err := h.setConfig(t, "s1", "p1", "mode", `"plan"`)
	if err != nil {
		t.Fatalf("set mode: %v", err)
	}
	if got := optionValues(t, resp.ConfigOptions); len(got) != 2 || got["mode"] != `"plan"` || got["model"] != `"test-small"` {
		t.Errorf("options after set mode = %v, want mode plan among both", got)
	}
	h.prompt(t, "s1", "p1", "t1", "config")
	if _, before := until[*events.AdapterPromptResult](t, h); strings.Join(updateTexts(before), "") != "config: mode=plan model=test-small" {
		t.Errorf("the agent says %q, want mode plan", updateTexts(before))
	}

	_, err = h.setConfig(t, "s1", "p1", "model", `true`)
	wantCode(t, "set model true", err, events.CodeAdapterError, "-32602")
	// tee may pass the line on to the agent, which answers, before it
	// appends it to the copy.
	sent := []byte(`"configId":"model","type":"boolean","value":true}`)
	if err := testutil.Poll(t.Context(), "the boolean value sent", func() (bool, error) {
		data, _ := os.ReadFile(stdinCopy)
		return bytes.Contains(data, sent), nil
	}); err != nil {
		data, _ := os.ReadFile(stdinCopy)
		t.Errorf("%v: a boolean value was not sent with \"type\":\"boolean\":\n%s", err, data)
	}
	_, err = h.setConfig(t, "s1", "p1", "nope", `"x"`)
	wantCode(t, "set an unknown option", err, events.CodeAdapterError, "-32602")
	for _, v := range []string{`1`, `{"a":1}`, `not json`} {
		_, err = h.setConfig(t, "s1", "p1", "mode", v)
		wantCode(t, "set mode "+v, err, events.CodeInvalidRequest, "string or boolean")
	}
	_, err = h.setConfig(t, "s1", "nope", "mode", `"plan"`)
	wantCode(t, "set on another process", err, events.CodeAdapterExited, "nope")
}

// Options the runner mapped from an agent's legacy modes and models lists
// are set with session/set_mode and session/set_model, which answer no
// list: the caller updates its own.
func TestSetConfigLegacy(t *testing.T) {
	h := start(t, adapterrunner.Agent{ID: "legacy", Command: testAgent, Args: []string{"--legacy-modes", "--legacy-models"}})
	created := h.create(t, "s1", "p1", "legacy")
	for _, o := range created.ConfigOptions {
		var opt struct {
			ID   string                                  `json:"id"`
			Meta struct{ Skein struct{ Legacy string } } `json:"_meta"`
		}
		_ = json.Unmarshal(o, &opt)
		if want := map[string]string{"mode": "session/set_mode", "model": "session/set_model"}[opt.ID]; opt.Meta.Skein.Legacy != want {
			t.Errorf("option %s is set by %q, want %q", opt.ID, opt.Meta.Skein.Legacy, want)
		}
	}
	if got := optionValues(t, created.ConfigOptions); got["mode"] != `"default"` || got["model"] != `"test-small"` {
		t.Fatalf("created options = %v, want legacy mode and model", got)
	}
	for _, set := range []struct{ id, value string }{{"mode", `"plan"`}, {"model", `"test-large"`}} {
		resp, err := h.setConfig(t, "s1", "p1", set.id, set.value)
		if err != nil {
			t.Fatalf("set %s: %v", set.id, err)
		}
		if resp.ConfigOptions != nil {
			t.Errorf("set %s answered options %s, want none", set.id, resp.ConfigOptions)
		}
	}
	h.prompt(t, "s1", "p1", "t1", "config")
	if _, before := until[*events.AdapterPromptResult](t, h); strings.Join(updateTexts(before), "") != "config: mode=plan model=test-large" {
		t.Errorf("the agent says %q, want mode plan and model test-large", updateTexts(before))
	}
	_, err := h.setConfig(t, "s1", "p1", "mode", `true`)
	wantCode(t, "set legacy mode true", err, events.CodeInvalidRequest, "takes a string")
	_, err = h.setConfig(t, "s1", "p1", "model", `"nope"`)
	wantCode(t, "set an unknown model", err, events.CodeAdapterError, "-32602")
}

// status says whether the adapter runs and whether a turn's prompt was
// written to it.
func TestStatus(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	status := func(processID, turnID string) events.AdapterStatus {
		t.Helper()
		hdr := header("s1", processID)
		if turnID != "" {
			hdr.Set(events.HeaderTurnID, turnID)
		}
		st, err := rpc.Call[events.AdapterStatus](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStatus),
			&events.AcpGetSessionStateRequest{SessionID: "s1"}, hdr)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		return *st
	}
	if got := status("p1", "t1"); got != (events.AdapterStatus{Alive: true}) {
		t.Errorf("status before the prompt = %+v, want alive, not written", got)
	}
	h.prompt(t, "s1", "p1", "t1", "say hi")
	for _, c := range []struct {
		process, turn string
		want          events.AdapterStatus
	}{
		{"p1", "t1", events.AdapterStatus{Alive: true, PromptWritten: true}},
		{"p1", "t2", events.AdapterStatus{Alive: true}},
		{"p1", "", events.AdapterStatus{Alive: true}},
		{"p-other", "t1", events.AdapterStatus{}},
	} {
		if got := status(c.process, c.turn); got != c.want {
			t.Errorf("status(%s, %q) = %+v, want %+v", c.process, c.turn, got, c.want)
		}
	}
}

// A turn's prompt is written to the adapter once, however often it is
// dispatched: a session owner sends a dispatch again when the first went
// unanswered, and the first may still arrive. Each dispatch is
// acknowledged; the adapter answers the turn once.
func TestPromptIsWrittenOncePerTurn(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "say once")
	h.prompt(t, "s1", "p1", "t1", "say once")
	res, before := until[*events.AdapterPromptResult](t, h)
	if res.TurnID != "t1" || strings.Join(updateTexts(before), "|") != "once" {
		t.Fatalf("first result = %+v after %q, want turn t1 after once", res, updateTexts(before))
	}
	// Had the adapter been given the prompt twice, its second answer to
	// t1 would come before t2's.
	h.prompt(t, "s1", "p1", "t2", "say twice")
	res, before = until[*events.AdapterPromptResult](t, h)
	if res.TurnID != "t2" || strings.Join(updateTexts(before), "|") != "twice" {
		t.Errorf("next result = %+v after %q, want turn t2 after twice", res, updateTexts(before))
	}
}

// Run returns only after everything it started has ended: here a create
// whose agent never answers initialize is in flight when Run is stopped.
// Its caller is answered, and no goroutine of the runner or of its ACP
// connections is left.
func TestRunWaitsForWhatItStarted(t *testing.T) {
	h := start(t, adapterrunner.Agent{ID: "mute", Command: "/bin/sh", Args: []string{"-c", "exec cat >/dev/null"}})
	created := make(chan error, 1)
	go func() {
		_, err := rpc.Call[events.AcpSessionCreatedResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate),
			&events.AcpCreateSessionRequest{AgentType: "mute", McpServers: events.JSON("[]")}, header("s1", "p1"))
		created <- err
	}()
	testutil.Eventually(t, "the adapter to start", func() bool { return h.runner.Info().Load == 1 })
	if err := h.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := <-created; err == nil {
		t.Errorf("a create cut short by the runner stopping succeeded")
	}
	// A goroutine may still be on its way out when Run returns (past its
	// WaitGroup's Done): give it a moment, as goleak does.
	var left []string
	if err := testutil.Poll(t.Context(), "the runner's goroutines to end", func() (bool, error) { left = runnerGoroutines(); return len(left) == 0, nil }); err != nil {
		t.Errorf("%v: goroutines left after Run returned:\n%s", err, strings.Join(left, "\n\n"))
	}
}

// runnerGoroutines returns the stacks of the goroutines running code of
// the runner or of acpwire.
func runnerGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "skein.dev/services/adapter-runner.") || strings.Contains(g, "skein.dev/pkg/acp/acpwire.") {
			out = append(out, g)
		}
	}
	return out
}
