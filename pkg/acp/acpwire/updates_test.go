package acpwire_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"skein.dev/pkg/acp"
	"skein.dev/pkg/acp/acpwire"
)

func TestParseSessionUpdate(t *testing.T) {
	msgID := "msg_mock_1"
	tests := []struct {
		name   string
		params string
		want   *acpwire.SessionUpdate
	}{
		{
			name:   "chunk with messageId",
			params: `{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hello "},"messageId":"msg_mock_1"}}`,
			want: &acpwire.SessionUpdate{SessionID: "s1", Kind: acp.UpdateAgentMessageChunk, MessageID: &msgID,
				Update: raw(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hello "},"messageId":"msg_mock_1"}`)},
		},
		{
			name:   "unknown variant and fields pass through (run-gosdk-probe.log)",
			params: `{"sessionId":"s1","update":{"sessionUpdate":"totally_unknown_variant","foo":1},"futureParamsField":true}`,
			want:   &acpwire.SessionUpdate{SessionID: "s1", Kind: "totally_unknown_variant", Update: raw(`{"sessionUpdate":"totally_unknown_variant","foo":1}`)},
		},
		{
			name:   "null messageId",
			params: `{"update":{"messageId":null,"sessionUpdate":"user_message_chunk","content":{"type":"future_block","data":1}},"sessionId":"s2"}`,
			want: &acpwire.SessionUpdate{SessionID: "s2", Kind: acp.UpdateUserMessageChunk,
				Update: raw(`{"messageId":null,"sessionUpdate":"user_message_chunk","content":{"type":"future_block","data":1}}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := acpwire.ParseSessionUpdate(raw(tt.params))
			if err != nil {
				t.Fatalf("ParseSessionUpdate(%s) = %v", tt.params, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseSessionUpdate(%s) (-want +got):\n%s", tt.params, diff)
			}
			// The same params in a parsed line: read without validating
			// them again, with the same result.
			m, err := acpwire.Parse([]byte(`{"jsonrpc":"2.0","method":"session/update","params":` + tt.params + `}`))
			if err != nil {
				t.Fatal(err)
			}
			got, err = m.SessionUpdate()
			if err != nil {
				t.Fatalf("Message.SessionUpdate() of params %s = %v", tt.params, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Message.SessionUpdate() of params %s (-want +got):\n%s", tt.params, diff)
			}
		})
	}
}

func TestParseSessionUpdateRejects(t *testing.T) {
	for name, params := range map[string]string{
		"not JSON":             `{"sessionId":`,
		"array":                `[]`,
		"no sessionId":         `{"update":{"sessionUpdate":"plan"}}`,
		"sessionId number":     `{"sessionId":1,"update":{"sessionUpdate":"plan"}}`,
		"no update":            `{"sessionId":"s"}`,
		"update string":        `{"sessionId":"s","update":"plan"}`,
		"no sessionUpdate":     `{"sessionId":"s","update":{"content":{}}}`,
		"sessionUpdate null":   `{"sessionId":"s","update":{"sessionUpdate":null}}`,
		"messageId number":     `{"sessionId":"s","update":{"sessionUpdate":"plan","messageId":7}}`,
		"duplicate sessionId":  `{"sessionId":"a","sessionId":"b","update":{"sessionUpdate":"plan"}}`,
		"SessionId wrong case": `{"SessionId":"a","update":{"sessionUpdate":"plan"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := acpwire.ParseSessionUpdate(raw(params))
			if !isKind(err, acpwire.ErrProtocol) {
				t.Errorf("ParseSessionUpdate(%s) = %+v, %v, want a %s error", params, got, err, acpwire.ErrProtocol)
			}
			m, err := acpwire.Parse([]byte(`{"jsonrpc":"2.0","method":"session/update","params":` + params + `}`))
			if err != nil {
				return // params that are not JSON: Parse refuses the line
			}
			if got, err := m.SessionUpdate(); !isKind(err, acpwire.ErrProtocol) {
				t.Errorf("Message.SessionUpdate() of params %s = %+v, %v, want a %s error", params, got, err, acpwire.ErrProtocol)
			}
		})
	}
}

func TestParsePermissionRequest(t *testing.T) {
	// From run-codex-acp-mock-tool-reject.log, shortened.
	params := `{"sessionId":"01a2","toolCall":{"toolCallId":"call_mock1","kind":"execute","rawInput":{"command":["touch","x"]}},` +
		`"options":[{"optionId":"approved","name":"Yes, proceed","kind":"allow_once"},` +
		`{"optionId":"abort","name":"No, and tell Codex what to do differently","kind":"reject_once","_meta":{"k":1}},` +
		`{"kind":"future_kind","optionId":"later"}]}`
	want := &acpwire.PermissionRequest{
		SessionID: "01a2",
		ToolCall:  raw(`{"toolCallId":"call_mock1","kind":"execute","rawInput":{"command":["touch","x"]}}`),
		Options: []acp.PermissionOption{
			{OptionID: "approved", Name: "Yes, proceed", Kind: acp.PermissionAllowOnce,
				Raw: raw(`{"optionId":"approved","name":"Yes, proceed","kind":"allow_once"}`)},
			{OptionID: "abort", Name: "No, and tell Codex what to do differently", Kind: acp.PermissionRejectOnce,
				Raw: raw(`{"optionId":"abort","name":"No, and tell Codex what to do differently","kind":"reject_once","_meta":{"k":1}}`)},
			{OptionID: "later", Kind: "future_kind", Raw: raw(`{"kind":"future_kind","optionId":"later"}`)},
		},
		Raw: raw(params),
	}
	got, err := acpwire.ParsePermissionRequest(raw(params))
	if err != nil {
		t.Fatalf("ParsePermissionRequest = %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParsePermissionRequest (-want +got):\n%s", diff)
	}
}

func TestParsePermissionRequestRejects(t *testing.T) {
	const tc = `"toolCall":{"toolCallId":"t"}`
	for name, params := range map[string]string{
		"not JSON":            `{`,
		"no sessionId":        `{` + tc + `,"options":[]}`,
		"no toolCall":         `{"sessionId":"s","options":[]}`,
		"toolCall array":      `{"sessionId":"s","toolCall":[],"options":[]}`,
		"no options":          `{"sessionId":"s",` + tc + `}`,
		"options object":      `{"sessionId":"s",` + tc + `,"options":{}}`,
		"option string":       `{"sessionId":"s",` + tc + `,"options":["allow"]}`,
		"option without id":   `{"sessionId":"s",` + tc + `,"options":[{"name":"Yes","kind":"allow_once"}]}`,
		"option without kind": `{"sessionId":"s",` + tc + `,"options":[{"optionId":"a","name":"Yes"}]}`,
		"option name number":  `{"sessionId":"s",` + tc + `,"options":[{"optionId":"a","name":1,"kind":"allow_once"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := acpwire.ParsePermissionRequest(raw(params))
			if !isKind(err, acpwire.ErrProtocol) {
				t.Errorf("ParsePermissionRequest(%s) = %+v, %v, want a %s error", params, got, err, acpwire.ErrProtocol)
			}
		})
	}
}

func TestPermissionResults(t *testing.T) {
	if got, want := string(acp.PermissionSelected(`al"low`)), `{"outcome":{"outcome":"selected","optionId":"al\"low"}}`; got != want {
		t.Errorf("PermissionSelected = %s, want %s", got, want)
	}
	if got, want := string(acp.PermissionCancelled()), `{"outcome":{"outcome":"cancelled"}}`; got != want {
		t.Errorf("PermissionCancelled() = %s, want %s", got, want)
	}
}
