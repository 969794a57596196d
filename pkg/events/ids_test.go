package events_test

import (
	"errors"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

var namespaceTests = []struct {
	name  string
	in    string
	valid bool
}{
	{"default", "default", true},
	{"one letter", "a", true},
	{"one digit", "0", true},
	{"dash and underscore", "team-a_b", true},
	{"leading digit", "9lives", true},
	{"63 bytes", strings.Repeat("a", 63), true},
	{"empty", "", false},
	{"64 bytes", strings.Repeat("a", 64), false},
	{"upper case", "Default", false},
	{"leading dash", "-a", false},
	{"leading underscore", "_a", false},
	{"dot", "a.b", false},
	{"star", "*", false},
	{"gt", ">", false},
	{"embedded wildcard", "a*b", false},
	{"dollar", "$sys", false},
	{"space", "a b", false},
	{"tab", "a\tb", false},
	{"trailing newline", "a\n", false},
	{"non-ASCII", "é", false},
	{"NUL", "a\x00", false},
}

var sessionIDTests = []struct {
	name  string
	in    string
	valid bool
}{
	{"main", "main", true},
	{"mixed case", "Main-Session_2", true},
	{"leading dash", "-x", true},
	{"uuid", "799b1354-6bb3-49d3-8245-be95a8e1060c", true},
	{"128 bytes", strings.Repeat("Z", 128), true},
	{"empty", "", false},
	{"129 bytes", strings.Repeat("Z", 129), false},
	{"dot", "a.b", false},
	{"star", "*", false},
	{"gt", ">", false},
	{"embedded gt", "a>", false},
	{"space", "a b", false},
	{"trailing newline", "main\n", false},
	{"carriage return", "main\r", false},
	{"slash", "a/b", false},
	{"colon", "a:b", false},
	{"non-ASCII", "sessión", false},
	{"NUL", "\x00", false},
}

func TestNamespaceValid(t *testing.T) {
	for _, tt := range namespaceTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.Namespace(tt.in).Valid(); got != tt.valid {
				t.Errorf("Namespace(%q).Valid() = %v, want %v", tt.in, got, tt.valid)
			}
		})
	}
}

func TestParseNamespace(t *testing.T) {
	for _, tt := range namespaceTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.ParseNamespace(tt.in)
			switch {
			case tt.in == "":
				if got != events.DefaultNamespace || err != nil {
					t.Errorf("ParseNamespace(%q) = %q, %v; want %q, nil", tt.in, got, err, events.DefaultNamespace)
				}
			case tt.valid:
				if string(got) != tt.in || err != nil {
					t.Errorf("ParseNamespace(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.in)
				}
			default:
				if got != "" || !errors.Is(err, &events.Error{Code: events.CodeInvalidNamespace}) {
					t.Errorf("ParseNamespace(%q) = %q, %v; want \"\", invalid_namespace", tt.in, got, err)
				}
			}
		})
	}
}

func TestSessionIDValid(t *testing.T) {
	for _, tt := range sessionIDTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.SessionID(tt.in).Valid(); got != tt.valid {
				t.Errorf("SessionID(%q).Valid() = %v, want %v", tt.in, got, tt.valid)
			}
			// RunnerID shares the alphabet.
			if got := events.RunnerID(tt.in).Valid(); got != tt.valid {
				t.Errorf("RunnerID(%q).Valid() = %v, want %v", tt.in, got, tt.valid)
			}
		})
	}
}

func TestParseSessionID(t *testing.T) {
	for _, tt := range sessionIDTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.ParseSessionID(tt.in)
			switch {
			case tt.in == "":
				if got != events.DefaultSessionID || err != nil {
					t.Errorf("ParseSessionID(%q) = %q, %v; want %q, nil", tt.in, got, err, events.DefaultSessionID)
				}
			case tt.valid:
				if string(got) != tt.in || err != nil {
					t.Errorf("ParseSessionID(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.in)
				}
			default:
				if got != "" || !errors.Is(err, &events.Error{Code: events.CodeInvalidSessionID}) {
					t.Errorf("ParseSessionID(%q) = %q, %v; want \"\", invalid_session_id", tt.in, got, err)
				}
			}
		})
	}
}

func TestOptionalSessionID(t *testing.T) {
	tests := []struct {
		name    string
		in      *string
		want    events.SessionID
		wantErr bool
	}{
		{"omitted means main", nil, events.DefaultSessionID, false},
		{"explicit", new("s-1"), "s-1", false},
		{"explicit main", new("main"), "main", false},
		// Present but empty is a caller bug, not a request for main.
		{"explicit empty", new(""), "", true},
		{"invalid", new("a.b"), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.OptionalSessionID(tt.in)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("OptionalSessionID(%v) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
			if err != nil && !errors.Is(err, &events.Error{Code: events.CodeInvalidSessionID}) {
				t.Errorf("OptionalSessionID(%v) error = %v, want invalid_session_id", tt.in, err)
			}
		})
	}
}

func TestRespondPermissionValidate(t *testing.T) {
	tests := []struct {
		name     string
		req      events.AcpRespondPermissionRequest
		want     events.SessionID
		wantCode events.Code // "" means valid
	}{
		{"valid", events.AcpRespondPermissionRequest{SessionID: "s1", RequestID: "perm_1", OptionID: "allow"}, "s1", ""},
		// No default to main: the session is always named.
		{"no session", events.AcpRespondPermissionRequest{RequestID: "perm_1", OptionID: "allow"}, "", events.CodeInvalidSessionID},
		{"invalid session", events.AcpRespondPermissionRequest{SessionID: "a.b", RequestID: "perm_1", OptionID: "allow"}, "", events.CodeInvalidSessionID},
		{"no request", events.AcpRespondPermissionRequest{SessionID: "s1", OptionID: "allow"}, "", events.CodeInvalidRequest},
		{"no option", events.AcpRespondPermissionRequest{SessionID: "s1", RequestID: "perm_1"}, "", events.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.req.Validate()
			if tt.wantCode == "" {
				if got != tt.want || err != nil {
					t.Errorf("Validate() = %q, %v; want %q, nil", got, err, tt.want)
				}
				return
			}
			if got != "" || !errors.Is(err, &events.Error{Code: tt.wantCode}) {
				t.Errorf("Validate() = %q, %v; want %s", got, err, tt.wantCode)
			}
		})
	}
}

// TestParseErrorTruncatesInput: an error message never carries an
// arbitrarily long caller string into logs.
func TestParseErrorTruncatesInput(t *testing.T) {
	long := strings.Repeat(".", 10_000)
	for _, err := range []error{
		func() error { _, err := events.ParseSessionID(long); return err }(),
		func() error { _, err := events.ParseNamespace(long); return err }(),
	} {
		if err == nil {
			t.Error("parsing a 10000-byte input = nil error, want one")
			continue
		}
		if n := len(err.Error()); n > 300 {
			t.Errorf("error for a 10000-byte input = %d bytes, want under 300", n)
		}
	}
}
