package testagent_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"skein.dev/testagent"
)

func setupParams(sid string) map[string]any {
	return map[string]any{"sessionId": sid, "cwd": "/tmp", "mcpServers": []any{}}
}

func TestLoadResumeDisabledByDefault(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		wantError(t, p.call("session/load", setupParams(sid)), -32601)
		wantError(t, p.call("session/resume", setupParams(sid)), -32601)
		wantError(t, p.call("session/close", map[string]any{"sessionId": sid}), -32601)
	})
}

func TestLoadSameProcess(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--load-session"}})
		init := p.initialize()
		if caps := init["agentCapabilities"].(map[string]any); caps["loadSession"] != true {
			t.Errorf("agentCapabilities = %v, want loadSession true", caps)
		}
		sid, _ := p.newSession()
		turnUps, _ := p.turn(sid, "think hmm\nsay hello")

		ups, resp := p.until(p.request("session/load", setupParams(sid)))
		if got := result[map[string]any](t, resp); len(got) != 0 {
			t.Errorf("session/load result = %v, want {}", got)
		}
		want := append([]update{{
			"sessionUpdate": "user_message_chunk",
			"content":       map[string]any{"type": "text", "text": "think hmm\nsay hello"},
			"messageId":     "user_1",
		}}, turnUps...)
		if diff := cmp.Diff(want, ups); diff != "" {
			t.Errorf("replay mismatch (-want +got):\n%s", diff)
		}
		wantError(t, p.call("session/load", setupParams("sess_unknown")), -32002)
		// Resume is still off.
		wantError(t, p.call("session/resume", setupParams(sid)), -32601)
	})
}

func TestResume(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{env: map[string]string{testagent.EnvResume: "1"}})
		init := p.initialize()
		caps := init["agentCapabilities"].(map[string]any)
		if diff := cmp.Diff(map[string]any{"resume": map[string]any{}}, caps["sessionCapabilities"]); diff != "" || caps["loadSession"] != false {
			t.Errorf("agentCapabilities = %v, want only resume", caps)
		}
		sid, _ := p.newSession()
		p.turn(sid, "say x")
		// call fails on any update: resume replays nothing.
		if got := result[map[string]any](t, p.call("session/resume", map[string]any{"sessionId": sid, "cwd": "/tmp"})); len(got) != 0 {
			t.Errorf("session/resume result = %v, want {}", got)
		}
		wantError(t, p.call("session/resume", setupParams("sess_nope")), -32002)
		wantError(t, p.call("session/load", setupParams(sid)), -32601)
	})
}

func TestLoadAcrossProcessesWithStateDir(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		dir := t.TempDir()
		first := start(t, opts{args: []string{"--load-session", "--resume", "--config-options=model"}, env: map[string]string{testagent.EnvStateDir: dir}})
		sid, _ := first.newSession()
		turnUps, _ := first.turn(sid, "say persisted")
		result[map[string]any](t, first.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "model", "value": "test-large"}))
		first.closeStdin()
		if code := first.waitExit(); code != 0 {
			t.Fatalf("first agent exit code = %d, want 0", code)
		}

		second := start(t, opts{args: []string{"--load-session", "--resume", "--config-options=model", "--state-dir", dir}})
		second.initialize()
		ups, resp := second.until(second.request("session/load", setupParams(sid)))
		want := append([]update{{
			"sessionUpdate": "user_message_chunk",
			"content":       map[string]any{"type": "text", "text": "say persisted"},
			"messageId":     "user_1",
		}}, turnUps...)
		if diff := cmp.Diff(want, ups); diff != "" {
			t.Errorf("replay in a new process mismatch (-want +got):\n%s", diff)
		}
		res := result[struct {
			ConfigOptions []struct{ ID, CurrentValue string }
		}](t, resp)
		if len(res.ConfigOptions) != 1 || res.ConfigOptions[0].CurrentValue != "test-large" {
			t.Errorf("loaded configOptions = %+v, want model test-large", res.ConfigOptions)
		}
		// Message ids continue where the first process stopped.
		ups, _ = second.turn(sid, "say next")
		if got := chunkSummary(ups); len(got) != 1 || got[0] != "agent_message_chunk/msg_2/next" {
			t.Errorf("turn after load = %v, want msg_2", got)
		}
		wantError(t, second.call("session/load", setupParams("sess_0000")), -32002)
		wantError(t, second.call("session/load", setupParams("../../etc/passwd")), -32002)

		third := start(t, opts{args: []string{"--resume", "--state-dir=" + dir}})
		third.initialize()
		result[map[string]any](t, third.call("session/resume", setupParams(sid)))
		if ups, stop := third.turn(sid, "say resumed"); stop != "end_turn" || agentText(ups) != "resumed" {
			t.Errorf("turn after resume = %q, %q", agentText(ups), stop)
		}
		wantError(t, third.call("session/resume", setupParams("sess_ffff")), -32002)
	})
}

