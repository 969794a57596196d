package acp_test

import (
	"encoding/json"
	"testing"

	"skein.dev/pkg/acp"
)

func TestSessionInfoTitle(t *testing.T) {
	tests := []struct {
		update string
		title  string
		ok     bool
	}{
		{`{"sessionUpdate":"session_info_update","title":"My session"}`, "My session", true},
		{`{"sessionUpdate":"session_info_update","title":"caf\u00e9 \"x\""}`, `café "x"`, true},
		{`{"sessionUpdate":"session_info_update","title":""}`, "", true},
		{`{"sessionUpdate":"session_info_update","title":null}`, "", false},
		{`{"sessionUpdate":"session_info_update","updatedAt":"2026-12-01T00:00:00Z"}`, "", false},
		{`{"sessionUpdate":"session_info_update","title":7}`, "", false},
		{`{"sessionUpdate":"session_info_update","title":{"text":"x"}}`, "", false},
		{`{"sessionUpdate":"session_info_update","title":"a","title":"b"}`, "", false},
		{`not json`, "", false},
	}
	for _, tt := range tests {
		title, ok := acp.SessionInfoTitle(json.RawMessage(tt.update))
		if title != tt.title || ok != tt.ok {
			t.Errorf("SessionInfoTitle(%s) = %q, %v; want %q, %v", tt.update, title, ok, tt.title, tt.ok)
		}
	}
}

// FuzzSessionInfoTitle checks SessionInfoTitle against encoding/json: for
// a valid object whose title is a string (and not repeated), the same
// string; otherwise nothing. It must never panic.
func FuzzSessionInfoTitle(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"sessionUpdate":"session_info_update","title":"t\ud83d\ude00"}`))
	f.Add([]byte(`{"title":null}`))
	f.Fuzz(func(t *testing.T, update []byte) {
		title, ok := acp.SessionInfoTitle(update)
		names, values, valid := oracleMembers(update)
		var raw []byte
		n := 0
		for i, name := range names {
			if name == "title" {
				raw = values[i]
				n++
			}
		}
		var want string
		wantOK := valid && n == 1 && json.Unmarshal(raw, &want) == nil && raw[0] == '"'
		if ok != wantOK || ok && title != want {
			t.Fatalf("SessionInfoTitle(%q) = %q, %v; encoding/json reads %q, %v", update, title, ok, want, wantOK)
		}
	})
}
