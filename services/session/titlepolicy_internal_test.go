package session

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

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
			if got := deriveTitle(tt.in); got != tt.want {
				t.Errorf("deriveTitle(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestAgentTitle(t *testing.T) {
	if got := agentTitle(" Refactor\nthe parser "); got != "Refactor the parser" {
		t.Errorf("agentTitle = %q, want %q", got, "Refactor the parser")
	}
	long := agentTitle(strings.Repeat("z", 500))
	if n := utf8.RuneCountInString(long); n != events.MaxTitleRunes || !strings.HasSuffix(long, "…") {
		t.Errorf("agentTitle of 500 runes = %d runes %q, want %d ending in …", n, long, events.MaxTitleRunes)
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
			if got := promptTitle(tt.blocks); got != tt.want {
				t.Errorf("promptTitle = %q, want %q", got, tt.want)
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

// FuzzDeriveTitle: derived and agent titles never panic, keep the rules,
// pass NormalizeTitle unchanged (or are empty), and keep their bounds.
func FuzzDeriveTitle(f *testing.F) {
	for _, s := range []string{"", "hello  world", "\x00\x1b[1m", strings.Repeat("日本 ", 60), "a\xffb\u2028c", "invoice\u202efdp.exe", "👩\u200d💻", "a\u200db", strings.Repeat("👩\u200d", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, c := range []struct {
			name  string
			title string
			max   int
		}{
			{"deriveTitle", deriveTitle(in), derivedTitleRunes + 1},
			{"agentTitle", agentTitle(in), events.MaxTitleRunes},
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
		if got, want := promptTitle([]json.RawMessage{block}), deriveTitle(text.Text); got != want {
			t.Fatalf("promptTitle of %q = %q, deriveTitle = %q", in, got, want)
		}
	})
}
