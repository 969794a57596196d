package gateway

import (
	"net/url"
	"testing"
)

// FuzzDecodeFork: decodeFork never panics, refuses with a typed error, and
// what it accepts is a fork of the URL's session onto another valid one.
func FuzzDecodeFork(f *testing.F) {
	for _, seed := range []string{`{"sessionId":"b"}`, `{"sessionId":"b","atSequence":7}`, `{"sessionId":"s1"}`, `{"atSequence":0}`,
		`{"sessionId":"b","atSequence":-1}`, `{"sessionId":"b","x":1}`, `{"sessionId":"b"} {}`, "", `[]`, "{\"sessionId\":\"\xff\"}"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeFork(body, "s1")
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("decodeFork(%q) = %v, want an *events.Error", body, err)
			}
			return
		}
		src, fork, err := req.Validate()
		if err != nil || src != "s1" || fork == "s1" || !fork.Valid() || (req.AtSequence != nil && *req.AtSequence == 0) {
			t.Fatalf("decodeFork(%q) accepted %+v (%v)", body, req, err)
		}
	})
}

// FuzzParseDirectoriesQuery: only path, at most once, valid UTF-8 and
// valid by ListDirectoriesRequest.Validate.
func FuzzParseDirectoriesQuery(f *testing.F) {
	for _, seed := range []string{"", "path=%2Fws%2Fdefault", "path=relative", "path=%2Fa%2F..%2Fb", "path=%2F%00", "path=%2F%FF", "path=%2F&path=%2F", "depth=1"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, err := parseDirectoriesQuery(q)
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("parseDirectoriesQuery(%q) = %v, want an *events.Error", raw, err)
			}
			return
		}
		for k := range q {
			if k != "path" {
				t.Fatalf("parseDirectoriesQuery(%q) accepted parameter %q", raw, k)
			}
		}
		if (req.Path != nil) != q.Has("path") || (req.Path != nil && *req.Path != q.Get("path")) {
			t.Fatalf("parseDirectoriesQuery(%q) took path %v", raw, req.Path)
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("parseDirectoriesQuery(%q) accepted what Validate refuses: %v", raw, err)
		}
	})
}
