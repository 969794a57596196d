package events_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

func TestNormalizeTitle(t *testing.T) {
	long := strings.Repeat("é", events.MaxTitleRunes) // 120 runes, 240 bytes
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"plain", "Fix the build", "Fix the build", true},
		{"trimmed", "  \t Fix the build \n", "Fix the build", true},
		{"inner spaces kept", "a  b", "a  b", true},
		{"120 multi-byte runes", long, long, true},
		{"120 runes after trimming", "  " + long + "  ", long, true},
		{"emoji with joiner", "👩‍💻 session", "👩‍💻 session", true},
		{"joiner in a word", "ad\u200dmin", "", false},
		{"bidi override", "invoice\u202efdp.exe", "", false},
		{"empty", "", "", false},
		{"only white space", " \t\n ", "", false},
		{"121 runes", long + "x", "", false},
		{"newline inside", "a\nb", "", false},
		{"tab inside", "a\tb", "", false},
		{"NUL", "a\x00b", "", false},
		{"DEL", "a\x7fb", "", false},
		{"C1 control", "a\u0085b", "", false},
		{"escape sequence", "\x1b[31mred", "", false},
		{"line separator", "a\u2028b", "", false},
		{"paragraph separator", "a\u2029b", "", false},
		{"invalid UTF-8", "a\xffb", "", false},
		{"truncated UTF-8", "caf\xc3", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.NormalizeTitle(tt.in)
			if !tt.ok {
				if events.AsError(err).Code != events.CodeInvalidRequest {
					t.Fatalf("NormalizeTitle(%q) = %q, %v; want %s", tt.in, got, err, events.CodeInvalidRequest)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeTitle(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestRenameSessionRequestValidate(t *testing.T) {
	req := &events.RenameSessionRequest{Title: "  My session "}
	sid, title, err := req.Validate()
	if err != nil || sid != events.DefaultSessionID || title != "My session" {
		t.Errorf("Validate() = %q, %q, %v; want main, %q", sid, title, err, "My session")
	}
	bad := &events.RenameSessionRequest{SessionID: new("a.b"), Title: "ok"}
	if _, _, err := bad.Validate(); events.AsError(err).Code != events.CodeInvalidSessionID {
		t.Errorf("Validate() of session a.b = %v, want %s", err, events.CodeInvalidSessionID)
	}
	empty := &events.RenameSessionRequest{SessionID: new("s1"), Title: " "}
	if _, _, err := empty.Validate(); events.AsError(err).Code != events.CodeInvalidRequest {
		t.Errorf("Validate() of a blank title = %v, want %s", err, events.CodeInvalidRequest)
	}
}

// titleOK reports whether s keeps the rules every stored title keeps.
func titleOK(s string) bool {
	if !utf8.ValidString(s) || strings.TrimSpace(s) != s || utf8.RuneCountInString(s) > events.MaxTitleRunes {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' })
}

// FuzzNormalizeTitle: NormalizeTitle never panics, accepts only titles
// that keep the rules, refuses with invalid_request, and is idempotent.
func FuzzNormalizeTitle(f *testing.F) {
	for _, s := range []string{"", " ", "Fix the build", "a\nb", "a\xffb", "\u2028", strings.Repeat("é", 121), " 👩‍💻 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := events.NormalizeTitle(in)
		if err != nil {
			if events.AsError(err).Code != events.CodeInvalidRequest {
				t.Fatalf("NormalizeTitle(%q) = %v, want %s", in, err, events.CodeInvalidRequest)
			}
			return
		}
		if got == "" || !titleOK(got) {
			t.Fatalf("NormalizeTitle(%q) = %q, which breaks the rules", in, got)
		}
		if again, err := events.NormalizeTitle(got); err != nil || again != got {
			t.Fatalf("NormalizeTitle(%q) = %q, %v; not idempotent", got, again, err)
		}
	})
}

// FuzzRenameSessionRequest decodes arbitrary bytes as a rename request:
// never a panic, and a request that validates has a valid session and a
// title that keeps the rules.
func FuzzRenameSessionRequest(f *testing.F) {
	for _, r := range []*events.RenameSessionRequest{
		{Title: "ok"}, {SessionID: new("s1"), Title: " x "}, {SessionID: new("a.b"), Title: "x"}, {Title: "a\x00"},
	} {
		b, err := events.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := events.Decode[events.RenameSessionRequest](data)
		if err != nil {
			return
		}
		sid, title, err := req.Validate()
		if err != nil {
			return
		}
		if !sid.Valid() || title == "" || !titleOK(title) {
			t.Fatalf("Validate(%+v) = %q, %q", req, sid, title)
		}
	})
}
