package gateway

import (
	"strings"
	"testing"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// FuzzDecodeRename: decodeRename never panics, refuses with an
// *events.Error, and what it accepts is a body of valid UTF-8 whose title
// keeps the rules (the session service normalizes it the same way), or
// that has none and a cap its Validate accepts.
func FuzzDecodeRename(f *testing.F) {
	for _, seed := range []string{
		`{"title":"Fix the build"}`,
		` { "title" : "  x  " } `,
		`{"title":"\u00e9\u2028"}`,
		"{\"title\":\"\xff\"}",
		`{"title":"\ud800"}`,
		`{"title":""}`,
		`{"title":null}`,
		`{"title":1}`,
		`{"title":"a","x":1}`,
		`{"title":"` + strings.Repeat("é", 121) + `"}`,
		`{}`,
		``,
		`{"budget":{"maxCost":{"amount":5,"currency":"EUR"}}}`,
		`{"title":"x","budget":null}`,
		`{"budget":{"maxCost":null}}`,
		`{"budget":{"maxCost":{"amount":"NaN","currency":"USD"}}}`,
		`{"budget":{"maxCost":{"amount":-1,"currency":"USD"}}}`,
		`{"budget":7}`,
		`{"budget":{"maxCost":{"amount":1}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRename(body, "s1")
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("decodeRename(%q) = %v, want an *events.Error", body, err)
			}
			return
		}
		if !utf8.Valid(body) || req.SessionID == nil || *req.SessionID != "s1" {
			t.Fatalf("decodeRename(%q) = %+v", body, req)
		}
		if req.Budget != nil && req.Budget.Validate() != nil {
			t.Fatalf("decodeRename(%q) accepted budget %+v", body, req.Budget.MaxCost)
		}
		if req.Title == "" && req.Budget != nil {
			return
		}
		title, err := events.NormalizeTitle(req.Title)
		if err != nil || title == "" || utf8.RuneCountInString(title) > events.MaxTitleRunes {
			t.Fatalf("decodeRename(%q) accepted title %q: %q, %v", body, req.Title, title, err)
		}
	})
}