// With --forget-config a session comes back into a new process with its
// conversation and the default mode and model; the config command reports
// the ones in force.
func TestForgetConfigAcrossProcesses(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		args := []string{"--resume", "--legacy-modes", "--legacy-models", "--forget-config", "--state-dir", t.TempDir()}
		first := start(t, opts{args: args})
		sid, _ := first.newSession()
		result[map[string]any](t, first.call("session/set_model", map[string]any{"sessionId": sid, "modelId": "test-large"}))
		if ups, _ := first.turn(sid, "mode plan\nconfig"); agentText(ups) != "config: mode=plan model=test-large" {
			t.Errorf("config after setting = %q", agentText(ups))
		}
		// The same process keeps the settings on resume.
		result[map[string]any](t, first.call("session/resume", setupParams(sid)))
		if ups, _ := first.turn(sid, "config"); agentText(ups) != "config: mode=plan model=test-large" {
			t.Errorf("config after a resume in the same process = %q", agentText(ups))
		}
		first.closeStdin()
		if code := first.waitExit(); code != 0 {
			t.Fatalf("first agent exit code = %d, want 0", code)
		}

		second := start(t, opts{args: args})
		second.initialize()
		res := result[struct {
			Modes  struct{ CurrentModeID string }
			Models struct{ CurrentModelID string }
		}](t, second.call("session/resume", setupParams(sid)))
		if res.Modes.CurrentModeID != "default" || res.Models.CurrentModelID != "test-small" {
			t.Errorf("resumed in a new process: mode %q, model %q; want the defaults", res.Modes.CurrentModeID, res.Models.CurrentModelID)
		}
		if ups, _ := second.turn(sid, "config"); agentText(ups) != "config: mode=default model=test-small" {
			t.Errorf("config in a new process = %q", agentText(ups))
		}
	})
}

func TestCloseCancelsTurn(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--close"}})
		sid, _ := p.newSession()
		promptID := p.prompt(sid, "say before\nsleep 1h")
		p.nextUpdate()
		closeID := p.request("session/close", map[string]any{"sessionId": sid})
		// Both answers come, in either order.
		got := map[int]message{}
		for len(got) < 2 {
			m := p.next()
			if m.Method != "" {
				t.Fatalf("unexpected %+v", m)
			}
			for _, id := range []int{promptID, closeID} {
				if m.isResponse(id) {
					got[id] = m
				}
			}
		}
		if stop := result[struct{ StopReason string }](t, got[promptID]).StopReason; stop != "cancelled" {
			t.Errorf("stopReason = %q, want cancelled", stop)
		}
		result[map[string]any](t, got[closeID])
		_, resp := p.until(p.prompt(sid, "say gone"))
		wantError(t, resp, -32002)
	})
}

