package acpwire_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"skein.dev/pkg/acp/acpwire"
)

// raw is shorthand for a json.RawMessage in tables.
func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		line string
		want *acpwire.Message // Raw is filled in from line
		kind acpwire.Kind
	}{
		{
			name: "request",
			line: `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`,
			want: &acpwire.Message{ID: raw(`0`), Method: "initialize", Params: raw(`{"protocolVersion":1}`)},
			kind: acpwire.KindRequest,
		},
		{
			name: "request with a string id and members in any order",
			line: `{"params":{"sessionId":"s"},"method":"session/request_permission","jsonrpc":"2.0","id":"582aff9a-9eef"}`,
			want: &acpwire.Message{ID: raw(`"582aff9a-9eef"`), Method: "session/request_permission", Params: raw(`{"sessionId":"s"}`)},
			kind: acpwire.KindRequest,
		},
		{
			name: "request without params",
			line: `{"jsonrpc":"2.0","id":3,"method":"logout"}`,
			want: &acpwire.Message{ID: raw(`3`), Method: "logout"},
			kind: acpwire.KindRequest,
		},
		{
			name: "request with a null id",
			line: `{"jsonrpc":"2.0","id":null,"method":"x","params":[]}`,
			want: &acpwire.Message{ID: raw(`null`), Method: "x", Params: raw(`[]`)},
			kind: acpwire.KindRequest,
		},
		{
			name: "notification with unknown members and whitespace",
			line: " { \"jsonrpc\" : \"2.0\" , \"method\" : \"session/update\" , \"params\" : { \"a\" : [1, 2] } , \"x-extra\" : {\"id\": 9} } ",
			want: &acpwire.Message{Method: "session/update", Params: raw(`{ "a" : [1, 2] }`)},
			kind: acpwire.KindNotification,
		},
		{
			name: "escaped member names and method",
			line: `{"jsonrpc":"2\u002e0","\u006dethod":"session\/cancel","params":{}}`,
			want: &acpwire.Message{Method: "session/cancel", Params: raw(`{}`)},
			kind: acpwire.KindNotification,
		},
		{
			name: "result after id (codex)",
			line: `{"jsonrpc":"2.0","result":{"stopReason":"cancelled"},"id":3}`,
			want: &acpwire.Message{ID: raw(`3`), Result: raw(`{"stopReason":"cancelled"}`)},
			kind: acpwire.KindResponse,
		},
		{
			name: "null result (session/load)",
			line: `{"jsonrpc":"2.0","id":2,"result":null}`,
			want: &acpwire.Message{ID: raw(`2`), Result: raw(`null`)},
			kind: acpwire.KindResponse,
		},
		{
			name: "error with data",
			line: `{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"Invalid params","data":{"mcpServers":{"_errors":["x"]}}}}`,
			want: &acpwire.Message{ID: raw(`5`), Error: &acpwire.RPCError{Code: -32602, Message: "Invalid params", Data: raw(`{"mcpServers":{"_errors":["x"]}}`)}},
			kind: acpwire.KindResponse,
		},
		{
			name: "parse error answer with a null id",
			line: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`,
			want: &acpwire.Message{ID: raw(`null`), Error: &acpwire.RPCError{Code: -32700, Message: "Parse error"}},
			kind: acpwire.KindResponse,
		},
		{
			name: "non-standard error code (gemini)",
			line: `{"jsonrpc":"2.0","id":2,"error":{"code":500,"message":"exception TypeError: fetch failed sending request"}}`,
			want: &acpwire.Message{ID: raw(`2`), Error: &acpwire.RPCError{Code: 500, Message: "exception TypeError: fetch failed sending request"}},
			kind: acpwire.KindResponse,
		},
		{
			name: "duplicate unknown member is kept",
			line: `{"jsonrpc":"2.0","method":"m","_x":1,"_x":2}`,
			want: &acpwire.Message{Method: "m"},
			kind: acpwire.KindNotification,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := acpwire.Parse([]byte(tt.line))
			if err != nil {
				t.Fatalf("Parse(%s) = %v, want a message", tt.line, err)
			}
			tt.want.Raw = []byte(tt.line)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%s) (-want +got):\n%s", tt.line, diff)
			}
			if got.Kind() != tt.kind {
				t.Errorf("Parse(%s).Kind() = %v, want %v", tt.line, got.Kind(), tt.kind)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for name, line := range map[string]string{
		"empty":                      ``,
		"not JSON":                   `this is not json`,
		"cut short":                  `{"jsonrpc":"2.0","method":"session/upd`,
		"two values":                 `{"jsonrpc":"2.0","method":"a"} {"jsonrpc":"2.0","method":"b"}`,
		"batch":                      `[{"jsonrpc":"2.0","method":"a"}]`,
		"string":                     `"2.0"`,
		"null":                       `null`,
		"no jsonrpc":                 `{"id":1,"method":"a"}`,
		"jsonrpc 1.0":                `{"jsonrpc":"1.0","id":1,"method":"a"}`,
		"jsonrpc number":             `{"jsonrpc":2.0,"id":1,"method":"a"}`,
		"jsonrpc wrong case key":     `{"JSONRPC":"2.0","id":1,"method":"a"}`,
		"method wrong case key":      `{"jsonrpc":"2.0","Method":"a"}`,
		"duplicate id":               `{"jsonrpc":"2.0","id":1,"id":2,"result":{}}`,
		"duplicate escaped method":   `{"jsonrpc":"2.0","method":"a","\u006dethod":"b"}`,
		"method not a string":        `{"jsonrpc":"2.0","method":1}`,
		"empty method":               `{"jsonrpc":"2.0","method":""}`,
		"id object":                  `{"jsonrpc":"2.0","id":{},"method":"a"}`,
		"id bool":                    `{"jsonrpc":"2.0","id":true,"result":{}}`,
		"params string":              `{"jsonrpc":"2.0","method":"a","params":"x"}`,
		"method and result":          `{"jsonrpc":"2.0","id":1,"method":"a","result":{}}`,
		"method and error":           `{"jsonrpc":"2.0","method":"a","error":{"code":1,"message":""}}`,
		"params without method":      `{"jsonrpc":"2.0","id":1,"params":{},"result":{}}`,
		"neither method nor id":      `{"jsonrpc":"2.0","result":{}}`,
		"result and error":           `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`,
		"result and null error":      `{"jsonrpc":"2.0","id":1,"result":{},"error":null}`,
		"neither result nor error":   `{"jsonrpc":"2.0","id":1}`,
		"error not an object":        `{"jsonrpc":"2.0","id":1,"error":"boom"}`,
		"error without code":         `{"jsonrpc":"2.0","id":1,"error":{"message":"x"}}`,
		"error code fraction":        `{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"x"}}`,
		"error code string":          `{"jsonrpc":"2.0","id":1,"error":{"code":"-32601","message":"x"}}`,
		"error code huge":            `{"jsonrpc":"2.0","id":1,"error":{"code":1e300,"message":"x"}}`,
		"error without message":      `{"jsonrpc":"2.0","id":1,"error":{"code":-32603}}`,
		"error message not a string": `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":null}}`,
	} {
		t.Run(name, func(t *testing.T) {
			m, err := acpwire.Parse([]byte(line))
			if !isKind(err, acpwire.ErrProtocol) {
				t.Errorf("Parse(%s) = %+v, %v, want a %s error", line, m, err, acpwire.ErrProtocol)
			}
		})
	}
}

// TestParseAliasing checks that raw fields point into the line and cannot
// be used to overwrite it.
func TestParseAliasing(t *testing.T) {
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1},"z":0}`)
	m, err := acpwire.Parse(line)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(m.Params, "XXXXXXXX"...)
	_ = append(m.ID, "XXXXXXXX"...)
	if want := `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1},"z":0}`; string(m.Raw) != want {
		t.Errorf("after appending to Params and ID, Raw = %s, want %s", m.Raw, want)
	}
	if &m.Raw[0] != &line[0] {
		t.Errorf("Parse copied the line; want Raw to be the line itself")
	}
	if i := bytes.Index(line, m.Params); i < 0 || &line[i] != &m.Params[0] {
		t.Errorf("Params is not a sub-slice of the line")
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[acpwire.Kind]string{
		acpwire.KindInvalid: "invalid", acpwire.KindRequest: "request",
		acpwire.KindNotification: "notification", acpwire.KindResponse: "response",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
	if got := (&acpwire.Message{}).Kind(); got != acpwire.KindInvalid {
		t.Errorf("zero Message Kind() = %v, want invalid", got)
	}
}
