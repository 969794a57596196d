package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"skein.dev/internal/sse"
)

func TestPrinter(t *testing.T) {
	tests := []struct {
		name   string
		events []string
		want   string
	}{
		{
			name: "deltas then the durable message print once",
			events: []string{
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"Hel"}}`,
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"lo"}}`,
				`{"durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":"Hello"}}`,
			},
			want: "Hello\n",
		},
		{
			name: "missed deltas are completed from the durable message",
			events: []string{
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"Hel"}}`,
				`{"durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":"Hello!"}}`,
			},
			want: "Hello!\n",
		},
		{
			name: "a message whose middle delta was lost prints again, whole",
			events: []string{
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"1 "}}`,
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"3 "}}`,
				`{"durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":"1 2 3 4"}}`,
			},
			want: "1 3 \n" + missedNote + "\n1 2 3 4\n",
		},
		{
			name: "the parts of a message split to fit the log print once",
			events: []string{
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"Hello, "}}`,
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"world"}}`,
				`{"durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":"Hello"}}`,
				`{"durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":", world!"}}`,
			},
			want: "Hello, world!\n",
		},
		{
			name: "a durable message without deltas prints whole",
			events: []string{
				`{"durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":"Hi."}}`,
				`{"durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":" Bye."}}`,
			},
			want: "Hi. Bye.\n",
		},
		{
			name: "tool calls and plans get lines of their own",
			events: []string{
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"Let me look"}}`,
				`{"durability":"durable","type":"tool_call","toolCallId":"c1","title":"Read a.go","status":"pending"}`,
				`{"durability":"durable","type":"tool_call_update","toolCallId":"c1","content":[]}`,
				`{"durability":"durable","type":"tool_call_update","toolCallId":"c1","status":"failed"}`,
				`{"durability":"durable","type":"tool_call","toolCallId":"c2"}`,
				`{"durability":"durable","type":"plan","entries":[{"content":"a","status":"completed"},{"content":"b","status":"in_progress"},{"content":"c","status":"pending"}]}`,
			},
			want: "Let me look\n[tool] Read a.go: pending\n[tool] Read a.go: failed\n[tool] c2: pending\n[plan]\n  [x] a\n  [~] b\n  [ ] c\n",
		},
		{
			name: "permissions",
			events: []string{
				`{"durability":"durable","type":"permission_request","requestId":"r1","toolCall":{"title":"rm -rf build"},"options":[{"optionId":"a","name":"Allow once","kind":"allow_once"},{"optionId":"r","name":"Reject","kind":"reject_once"}]}`,
				`{"durability":"durable","type":"permission_response","requestId":"r1","status":"accepted","outcome":{"outcome":"selected","optionId":"r"}}`,
				`{"durability":"durable","type":"permission_request","requestId":"r2","toolCall":{},"options":[{"optionId":"x"}]}`,
				`{"durability":"durable","type":"permission_response","requestId":"r2","status":"terminal","reason":"prompt_cancelled","outcome":{"outcome":"cancelled"}}`,
			},
			want: "[permission] rm -rf build (request r1)\n  1. a: Allow once (allow_once)\n  2. r: Reject (reject_once)\n  answer: skein respond r1 <optionId>\n" +
				"[permission] request r1: accepted (r)\n" +
				"[permission] r2 (request r2)\n  1. x: x (?)\n  answer: skein respond r2 <optionId>\n" +
				"[permission] request r2: terminal (prompt_cancelled)\n",
		},
		{
			name: "an update may use the permission fields' names for its own",
			events: []string{
				`{"durability":"durable","type":"tool_call","toolCallId":"c9","title":"Odd","status":"pending","options":"x","outcome":5,"reason":{}}`,
			},
			want: "[tool] Odd: pending\n",
		},
		{
			name: "the prompt, thoughts and other updates are not the reply",
			events: []string{
				`{"durability":"durable","type":"user_message_chunk","content":{"type":"text","text":"hi"}}`,
				`{"durability":"ephemeral","type":"agent_thought_chunk","content":{"type":"text","text":"hmm"}}`,
				`{"durability":"durable","type":"available_commands_update","availableCommands":[]}`,
				`{"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"image","data":"AA=="}}`,
			},
			want: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			p := newPrinter(&out)
			for _, raw := range tt.events {
				var e event
				if err := json.Unmarshal([]byte(raw), &e); err != nil {
					t.Fatalf("event %s: %v", raw, err)
				}
				p.render(&e)
			}
			if err := p.finish(); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tt.want {
				t.Errorf("printed %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOneLine(t *testing.T) {
	tests := []struct{ raw, want string }{
		{`{"sequence":3,"timestamp":"T","type":"agent_message_chunk","content":{"type":"text","text":"a\nb"}}`, `3 T agent_message_chunk "a\nb"`},
		{`{"sequence":4,"timestamp":"T","type":"user_message_chunk","content":{"type":"image"}}`, `4 T user_message_chunk <image>`},
		{`{"sequence":5,"timestamp":"T","type":"tool_call","toolCallId":"c1","title":"Run","status":"in_progress"}`, `5 T tool_call c1 "Run" in_progress`},
		{`{"sequence":6,"timestamp":"T","type":"tool_call_update","toolCallId":"c1"}`, `6 T tool_call_update c1`},
		{`{"sequence":7,"timestamp":"T","type":"plan","entries":[{"content":"x","status":"completed"}]}`, `7 T plan [x] "x"`},
		{`{"sequence":8,"timestamp":"T","type":"permission_request","requestId":"r1","toolCall":{"title":"rm"}}`, `8 T permission_request r1 "rm"`},
		{`{"sequence":9,"timestamp":"T","type":"current_mode_update","currentModeId":"ask"}`, `9 T current_mode_update`},
	}
	for _, tt := range tests {
		var e event
		if err := json.Unmarshal([]byte(tt.raw), &e); err != nil {
			t.Fatal(err)
		}
		if got := oneLine(&e); got != tt.want {
			t.Errorf("oneLine(%s) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

// FuzzEventStream: the SSE reader never panics on what a server sends, and
// no field it returns spans a line end. (Lone CR line ends, which the
// gateway never writes, are not supported: they stay in the value.)
func FuzzEventStream(f *testing.F) {
	for _, seed := range []string{
		"id: 1\nevent: durable\ndata: {}\n\n",
		": keepalive\n\nevent: ephemeral\ndata: a\ndata: b\n\n",
		"data: x\r\n\r\n",
		"event: error\ndata: {\"error\":{\"code\":\"unavailable\"}}\n\n",
		"data",
		"\n\n\n",
		"data: x\r\r\n\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &eventStream{body: io.NopCloser(nil), Reader: sse.NewReader(bytes.NewReader(in))}
		for range 1000 {
			ev, err := s.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "read event stream") {
					t.Fatalf("Next() = %v", err)
				}
				return
			}
			if strings.Contains(ev.ID+ev.Name, "\n") {
				t.Fatalf("Next() id %q event %q span lines", ev.ID, ev.Name)
			}
			if ev.Name == "error" {
				_ = streamError(ev) // must not panic
			}
		}
	})
}
