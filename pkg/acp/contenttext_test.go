package acp_test

import (
	"encoding/json"
	"testing"

	"skein.dev/pkg/acp"
)

func TestContentText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		text string
		ok   bool
	}{
		{`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi \u00e9\n"}}`, "hi é\n", true},
		{`{"content":{"text":"","type":"text"}}`, "", true},
		{`{"content":{"type":"image","data":"AA=="}}`, "", false},
		{`{"content":{"type":"text","text":null}}`, "", false},
		{`{"content":{"type":"text"}}`, "", false},
		{`{"content":{"type":"text","text":1}}`, "", false},
		{`{"content":"text"}`, "", false},
		{`{"Content":{"type":"text","text":"x"}}`, "", false},
		{`{"content":{"type":"text","text":"a","text":"b"}}`, "", false},
		{`{"content":{"type":"text","text":"a"},"content":{}}`, "", false},
		{`{"content":{"type":"text","text":"a"}`, "", false},
		{`[]`, "", false},
		{``, "", false},
	} {
		text, ok := acp.ContentText(json.RawMessage(tc.in))
		if text != tc.text || ok != tc.ok {
			t.Errorf("ContentText(%s) = %q, %v; want %q, %v", tc.in, text, ok, tc.text, tc.ok)
		}
	}
}

// FuzzContentText checks ContentText against encoding/json: a text it
// finds is the one a decode of the update finds.
func FuzzContentText(f *testing.F) {
	f.Add(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a\"b\\u0041"}}`)
	f.Add(`{"content":{"type":"text","text":"x","_meta":{"k":[1,2]}},"messageId":"m"}`)
	f.Add(`{"content":{"type":"resource_link","uri":"file:///x"}}`)
	f.Fuzz(func(t *testing.T, in string) {
		text, ok := acp.ContentText(json.RawMessage(in))
		if !ok {
			return
		}
		// Maps match member names exactly, as ContentText does (a struct
		// would match them in any case).
		var u, content map[string]json.RawMessage
		if err := json.Unmarshal([]byte(in), &u); err != nil {
			t.Fatalf("ContentText(%q) = %q, but the update does not decode: %v", in, text, err)
		}
		if err := json.Unmarshal(u["content"], &content); err != nil {
			t.Fatalf("ContentText(%q) = %q, but its content does not decode: %v", in, text, err)
		}
		var typ, want string
		if json.Unmarshal(content["type"], &typ) != nil || typ != "text" || json.Unmarshal(content["text"], &want) != nil || want != text {
			t.Fatalf("ContentText(%q) = %q; a decode finds type %s, text %s", in, text, content["type"], content["text"])
		}
	})
}
