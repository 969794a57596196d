package testagent_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"skein.dev/internal/testutil"
	"skein.dev/testagent"
)

// jsonMap decodes a JSON literal for comparisons with cmp.
func jsonMap(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad JSON literal %s: %v", s, err)
	}
	return m
}

func TestInitializeNewPromptEcho(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		init := p.initialize()
		want := jsonMap(t, `{
			"protocolVersion": 1,
			"agentCapabilities": {
				"loadSession": false,
				"promptCapabilities": {"image": true, "audio": true, "embeddedContext": true},
				"mcpCapabilities": {"http": false, "sse": false},
				"sessionCapabilities": {}
			},
			"authMethods": [],
			"agentInfo": {"name": "skein-testagent", "title": "Skein test agent", "version": "1.0.0"}
		}`)
		if diff := cmp.Diff(want, init); diff != "" {
			t.Errorf("initialize result mismatch (-want +got):\n%s", diff)
		}
		res := result[map[string]any](p.t, p.call("session/new", map[string]any{"cwd": "/tmp", "mcpServers": []any{}}))
		sid, _ := res["sessionId"].(string)
		if len(res) != 1 || sid == "" {
			t.Errorf("session/new result = %v, want only a sessionId by default", res)
		}

		ups, stop := p.turn(sid, "Hello agent")
		if stop != "end_turn" {
			t.Errorf("stopReason = %q, want end_turn", stop)
		}
		wantChunks := []string{"agent_message_chunk/msg_1/echo:", "agent_message_chunk/msg_1/ Hello", "agent_message_chunk/msg_1/ agent"}
		if diff := cmp.Diff(wantChunks, chunkSummary(ups)); diff != "" {
			t.Errorf("echo chunks mismatch (-want +got):\n%s", diff)
		}
		// A new turn starts a new message.
		ups, _ = p.turn(sid, "multi\nline <&> text")
		if got, want := agentText(ups), "echo: multi\nline <&> text"; got != want {
			t.Errorf("echo text = %q, want %q", got, want)
		}
		for _, u := range ups {
			if u.messageID() != "msg_2" {
				t.Errorf("second turn chunk messageId = %q, want msg_2", u.messageID())
			}
		}
	})
}

// An agent started with --prompt-capabilities advertises only those, and
// refuses a prompt with a block that needs another (-32602), as a strict
// agent would; text and resource_link blocks always go.
func TestPromptCapabilities(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--prompt-capabilities=image"}})
		init := p.initialize()
		caps, _ := init["agentCapabilities"].(map[string]any)
		if diff := cmp.Diff(map[string]any{"image": true, "audio": false, "embeddedContext": false}, caps["promptCapabilities"]); diff != "" {
			t.Errorf("promptCapabilities mismatch (-want +got):\n%s", diff)
		}
		res := result[map[string]any](p.t, p.call("session/new", map[string]any{"cwd": "/tmp", "mcpServers": []any{}}))
		sid, _ := res["sessionId"].(string)
		text := map[string]any{"type": "text", "text": "blocks"}
		image := map[string]any{"type": "image", "data": "AA==", "mimeType": "image/png"}
		link := map[string]any{"type": "resource_link", "uri": "file:///tmp/a.txt", "name": "a.txt"}
		for _, refused := range []map[string]any{
			{"type": "audio", "data": "AA==", "mimeType": "audio/wav"},
			{"type": "resource", "resource": map[string]any{"uri": "file:///tmp/a.txt", "text": "a"}},
		} {
			wantError(t, p.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{text, refused}}), -32602)
		}
		ups, resp := p.until(p.request("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{text, image, link}}))
		if stop := result[struct{ StopReason string }](p.t, resp).StopReason; stop != "end_turn" {
			t.Errorf("stopReason = %q, want end_turn", stop)
		}
		if got := agentText(ups); strings.Count(got, "block ") != 2 {
			t.Errorf("the agent reported %q, want the image and the link", got)
		}
	})
}

