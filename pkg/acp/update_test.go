package acp_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"skein.dev/pkg/acp"
)

func TestParseUpdate(t *testing.T) {
	id := "m1"
	tests := []struct {
		name   string
		update string
		want   *acp.Update // nil: ErrMalformed
	}{
		{"chunk", `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"},"messageId":"m1"}`,
			&acp.Update{Kind: acp.UpdateAgentMessageChunk, MessageID: &id}},
		{"no messageId", `{"sessionUpdate":"plan","entries":[]}`, &acp.Update{Kind: acp.UpdatePlan}},
		{"null messageId", `{"messageId":null,"sessionUpdate":"plan"}`, &acp.Update{Kind: acp.UpdatePlan}},
		{"unknown kind kept", `{"sessionUpdate":"from_the_future","_meta":{"x":1}}`, &acp.Update{Kind: "from_the_future"}},
		{"escaped", `{"session\u0055pdate":"tool\u005fcall"}`, &acp.Update{Kind: acp.UpdateToolCall}},
		{"no kind", `{"content":{}}`, nil},
		{"kind not a string", `{"sessionUpdate":1}`, nil},
		{"kind twice", `{"sessionUpdate":"plan","sessionUpdate":"notice"}`, nil},
		{"case differs", `{"SessionUpdate":"plan"}`, nil},
		{"messageId a number", `{"sessionUpdate":"plan","messageId":1}`, nil},
		{"not an object", `["plan"]`, nil},
		{"not JSON", `{"sessionUpdate":"plan"`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := acp.ParseUpdate(json.RawMessage(tt.update))
			if tt.want == nil {
				if !errors.Is(err, acp.ErrMalformed) {
					t.Fatalf("ParseUpdate(%s) = %+v, %v, want ErrMalformed", tt.update, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseUpdate(%s) = %v", tt.update, err)
			}
			tt.want.Raw = json.RawMessage(tt.update)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseUpdate(%s) (-want +got):\n%s", tt.update, diff)
			}
		})
	}
}

func TestPermissionOptions(t *testing.T) {
	tests := []struct {
		name    string
		request string
		want    []acp.PermissionOption // nil: ErrMalformed
	}{
		{"claude", `{"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[` +
			`{"kind":"allow_always","name":"Always Allow","optionId":"allow_always"},` +
			`{"kind":"allow_once","name":"Allow","optionId":"allow"},` +
			`{"kind":"reject_once","name":"Reject","optionId":"reject","_meta":{}}]}`,
			[]acp.PermissionOption{
				{OptionID: "allow_always", Name: "Always Allow", Kind: acp.PermissionAllowAlways},
				{OptionID: "allow", Name: "Allow", Kind: acp.PermissionAllowOnce},
				{OptionID: "reject", Name: "Reject", Kind: acp.PermissionRejectOnce},
			}},
		{"no name", `{"options":[{"optionId":"a","kind":"allow_once"},{"optionId":"b","kind":"x"}]}`,
			[]acp.PermissionOption{{OptionID: "a", Kind: acp.PermissionAllowOnce}, {OptionID: "b", Kind: "x"}}},
		{"name null", `{"options":[{"optionId":"b","kind":"x","name":null}]}`, nil},
		{"no options", `{"sessionId":"s"}`, []acp.PermissionOption{}},
		{"null options", `{"options":null}`, []acp.PermissionOption{}},
		{"empty options", `{"options":[]}`, []acp.PermissionOption{}},
		{"options an object", `{"options":{}}`, nil},
		{"option not an object", `{"options":["a"]}`, nil},
		{"no optionId", `{"options":[{"kind":"allow_once"}]}`, nil},
		{"no kind", `{"options":[{"optionId":"a"}]}`, nil},
		{"name a number", `{"options":[{"optionId":"a","kind":"k","name":1}]}`, nil},
		{"optionId twice", `{"options":[{"optionId":"a","optionId":"b","kind":"k"}]}`, nil},
		{"options twice", `{"options":[],"options":[]}`, nil},
		{"not JSON", `{"options":[}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := acp.PermissionOptions(json.RawMessage(tt.request))
			if tt.want == nil {
				if !errors.Is(err, acp.ErrMalformed) {
					t.Fatalf("PermissionOptions(%s) = %+v, %v, want ErrMalformed", tt.request, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("PermissionOptions(%s) = %v", tt.request, err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(acp.PermissionOption{}, "Raw")); diff != "" {
				t.Errorf("PermissionOptions(%s) (-want +got):\n%s", tt.request, diff)
			}
			// Raw is each option as written, in order.
			var opts []json.RawMessage
			if v, _, _ := acp.Member([]byte(tt.request), "options"); string(v) != "null" && v != nil {
				acp.Elements(v, func(o []byte) error { opts = append(opts, o); return nil })
			}
			for i, o := range got {
				if string(o.Raw) != string(opts[i]) {
					t.Errorf("PermissionOptions(%s)[%d].Raw = %s, want %s", tt.request, i, o.Raw, opts[i])
				}
			}
		})
	}
}

func TestPermissionOutcomes(t *testing.T) {
	if got, want := string(acp.PermissionSelected(`a"<b>`)), `{"outcome":{"outcome":"selected","optionId":"a\"<b>"}}`; got != want {
		t.Errorf("PermissionSelected = %s, want %s", got, want)
	}
	if !json.Valid(acp.PermissionCancelled()) {
		t.Errorf("PermissionCancelled() = %s, not JSON", acp.PermissionCancelled())
	}
}
