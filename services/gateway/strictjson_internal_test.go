package gateway

import (
	"errors"
	"net/url"
	"testing"

	"skein.dev/pkg/events"
)

// A body is one JSON object whose names are exactly the fields', each
// once: two spellings of a field, the same field twice (at any depth),
// invalid UTF-8 and trailing data are invalid_request, never a choice
// between meanings.
func TestSecurityStrictJSON(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		ok         bool
	}{
		{"plain", `{"agent":"demo"}`, true},
		{"raw fields kept", `{"agent":"demo","env":{"A":"1"},"mcpServers":[]}`, true},
		{"another case", `{"Agent":"test"}`, false},
		{"two spellings", `{"agent":"demo","Agent":"test"}`, false},
		{"duplicate", `{"agent":"demo","agent":"test"}`, false},
		{"duplicate in a raw field", `{"agent":"demo","env":{"A":"1","A":"2"}}`, false},
		{"invalid UTF-8", "{\"agent\":\"d\xffmo\"}", false},
		{"trailing data", `{"agent":"demo"} {}`, false},
		{"unknown field", `{"agent":"demo","agnet":"x"}`, false},
	} {
		_, err := decodeOpen([]byte(tc.body), "s1")
		if tc.ok && err != nil {
			t.Errorf("%s: %s refused: %v", tc.name, tc.body, err)
		}
		if !tc.ok {
			if e, ok := errors.AsType[*events.Error](err); !ok || e.Code != events.CodeInvalidRequest {
				t.Errorf("%s: %s = %v, want invalid_request", tc.name, tc.body, err)
			}
		}
	}
	// A rename: {"TITLE": ...} renamed before.
	if _, err := decodeRename([]byte(`{"TITLE":"x"}`), "s1"); err == nil {
		t.Error(`rename with {"TITLE":"x"} accepted`)
	}
}

// A cursor that is no sequence, one past the largest included, is
// invalid_cursor; the largest itself reads past the newest event, an empty
// page (the history service's TestSecurityCursorPastTheEnd).
func TestSecurityCursorPastWhatFits(t *testing.T) {
	for _, q := range []string{"after=18446744073709551616", "before=18446744073709551616", "after=-1", "after=1e3"} {
		v, _ := url.ParseQuery(q)
		if _, err := parseHistoryQuery(v); events.AsError(err).Code != events.CodeInvalidCursor {
			t.Errorf("%s = %v, want %s", q, err, events.CodeInvalidCursor)
		}
	}
	v, _ := url.ParseQuery("after=18446744073709551615")
	if _, err := parseHistoryQuery(v); err != nil {
		t.Errorf("the largest sequence refused: %v", err)
	}
}
