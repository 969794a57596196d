package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestParseACPMessage: the envelope is read as the SDK's server reads it.
func TestParseACPMessage(t *testing.T) {
	tests := []struct {
		name                          string
		msg                           string
		request, response, initialize bool
		idKey, sessionID              string
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1"}}`, true, false, false, "n:1", "s1"},
		{"the same number spelt otherwise", `{"jsonrpc":"2.0","id":1.0e0,"method":"x"}`, true, false, false, "n:1", ""},
		{"string ID", `{"jsonrpc":"2.0","id":"1","method":"x"}`, true, false, false, "s:1", ""},
		{"notification", `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}`, false, false, false, "", "s1"},
		{"result", `{"jsonrpc":"2.0","id":7,"result":{"sessionId":"s9"}}`, false, true, false, "n:7", ""},
		{"error", `{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"no"}}`, false, true, false, "s:a", ""},
		{"result and error", `{"jsonrpc":"2.0","id":7,"result":{},"error":{}}`, false, false, false, "n:7", ""},
		{"a method that is no string", `{"jsonrpc":"2.0","id":7,"method":3,"result":{}}`, false, false, false, "n:7", ""},
		{"initialize", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`, true, false, true, "n:0", ""},
		{"no version", `{"id":1,"method":"initialize"}`, false, false, false, "n:1", ""},
		{"an object ID", `{"jsonrpc":"2.0","id":{},"method":"x"}`, false, false, false, "", ""},
		{"an infinite ID", `{"jsonrpc":"2.0","id":1e999,"method":"x"}`, false, false, false, "", ""},
		{"a name in another case", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"SessionId":"s1"}}`, true, false, false, "n:1", ""},
		{"a name twice: the last", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"sessionId":"s1","sessionId":"s2"}}`, true, false, false, "n:1", "s2"},
		{"a sessionId that is no string", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"sessionId":5}}`, true, false, false, "n:1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseACPMessage([]byte(tt.msg))
			if err != nil {
				t.Fatal(err)
			}
			if m.isRequest() != tt.request || m.isResponse() != tt.response || m.isInitialize() != tt.initialize ||
				m.idKey != tt.idKey || m.sessionID != tt.sessionID {
				t.Errorf("%s: request %v, response %v, initialize %v, ID %q, session %q; want %v %v %v %q %q", tt.msg,
					m.isRequest(), m.isResponse(), m.isInitialize(), m.idKey, m.sessionID,
					tt.request, tt.response, tt.initialize, tt.idKey, tt.sessionID)
			}
		})
	}
}

// TestACPFrame: a message with line breaks in its white space becomes one
// line that means the same.
func TestACPFrame(t *testing.T) {
	in := []byte("{\r\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"a\\nb\"\n}")
	out, err := acpFrame(in)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(out, "\r\n") || string(out) != `{"jsonrpc":"2.0","method":"a\nb"}` {
		t.Errorf("acpFrame = %q", out)
	}
	if out, _ := acpFrame([]byte(`{"a":1}`)); string(out) != `{"a":1}` {
		t.Errorf("acpFrame of one line = %q, want it unchanged", out)
	}
}

// FuzzACPMessage: whatever a client sends, reading it does not panic, an
// object that is valid JSON always reads, and its frame is one line of
// the same JSON.
func FuzzACPMessage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1"}}`,
		`{"jsonrpc":"2.0","id":"x","result":{"sessionId":"s"}}`,
		`[{"jsonrpc":"2.0"}]`, `{"jsonrpc":`, `42`, "{\n\"a\":\r\n1}", `{"id":1e999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		shape := shapeOf(b)
		m, err := parseACPMessage(b)
		if shape != acpObject {
			return
		}
		if err != nil {
			t.Fatalf("a JSON object %q does not read: %v", b, err)
		}
		_ = m.isRequest() || m.isResponse() || m.isInitialize()
		frame, err := acpFrame(b)
		if err != nil {
			t.Fatalf("acpFrame(%q): %v", b, err)
		}
		if bytes.ContainsAny(frame, "\r\n") || !json.Valid(frame) {
			t.Fatalf("acpFrame(%q) = %q, want one line of JSON", b, frame)
		}
	})
}