func TestConfigOptions(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--config-options=mode,model"}})
		sid, res := p.newSession()
		if _, ok := res["modes"]; ok {
			t.Errorf("session/new returned modes without --legacy-modes: %v", res)
		}
		type option struct {
			ID, Category, Type, CurrentValue string
			Options                          []struct{ Value string }
		}
		type setResult struct{ ConfigOptions []option }
		opts := result[setResult](t, p.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "model", "value": "test-large"}))
		want := []option{
			{ID: "mode", Category: "mode", Type: "select", CurrentValue: "default", Options: []struct{ Value string }{{"default"}, {"plan"}, {"yolo"}}},
			{ID: "model", Category: "model", Type: "select", CurrentValue: "test-large", Options: []struct{ Value string }{{"test-small"}, {"test-large"}}},
		}
		if diff := cmp.Diff(want, opts.ConfigOptions); diff != "" {
			t.Errorf("set_config_option result mismatch (-want +got):\n%s", diff)
		}
		set := func(configID string, value any) message {
			return p.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": configID, "value": value})
		}
		if got := result[setResult](t, set("mode", "plan")).ConfigOptions[0].CurrentValue; got != "plan" {
			t.Errorf("mode after set = %q, want plan", got)
		}
		wantError(t, set("model", "gpt-9"), -32602)
		wantError(t, set("effort", "high"), -32602)
		wantError(t, set("mode", true), -32602)
		wantError(t, p.call("session/set_config_option", map[string]any{"sessionId": "sess_x", "configId": "mode", "value": "plan"}), -32002)
		wantError(t, p.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}), -32601)
		wantError(t, p.call("session/set_model", map[string]any{"sessionId": sid, "modelId": "test-large"}), -32601)
	})
}

func TestConfigOptionsFlagBeatsEnv(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{
			args: []string{"--config-options", "model"},
			env:  map[string]string{testagent.EnvConfigOptions: "mode", testagent.EnvLoadSession: "true"},
		})
		init := p.initialize()
		if caps := init["agentCapabilities"].(map[string]any); caps["loadSession"] != true {
			t.Errorf("env %s=true not applied: %v", testagent.EnvLoadSession, caps)
		}
		_, res := p.newSession()
		got := res["configOptions"].([]any)
		if len(got) != 1 || got[0].(map[string]any)["id"] != "model" {
			t.Errorf("configOptions = %v, want only model (flag beats env)", got)
		}
	})
}

func TestLegacyModes(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--legacy-modes"}})
		sid, res := p.newSession()
		if _, ok := res["configOptions"]; ok {
			t.Errorf("session/new returned configOptions with only --legacy-modes: %v", res)
		}
		modes := res["modes"].(map[string]any)
		if modes["currentModeId"] != "default" || len(modes["availableModes"].([]any)) != 3 {
			t.Errorf("modes = %v", modes)
		}
		ups, resp := p.until(p.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))
		result[map[string]any](t, resp)
		if diff := cmp.Diff([]update{{"sessionUpdate": "current_mode_update", "currentModeId": "plan"}}, ups); diff != "" {
			t.Errorf("set_mode updates mismatch (-want +got):\n%s", diff)
		}
		wantError(t, p.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bogus"}), -32602)
		wantError(t, p.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "plan"}), -32601)
	})
}

func TestLegacyModesWithModeConfigOption(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--legacy-modes", "--config-options=mode"}})
		sid, res := p.newSession()
		if res["modes"] == nil || res["configOptions"] == nil {
			t.Fatalf("session/new = %v, want modes and configOptions (like claude-agent-acp)", res)
		}
		ups, resp := p.until(p.request("session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "yolo"}))
		result[map[string]any](t, resp)
		if diff := cmp.Diff([]update{{"sessionUpdate": "current_mode_update", "currentModeId": "yolo"}}, ups); diff != "" {
			t.Errorf("updates mismatch (-want +got):\n%s", diff)
		}
		ups, resp = p.until(p.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))
		result[map[string]any](t, resp)
		if len(ups) != 2 || ups[0].kind() != "current_mode_update" || ups[1].kind() != "config_option_update" {
			t.Errorf("set_mode updates = %v, want current_mode_update, config_option_update", ups)
		}
	})
}

