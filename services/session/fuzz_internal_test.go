package session

import (
	"encoding/json"
	"strings"
	"testing"
)

// Adapter output is untrusted: the JSON the session service rewrites
// (coalescing chunks, removing the private session ID) must never panic,
// must stay valid JSON, and must keep what it promises to keep.

func FuzzCoalesce(f *testing.F) {
	f.Add(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"},"messageId":"m"}`, `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"b"}}`, 64)
	f.Add(`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA=="}}`, `{"content":{"text":"x","type":"text"},"_meta":{"k":1}}`, 4096)
	f.Add(`{"content":{"type":"text","text":"\u00e9\u00e9\u00e9"}}`, `not json`, 70)
	f.Fuzz(func(t *testing.T, a, b string, maxRecord int) {
		if maxRecord < 0 || maxRecord > 1<<20 {
			return
		}
		chunks := []json.RawMessage{json.RawMessage(a), json.RawMessage(b)}
		out, err := coalesce(chunks, maxRecord)
		if err != nil {
			return
		}
		var want, got strings.Builder
		allText := true
		for _, c := range chunks {
			text, ok := chunkText(c)
			allText = allText && ok
			want.WriteString(text)
		}
		for _, u := range out {
			if allText && !json.Valid(u) {
				t.Fatalf("coalesce(%q, %q) wrote invalid JSON %q", a, b, u)
			}
			text, _ := chunkText(u)
			got.WriteString(text)
		}
		if allText && got.String() != want.String() {
			t.Fatalf("coalesce(%q, %q) texts = %q, want %q", a, b, got.String(), want.String())
		}
	})
}
