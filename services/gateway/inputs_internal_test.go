package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// FuzzDecodeRespondInput: decodeRespondInput never panics, refuses with an
// *events.Error, and what it accepts is a valid UTF-8 body with a known
// action and, with accept only, content that is a JSON object, passed on
// as the body held it.
func FuzzDecodeRespondInput(f *testing.F) {
	for _, seed := range []string{
		`{"action":"accept","content":{"name":"n"}}`,
		`{"action":"accept"}`,
		`{"action":"accept","content":null}`,
		`{"action":"decline"}`,
		`{"action":"cancel","content":{}}`,
		`{"action":"accept","content":[1]}`,
		`{"action":"accept","content":{"a":1},"b":2}`,
		"{\"action\":\"accept\",\"content\":{\"a\":\"\xff\"}}",
		`{"action":1}`,
		`{}`,
		``,
	} {
		f.Add([]byte(seed), "input_1")
	}
	for _, id := range []string{"", " ", "a b", "\x7f", strings.Repeat("i", 257)} {
		f.Add([]byte(`{"action":"decline"}`), id)
	}
	f.Fuzz(func(t *testing.T, body []byte, requestID string) {
		req, err := decodeRespondInput(body, "s1", requestID)
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("decodeRespondInput(%q) = %v, want an *events.Error", body, err)
			}
			return
		}
		if !utf8.Valid(body) || req.SessionID != "s1" || req.RequestID != requestID {
			t.Fatalf("decodeRespondInput(%q, %q) = %+v", body, requestID, req)
		}
		switch req.Action {
		case events.InputAccept:
			if len(req.Content) > 0 {
				var m map[string]json.RawMessage
				if json.Unmarshal(req.Content, &m) != nil || m == nil || !strings.Contains(string(body), string(req.Content)) {
					t.Fatalf("decodeRespondInput(%q) accepted content %q", body, req.Content)
				}
			}
		case events.InputDecline, events.InputCancel:
			if len(req.Content) > 0 {
				t.Fatalf("decodeRespondInput(%q) accepted content with %s", body, req.Action)
			}
		default:
			t.Fatalf("decodeRespondInput(%q) accepted action %q", body, req.Action)
		}
	})
}