func TestLegacyModels(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--legacy-models", "--legacy-modes"}})
		sid, res := p.newSession()
		models := res["models"].(map[string]any)
		if models["currentModelId"] != "test-small" || len(models["availableModels"].([]any)) != 2 {
			t.Errorf("models = %v", models)
		}
		if res["modes"] == nil || res["configOptions"] != nil {
			t.Errorf("session/new = %v, want modes and models only (like gemini)", res)
		}
		result[map[string]any](t, p.call("session/set_model", map[string]any{"sessionId": sid, "modelId": "test-large"}))
		wantError(t, p.call("session/set_model", map[string]any{"sessionId": sid, "modelId": "nope"}), -32602)
		wantError(t, p.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "model", "value": "test-large"}), -32601)
	})
}

func TestBadFlags(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		for _, o := range []opts{
			{args: []string{"--legacy-models", "--config-options=model"}},
			{args: []string{"--config-options=effort"}},
			{args: []string{"--no-such-flag"}},
			{args: []string{"positional"}},
			{args: []string{"--fail-load=sometimes"}},
			{args: []string{"--garbage=-1"}},
			{env: map[string]string{testagent.EnvLoadSession: "maybe"}},
		} {
			p := start(t, o)
			if code := p.waitExit(); code != 2 {
				t.Errorf("%+v: exit code = %d, want 2", o, code)
			}
		}
	})
}

func TestCommandsFlag(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		p.newSession() // call() fails on any update, so none came before the response
		p.initialize() // ... and none between the session/new response and this one

		p = start(t, opts{args: []string{"--commands"}})
		p.initialize()
		p.request("session/new", map[string]any{"cwd": "/tmp", "mcpServers": []any{}})
		if m := p.next(); m.Result == nil {
			t.Fatalf("want the session/new response first, got %+v", m)
		}
		u := p.nextUpdate()
		if u.kind() != "available_commands_update" || len(u["availableCommands"].([]any)) == 0 {
			t.Errorf("update after session/new = %v, want available_commands_update", u)
		}
	})
}

func TestMalformedInput(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		p.sendRaw("this is not json")
		if got, want := string(p.nextLine()), `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`; got != want {
			t.Errorf("parse error line = %s, want %s", got, want)
		}
		p.sendRaw(`{"jsonrpc":"2.0","id":1,"method":"initialize"`) // truncated
		if m := p.next(); m.Error == nil || m.Error.Code != -32700 || string(m.ID) != "null" {
			t.Errorf("truncated JSON answer = %+v, want -32700 with id null", m)
		}
		p.sendRaw(`[1,2]`)
		if m := p.next(); m.Error == nil || m.Error.Code != -32600 || string(m.ID) != "null" {
			t.Errorf("batch answer = %+v, want -32600 with id null", m)
		}
		p.sendRaw(`{"jsonrpc":"1.0","id":"x","method":"initialize","params":{"protocolVersion":1}}`)
		if m := p.next(); m.Error == nil || m.Error.Code != -32600 || string(m.ID) != `"x"` {
			t.Errorf("wrong jsonrpc answer = %+v, want -32600 with id \"x\"", m)
		}
		p.sendRaw(`{"jsonrpc":"2.0","method":"_vendor/notify","params":{}}`) // ignored
		p.sendRaw(`{"jsonrpc":"2.0","id":"str-id","method":"_vendor/custom","params":{}}`)
		m := p.next()
		wantError(t, m, -32601)
		if string(m.ID) != `"str-id"` || string(m.Error.Data) != `{"method":"_vendor/custom"}` {
			t.Errorf("unknown method answer = %+v", m)
		}
		wantError(t, p.call("session/new", map[string]any{"cwd": "/tmp"}), -32602)
		wantError(t, p.call("session/new", map[string]any{"cwd": "relative", "mcpServers": []any{}}), -32602)
		wantError(t, p.call("initialize", map[string]any{}), -32602)
		wantError(t, p.call("session/prompt", map[string]any{"sessionId": "sess_nope", "prompt": []any{}}), -32002)
		wantError(t, p.call("session/prompt", map[string]any{"sessionId": "sess_nope"}), -32602)
		// A response to a request the agent never sent is ignored.
		p.sendRaw(`{"jsonrpc":"2.0","id":42,"result":{}}`)
		// Still healthy; the protocol version is always 1.
		init := result[map[string]any](t, p.call("initialize", map[string]any{"protocolVersion": 99}))
		if init["protocolVersion"] != float64(1) {
			t.Errorf("protocolVersion = %v, want 1", init["protocolVersion"])
		}
	})
}

