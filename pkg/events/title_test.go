package events_test

import (
	"encoding/json"
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

func TestDeriveTitle(t *testing.T) {
	eighty := strings.Repeat("ab ", 26) + "ab" // 80 runes
	tests := []struct {
		name, in, want string
	}{
		{"plain", "Fix the build", "Fix the build"},
		{"white space collapsed", "  Fix\tthe\n\n  build \r\n", "Fix the build"},
		{"unicode white space", "a\u00a0\u2003b\u2028c", "a b c"},
		{"controls dropped", "a\x00b\x1b[0m", "ab[0m"},
		{"invalid UTF-8 dropped", "a\xffb", "ab"},
		{"exactly 80 runes", eighty, eighty},
		{"81 runes cut", eighty + "c", eighty + "…"},
		{"cut before a space", strings.Repeat("x", 79) + " yz", strings.Repeat("x", 79) + "…"},
		{"multi-byte cut", strings.Repeat("日本", 50), strings.Repeat("日本", 40) + "…"},
		{"nothing left", " \n\t\x00 ", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.DeriveTitle(tt.in); got != tt.want {
				t.Errorf("DeriveTitle(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestAgentTitle(t *testing.T) {
	if got := events.AgentTitle(" Refactor\nthe parser "); got != "Refactor the parser" {
		t.Errorf("AgentTitle = %q, want %q", got, "Refactor the parser")
	}
	long := events.AgentTitle(strings.Repeat("z", 500))
	if n := utf8.RuneCountInString(long); n != events.MaxTitleRunes || !strings.HasSuffix(long, "…") {
		t.Errorf("AgentTitle of 500 runes = %d runes %q, want %d ending in …", n, long, events.MaxTitleRunes)
	}
	if _, err := events.NormalizeTitle(long); err != nil {
		t.Errorf("a cut agent title breaks the rename rules: %v", err)
	}
}

func TestPromptTitle(t *testing.T) {
	blocks := func(js ...string) []json.RawMessage {
		out := make([]json.RawMessage, len(js))
		for i, j := range js {
			out[i] = json.RawMessage(j)
		}
		return out
	}
	tests := []struct {
		name   string
		blocks []json.RawMessage
		want   string
	}{
		{"one text block", blocks(`{"type":"text","text":"  hello\nworld "}`), "hello world"},
		{"text blocks joined", blocks(`{"type":"text","text":"hello"}`, `{"type":"image","data":"AAAA","mimeType":"image/png"}`, `{"type":"text","text":"world"}`), "hello world"},
		{"no text", blocks(`{"type":"image","data":"AAAA","mimeType":"image/png"}`), ""},
		{"text not a string", blocks(`{"type":"text","text":7}`), ""},
		{"long", blocks(`{"type":"text","text":"` + strings.Repeat("word ", 100) + `"}`), strings.TrimSpace(strings.Repeat("word ", 16)) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.PromptTitle(tt.blocks); got != tt.want {
				t.Errorf("PromptTitle = %q, want %q", got, tt.want)
			}
		})
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

// FuzzDeriveTitle: derived and agent titles never panic, keep the rules,
// pass NormalizeTitle unchanged (or are empty), and keep their bounds.
func FuzzDeriveTitle(f *testing.F) {
	for _, s := range []string{"", "hello  world", "\x00\x1b[1m", strings.Repeat("日本 ", 60), "a\xffb\u2028c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, c := range []struct {
			name  string
			title string
			max   int
		}{
			{"DeriveTitle", events.DeriveTitle(in), events.DerivedTitleRunes + 1},
			{"AgentTitle", events.AgentTitle(in), events.MaxTitleRunes},
		} {
			if c.title == "" {
				continue
			}
			if !titleOK(c.title) || utf8.RuneCountInString(c.title) > c.max || strings.Contains(c.title, "  ") {
				t.Fatalf("%s(%q) = %q: breaks the rules", c.name, in, c.title)
			}
			if got, err := events.NormalizeTitle(c.title); err != nil || got != c.title {
				t.Fatalf("NormalizeTitle(%s(%q)) = %q, %v", c.name, in, got, err)
			}
		}
		// A prompt of one text block derives what its text derives.
		block, _ := json.Marshal(map[string]string{"type": "text", "text": in})
		var text struct{ Text string }
		if err := json.Unmarshal(block, &text); err != nil {
			t.Fatal(err)
		}
		if got, want := events.PromptTitle([]json.RawMessage{block}), events.DeriveTitle(text.Text); got != want {
			t.Fatalf("PromptTitle of %q = %q, DeriveTitle = %q", in, got, want)
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