func TestChunksMessagesThoughts(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		ups, stop := p.turn(sid, "chunks 3\nmessage\nthink pondering\nsay x\nchunks 2 part\nnot a command\n# a comment\nsay \"q\\nline\"")
		if stop != "end_turn" {
			t.Errorf("stopReason = %q, want end_turn", stop)
		}
		want := []string{
			"agent_message_chunk/msg_1/chunk 1 ",
			"agent_message_chunk/msg_1/chunk 2 ",
			"agent_message_chunk/msg_1/chunk 3 ",
			"agent_thought_chunk/msg_2/pondering",
			"agent_message_chunk/msg_3/x",
			"agent_message_chunk/msg_3/part 1 ",
			"agent_message_chunk/msg_3/part 2 ",
			"agent_message_chunk/msg_3/echo: not",
			"agent_message_chunk/msg_3/ a",
			"agent_message_chunk/msg_3/ command",
			"agent_message_chunk/msg_3/q\nline",
		}
		if diff := cmp.Diff(want, chunkSummary(ups)); diff != "" {
			t.Errorf("chunks mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestToolAndPlanShapes(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		ups, _ := p.turn(sid, "tool call_1 Run ls\ntoolstep c2 in_progress\ntoolstep c2 failed boom\nplan [x] read | [~] edit | test\nplan")
		var got []map[string]any
		for _, u := range ups {
			got = append(got, u)
		}
		want := []map[string]any{
			jsonMap(t, `{"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Run ls","kind":"execute","status":"pending","rawInput":{"command":"Run ls"}}`),
			jsonMap(t, `{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"in_progress"}`),
			jsonMap(t, `{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"Run ls: done"}}],"rawOutput":{"output":"Run ls: done"}}`),
			jsonMap(t, `{"sessionUpdate":"tool_call","toolCallId":"c2","title":"Tool c2","kind":"execute","status":"in_progress"}`),
			jsonMap(t, `{"sessionUpdate":"tool_call_update","toolCallId":"c2","status":"failed","content":[{"type":"content","content":{"type":"text","text":"boom"}}]}`),
			jsonMap(t, `{"sessionUpdate":"plan","entries":[{"content":"read","priority":"medium","status":"completed"},{"content":"edit","priority":"medium","status":"in_progress"},{"content":"test","priority":"medium","status":"pending"}]}`),
			jsonMap(t, `{"sessionUpdate":"plan","entries":[]}`),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("updates mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestPermission(t *testing.T) {
	tests := []struct {
		name      string
		script    string
		answer    string // result object; "" = send session/cancel, then answer cancelled late
		wantOpts  string
		wantChunk string
		wantStop  string
	}{
		{
			name:      "selected",
			script:    "tool call_1 Edit file\npermission call_1 allow_once=allow,reject_once=reject\nsay after",
			answer:    `{"outcome":{"outcome":"selected","optionId":"allow"}}`,
			wantOpts:  `[{"optionId":"allow","name":"Allow once","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}]`,
			wantChunk: "permission: selected allow",
			wantStop:  "end_turn",
		},
		{
			name:      "default options, rejected",
			script:    "permission call_9\nsay after",
			answer:    `{"outcome":{"outcome":"selected","optionId":"reject"}}`,
			wantOpts:  `[{"optionId":"allow","name":"Allow once","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}]`,
			wantChunk: "permission: selected reject",
			wantStop:  "end_turn",
		},
		{
			name:      "cancelled outcome",
			script:    "permission call_1 allow_always,reject_always=no\nsay never",
			answer:    `{"outcome":{"outcome":"cancelled"}}`,
			wantOpts:  `[{"optionId":"allow_always","name":"Always allow","kind":"allow_always"},{"optionId":"no","name":"Always reject","kind":"reject_always"}]`,
			wantChunk: "permission: cancelled",
			wantStop:  "cancelled",
		},
		{
			name:      "session cancel while waiting",
			script:    "permission call_1\nsay never",
			answer:    "",
			wantOpts:  `[{"optionId":"allow","name":"Allow once","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}]`,
			wantChunk: "permission: cancelled",
			wantStop:  "cancelled",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forEachMode(t, func(t *testing.T, start startFunc) {
				p := start(t, opts{})
				sid, _ := p.newSession()
				promptID := p.prompt(sid, tc.script)
				req := p.nextRequest("session/request_permission")

				var params struct {
					SessionID string         `json:"sessionId"`
					ToolCall  map[string]any `json:"toolCall"`
					Options   []any          `json:"options"`
				}
				if err := json.Unmarshal(req.Params, &params); err != nil {
					t.Fatal(err)
				}
				if params.SessionID != sid {
					t.Errorf("permission sessionId = %q, want %q", params.SessionID, sid)
				}
				call := params.ToolCall
				if call["toolCallId"] == nil || call["status"] != "pending" || call["title"] == nil || call["content"] == nil {
					t.Errorf("permission toolCall = %v, want toolCallId, title, status pending and content", call)
				}
				if _, ok := call["sessionUpdate"]; ok {
					t.Errorf("permission toolCall carries sessionUpdate: %v", call)
				}
				var wantOpts []any
				if err := json.Unmarshal([]byte(tc.wantOpts), &wantOpts); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(wantOpts, params.Options); diff != "" {
					t.Errorf("permission options mismatch (-want +got):\n%s", diff)
				}

				if tc.answer == "" {
					// What a client does on cancel: session/cancel, then answer
					// the pending request with "cancelled".
					p.notify("session/cancel", map[string]any{"sessionId": sid})
					p.sendRaw(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"outcome":{"outcome":"cancelled"}}}`)
				} else {
					p.sendRaw(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + tc.answer + `}`)
				}
				ups, resp := p.until(promptID)
				stop := result[struct{ StopReason string }](t, resp).StopReason
				if stop != tc.wantStop {
					t.Errorf("stopReason = %q, want %q", stop, tc.wantStop)
				}
				text := agentText(ups)
				if !strings.HasPrefix(text, tc.wantChunk) {
					t.Errorf("agent text after permission = %q, want prefix %q", text, tc.wantChunk)
				}
				if wantAfter := tc.wantStop == "end_turn"; strings.Contains(text, "after") != wantAfter {
					t.Errorf("agent text = %q; script continued = %v, want %v", text, !wantAfter, wantAfter)
				}
				// The session is usable again; a late answer did no harm.
				if _, stop := p.turn(sid, "say again"); stop != "end_turn" {
					t.Errorf("next turn stopReason = %q, want end_turn", stop)
				}
			})
		})
	}
}

// nextRequest skips session/update notifications up to the next request of
// method.
func (p *proc) nextRequest(method string) message {
	p.t.Helper()
	for {
		m := p.next()
		switch {
		case m.Method == method && m.ID != nil:
			return m
		case m.Method != "session/update":
			p.t.Fatalf("got %+v while waiting for a %s request", m, method)
		}
	}
}

// nextUpdate returns the next message, which must be a session/update.
func (p *proc) nextUpdate() update {
	p.t.Helper()
	m := p.next()
	if m.Method != "session/update" {
		p.t.Fatalf("got %+v, want a session/update", m)
	}
	return decodeUpdate(p.t, m)
}

func TestCancelDuringSleep(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		id := p.prompt(sid, "say before\nsleep 1h\nsay never")
		if u := p.nextUpdate(); u.text() != "before" {
			t.Fatalf("first update = %v, want the chunk \"before\"", u)
		}
		p.notify("session/cancel", map[string]any{"sessionId": sid})
		ups, resp := p.until(id)
		if len(ups) != 0 {
			t.Errorf("updates after cancel = %v, want none", ups)
		}
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "cancelled" {
			t.Errorf("stopReason = %q, want cancelled", stop)
		}
	})
}

func TestCancelRequestDuringSleep(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		id := p.prompt(sid, "say before\nsleep 1h")
		p.nextUpdate()
		p.notify("$/cancel_request", map[string]any{"requestId": id})
		_, resp := p.until(id)
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "cancelled" {
			t.Errorf("stopReason = %q, want cancelled", stop)
		}
	})
}

func TestCancelDuringPause(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		dir := t.TempDir()
		p := start(t, opts{args: []string{"--control-dir", dir}})
		sid, _ := p.newSession()
		id := p.prompt(sid, "pause p1\nsay never")
		if err := testagent.WaitPaused(waitCtx(t), dir, "p1"); err != nil {
			t.Fatal(err)
		}
		p.notify("session/cancel", map[string]any{"sessionId": sid})
		ups, resp := p.until(id)
		if len(ups) != 0 {
			t.Errorf("updates after cancel = %v, want none", ups)
		}
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "cancelled" {
			t.Errorf("stopReason = %q, want cancelled", stop)
		}
		if _, err := os.Stat(testagent.PausedFile(dir, "p1")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("paused file after cancel: stat err = %v, want not exist", err)
		}
	})
}

func TestPauseRelease(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		dir := t.TempDir()
		// The control dir comes from the environment here, the flag elsewhere.
		p := start(t, opts{env: map[string]string{testagent.EnvControlDir: dir}})
		sid, _ := p.newSession()
		for turn := range 2 { // the same name twice: Release leaves nothing behind
			id := p.prompt(sid, "say a\npause gate\nsay b")
			if u := p.nextUpdate(); u.text() != "a" {
				t.Fatalf("turn %d: first update = %v, want chunk \"a\"", turn, u)
			}
			if err := testagent.WaitPaused(waitCtx(t), dir, "gate"); err != nil {
				t.Fatal(err)
			}
			p.idle() // paused: nothing more may have been written
			if err := testagent.Release(waitCtx(t), dir, "gate"); err != nil {
				t.Fatal(err)
			}
			ups, resp := p.until(id)
			if got := agentText(ups); got != "b" {
				t.Errorf("turn %d: text after release = %q, want \"b\"", turn, got)
			}
			if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "end_turn" {
				t.Errorf("turn %d: stopReason = %q, want end_turn", turn, stop)
			}
			for _, f := range []string{testagent.PausedFile(dir, "gate"), testagent.ReleaseFile(dir, "gate")} {
				if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("turn %d: %s after release: stat err = %v, want not exist", turn, f, err)
				}
			}
		}
	})
}

func TestPauseWithoutControlDir(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		ups, stop := p.turn(sid, "pause p1\nsay after")
		if stop != "end_turn" || agentText(ups) != "after" {
			t.Errorf("turn = %q, %q; want \"after\", end_turn", agentText(ups), stop)
		}
		testutil.Eventually(t, "pause error on stderr", func() bool { return strings.Contains(p.stderr.String(), "pause p1 ignored") })
	})
}

func TestCancelWithoutTurnIsForgotten(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		p.notify("session/cancel", map[string]any{"sessionId": sid})
		if ups, stop := p.turn(sid, "say hi"); stop != "end_turn" || agentText(ups) != "hi" {
			t.Errorf("turn after idle cancel = %q, %q; want \"hi\", end_turn", agentText(ups), stop)
		}
	})
}

func TestOnePromptPerSession(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		dir := t.TempDir()
		p := start(t, opts{args: []string{"-control-dir=" + dir}})
		sid, _ := p.newSession()
		other := result[map[string]any](t, p.call("session/new", map[string]any{"cwd": "/tmp", "mcpServers": []any{}}))["sessionId"].(string)

		first := p.prompt(sid, "pause busy\nsay first")
		if err := testagent.WaitPaused(waitCtx(t), dir, "busy"); err != nil {
			t.Fatal(err)
		}
		wantError(t, p.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "say second"}}}), -32603)
		// Another session is not blocked by the paused one.
		if ups, stop := p.turn(other, "say other"); stop != "end_turn" || agentText(ups) != "other" {
			t.Errorf("other session turn = %q, %q; want \"other\", end_turn", agentText(ups), stop)
		}
		if err := testagent.Release(waitCtx(t), dir, "busy"); err != nil {
			t.Fatal(err)
		}
		ups, resp := p.until(first)
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "end_turn" || agentText(ups) != "first" {
			t.Errorf("first turn = %q, %q; want \"first\", end_turn", agentText(ups), stop)
		}
	})
}

func TestCrash(t *testing.T) {
	for _, tc := range []struct {
		script string
		code   int
	}{
		{"say bye\ncrash 7\nsay never", 7},
		{"crash", 1},
	} {
		t.Run(tc.script, func(t *testing.T) {
			forEachMode(t, func(t *testing.T, start startFunc) {
				p := start(t, opts{})
				sid, _ := p.newSession()
				p.prompt(sid, tc.script)
				if strings.HasPrefix(tc.script, "say") {
					if u := p.nextUpdate(); u.text() != "bye" {
						t.Errorf("update = %v, want chunk \"bye\"", u)
					}
				}
				p.expectEOF() // no prompt response
				if code := p.waitExit(); code != tc.code {
					t.Errorf("exit code = %d, want %d", code, tc.code)
				}
			})
		})
	}
}

func TestErrorAndStopCommands(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()

		ups, resp := p.until(p.prompt(sid, "say partial\nerror -32603 boom\nsay never"))
		wantError(t, resp, -32603)
		if resp.Error.Message != "boom" || agentText(ups) != "partial" {
			t.Errorf("error turn = %q, message %q; want \"partial\", \"boom\"", agentText(ups), resp.Error.Message)
		}
		_, resp = p.until(p.prompt(sid, "error 500 exception TypeError: fetch failed"))
		wantError(t, resp, 500)
		if resp.Error.Message != "exception TypeError: fetch failed" {
			t.Errorf("error message = %q", resp.Error.Message)
		}
		for _, reason := range []string{"max_tokens", "refusal", "max_turn_requests", "some_future_reason"} {
			if _, stop := p.turn(sid, "stop "+reason+"\nsay never"); stop != reason {
				t.Errorf("stop %s: stopReason = %q", reason, stop)
			}
		}
		// A script error is reported in the reply and runs nothing.
		ups, stop := p.turn(sid, "say a\nsleep soon")
		if want := "script error: line 2: sleep:"; stop != "end_turn" || !strings.HasPrefix(agentText(ups), want) {
			t.Errorf("bad script turn = %q, %q; want prefix %q, end_turn", agentText(ups), stop, want)
		}
	})
}

func TestRawOutputCommands(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		id := p.prompt(sid, strings.Join([]string{
			"garbage",
			`update {"sessionUpdate":"future_variant","x":[1,2],"_meta":{"vendor/k":"v"}}`,
			`notify _vendor/ping {"n":1}`,
			"stderr hello-stderr",
			"big 100000",
			"usage 15 1000",
			"title My session",
			"mode plan",
		}, "\n"))
		if line := string(p.nextLine()); line != "this is not json" {
			t.Errorf("garbage line = %q", line)
		}
		if diff := cmp.Diff(jsonMap(t, `{"sessionUpdate":"future_variant","x":[1,2],"_meta":{"vendor/k":"v"}}`), map[string]any(p.nextUpdate())); diff != "" {
			t.Errorf("raw update mismatch (-want +got):\n%s", diff)
		}
		if m := p.next(); m.Method != "_vendor/ping" || string(m.Params) != `{"n":1}` || m.ID != nil {
			t.Errorf("notify = %+v, want _vendor/ping {\"n\":1}", m)
		}
		ups, resp := p.until(id)
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "end_turn" {
			t.Errorf("stopReason = %q", stop)
		}
		if len(ups) != 4 {
			t.Fatalf("got %d updates, want big chunk, usage, title, mode: %v", len(ups), ups)
		}
		if n := len(ups[0].text()); n != 100000 {
			t.Errorf("big chunk is %d bytes, want 100000", n)
		}
		for i, want := range []string{
			`{"sessionUpdate":"usage_update","used":15,"size":1000}`,
			`{"sessionUpdate":"session_info_update","title":"My session"}`,
			`{"sessionUpdate":"current_mode_update","currentModeId":"plan"}`,
		} {
			if diff := cmp.Diff(jsonMap(t, want), map[string]any(ups[i+1])); diff != "" {
				t.Errorf("update %d mismatch (-want +got):\n%s", i+1, diff)
			}
		}
		testutil.Eventually(t, "stderr line", func() bool { return strings.Contains(p.stderr.String(), "hello-stderr\n") })
	})
}

func TestFlood(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		ups, stop := p.turn(sid, "flood 50 100")
		if stop != "end_turn" {
			t.Errorf("stopReason = %q, want end_turn", stop)
		}
		if len(ups) != 50 {
			t.Fatalf("flood 50 sent %d updates", len(ups))
		}
		for i, u := range ups {
			if u["sessionUpdate"] != "x_flood" || u["n"] != float64(i+1) || len(u["data"].(string)) != 100 {
				t.Errorf("update %d = %v, want x_flood number %d with 100 bytes", i, u, i+1)
			}
		}
	})
}

// TestStream checks the paced stream: count chunks of size bytes, stamped,
// none written before its time on the schedule.
func TestStream(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		const count, interval = 5, 10 * time.Millisecond // rate 100/s
		ups, stop := p.turn(sid, "stream 5 100 8")
		if stop != "end_turn" {
			t.Errorf("stopReason = %q, want end_turn", stop)
		}
		if len(ups) != count {
			t.Fatalf("stream sent %d updates, want %d", len(ups), count)
		}
		var first, last float64
		for i, u := range ups {
			content, _ := u["content"].(map[string]any)
			if u["sessionUpdate"] != "agent_message_chunk" || content["text"] != "abcdefgh" || u["messageId"] != ups[0]["messageId"] {
				t.Errorf("update %d = %v, want a chunk of 8 bytes of the one message", i, u)
			}
			meta, _ := u["_meta"].(map[string]any)
			skein, _ := meta["skein"].(map[string]any)
			at, ok := skein["sentAt"].(float64)
			if !ok || at < last {
				t.Errorf("update %d: _meta %v, want an increasing skein.sentAt", i, u["_meta"])
			}
			if i == 0 {
				first = at
			}
			last = at
		}
		// Chunk i is written no earlier than start + i·interval, and the
		// first one right after start.
		if span := time.Duration(last - first); span < (count-2)*interval {
			t.Errorf("%d chunks at 100/s took %v, want at least %v", count, span, (count-2)*interval)
		}
	})
}

func TestStamp(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		ups, stop := p.turn(sid, "stamp 3 chunk\nstamp 2 update 1ms\nstampend")
		if stop != "end_turn" {
			t.Errorf("stopReason = %q, want end_turn", stop)
		}
		if len(ups) != 5 {
			t.Fatalf("stamp sent %d updates, want 5", len(ups))
		}
		var last float64
		for i, u := range ups {
			meta, _ := u["_meta"].(map[string]any)
			skein, _ := meta["skein"].(map[string]any)
			at, ok := skein["sentAt"].(float64)
			if !ok || at < last {
				t.Errorf("update %d: _meta %v, want an increasing skein.sentAt", i, u["_meta"])
			}
			last = at
		}
		if ups[0]["sessionUpdate"] != "agent_message_chunk" || ups[4]["sessionUpdate"] != "x_stamp" {
			t.Errorf("kinds = %v … %v", ups[0]["sessionUpdate"], ups[4]["sessionUpdate"])
		}
	})
}

func TestTick(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		ups, stop := p.turn(sid, "tick 4 1ms")
		if stop != "end_turn" {
			t.Errorf("stopReason = %q, want end_turn", stop)
		}
		var text strings.Builder
		for i, u := range ups {
			content, _ := u["content"].(map[string]any)
			s, _ := content["text"].(string)
			if u["sessionUpdate"] != "agent_message_chunk" || u["messageId"] != ups[0]["messageId"] {
				t.Errorf("update %d = %v, want a chunk of the one message", i, u)
			}
			text.WriteString(s)
		}
		if got, want := text.String(), "1 2 3 4 "; got != want {
			t.Errorf("tick 4 wrote %q, want %q", got, want)
		}
	})
}

// TestReportsAreLinesOfTheirOwn: the agent's report of an answer is a line
// of its own, so the text on either side does not run into it.
func TestReportsAreLinesOfTheirOwn(t *testing.T) {
	tests := []struct {
		name, script, answer, want string
	}{
		{
			name:   "permission then say",
			script: "permission call_1 allow_once=yes,reject_once=no\nsay done",
			answer: `{"outcome":{"outcome":"selected","optionId":"yes"}}`,
			want:   "permission: selected yes\ndone",
		},
		{
			name:   "text on both sides",
			script: "say before\npermission call_1 allow_once=yes,reject_once=no\nsay after",
			answer: `{"outcome":{"outcome":"selected","optionId":"no"}}`,
			want:   "before\npermission: selected no\nafter",
		},
		{
			name:   "a line already ended",
			script: "say \"before\\n\"\npermission call_1\nsay after",
			answer: `{"outcome":{"outcome":"selected","optionId":"allow"}}`,
			want:   "before\npermission: selected allow\nafter",
		},
		{
			name:   "input then say",
			script: "say before\nelicit {\"type\":\"object\"}\nsay after",
			answer: `{"action":"decline"}`,
			want:   "before\ninput: decline\nafter",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forEachMode(t, func(t *testing.T, start startFunc) {
				p := start(t, opts{})
				sid, _ := p.newSession()
				promptID := p.prompt(sid, tc.script)
				var ups []update // what came before the request
				req := p.next()
				for ; req.Method == "session/update"; req = p.next() {
					ups = append(ups, decodeUpdate(t, req))
				}
				p.sendRaw(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + tc.answer + `}`)
				rest, _ := p.until(promptID)
				ups = append(ups, rest...)
				if got := agentText(ups); got != tc.want {
					t.Errorf("agent text = %q, want %q", got, tc.want)
				}
			})
		})
	}
}

// "later": the prompt is answered end_turn first; the commands after it
// then run outside any turn, a permission request among them, while the
// session takes its next prompt; the answer is reported as an update.
func TestLater(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{})
		sid, _ := p.newSession()
		ups, resp := p.until(p.prompt(sid, "say in turn\nlater\nsay after turn\npermission late_1 allow_once=yes,reject_once=no\nsay done"))
		if stop := result[struct{ StopReason string }](t, resp).StopReason; stop != "end_turn" {
			t.Errorf("stopReason = %q, want end_turn", stop)
		}
		if text := agentText(ups); text != "in turn" {
			t.Errorf("turn text = %q, want only what came before later", text)
		}
		var late []update
		req := func() message {
			for {
				m := p.next()
				if m.Method == "session/update" {
					late = append(late, decodeUpdate(t, m))
					continue
				}
				if m.Method != "session/request_permission" {
					t.Fatalf("unexpected message after the turn: %+v", m)
				}
				return m
			}
		}()
		// A session with a late request pending takes its next prompt.
		if _, stop := p.turn(sid, "say next"); stop != "end_turn" {
			t.Errorf("next turn stopReason = %q, want end_turn", stop)
		}
		p.sendRaw(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"outcome":{"outcome":"selected","optionId":"yes"}}}`)
		for !strings.Contains(agentText(late), "done") {
			m := p.next()
			if m.Method != "session/update" {
				t.Fatalf("unexpected message after the answer: %+v", m)
			}
			late = append(late, decodeUpdate(t, m))
		}
		if text, want := agentText(late), "after turn\npermission: selected yes\ndone"; text != want {
			t.Errorf("text after the turn = %q, want %q", text, want)
		}
	})
}