func TestEOFLetsTurnsFinish(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		id := p.prompt(sid, "sleep 20\nsay done")
		p.closeStdin()
		ups, resp := p.until(id)
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "end_turn" || agentText(ups) != "done" {
			t.Errorf("turn after EOF = %q, %q; want \"done\", end_turn", agentText(ups), stop)
		}
		p.expectEOF()
		if code := p.waitExit(); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	})
}

func TestEOFCancelsPermissionWait(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		id := p.prompt(sid, "permission call_1")
		p.nextRequest("session/request_permission")
		p.closeStdin()
		ups, resp := p.until(id)
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "cancelled" || agentText(ups) != "permission: cancelled\n" {
			t.Errorf("turn = %q, %q; want \"permission: cancelled\\n\", cancelled", agentText(ups), stop)
		}
		if code := p.waitExit(); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	})
}

func TestSignalCancelsTurns(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// -exit-on-eof=false: only the signal ends the process.
		p := start(t, opts{ctx: ctx, args: []string{"-exit-on-eof=false"}})
		sid, _ := p.newSession()
		id := p.prompt(sid, "say before\nsleep 1h")
		p.nextUpdate()
		p.closeStdin()
		select {
		case <-p.exited:
			t.Fatal("agent exited at EOF with -exit-on-eof=false")
		default:
		}
		cancel() // SIGTERM for the binary
		_, resp := p.until(id)
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "cancelled" {
			t.Errorf("stopReason = %q, want cancelled", stop)
		}
		if code := p.waitExit(); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	})
}

// withInstructions returns setup params whose _meta carries text as
// appended system prompt, the way claude-agent-acp takes it.
func withInstructions(params map[string]any, text string) map[string]any {
	params["_meta"] = map[string]any{"systemPrompt": map[string]any{"append": text}, "other": 1}
	return params
}

// The instructions command reports the _meta.systemPrompt.append of the
// session/new, load or resume that last opened the session: each brings its
// own, and none is kept in the state dir.
func TestInstructions(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		dir := t.TempDir()
		args := []string{"--load-session", "--resume", "--state-dir", dir}
		say := func(p *proc, sid, want string) {
			t.Helper()
			if ups, _ := p.turn(sid, "instructions"); agentText(ups) != want {
				t.Errorf("instructions = %q, want %q", agentText(ups), want)
			}
		}
		first := start(t, opts{args: args})
		first.initialize()
		sid := result[struct{ SessionID string }](t, first.call("session/new",
			withInstructions(map[string]any{"cwd": "/tmp", "mcpServers": []any{}}, "be brief\n\nand kind"))).SessionID
		say(first, sid, "instructions: be brief\n\nand kind")
		result[map[string]any](t, first.call("session/resume", setupParams(sid)))
		say(first, sid, "instructions: (none)")
		first.until(first.request("session/load", withInstructions(setupParams(sid), "loaded")))
		say(first, sid, "instructions: loaded")
		// A systemPrompt of another shape is not an appended prompt.
		result[map[string]any](t, first.call("session/resume", map[string]any{"sessionId": sid, "cwd": "/tmp", "_meta": map[string]any{"systemPrompt": "replace"}}))
		say(first, sid, "instructions: (none)")
		first.closeStdin()
		if code := first.waitExit(); code != 0 {
			t.Fatalf("first agent exit code = %d, want 0", code)
		}

		second := start(t, opts{args: args})
		second.initialize()
		result[map[string]any](t, second.call("session/resume", withInstructions(setupParams(sid), "resumed")))
		say(second, sid, "instructions: resumed")

		third := start(t, opts{args: args})
		third.initialize()
		third.until(third.request("session/load", setupParams(sid)))
		say(third, sid, "instructions: (none)")
	})
}
