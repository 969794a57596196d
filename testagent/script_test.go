package testagent

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseScript(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []op
	}{
		{
			name: "no commands is one echo of the whole text",
			in:   "  Hello agent\n\nsecond line ",
			want: []op{{Kind: opEcho, Line: 1, Text: "  Hello agent\n\nsecond line "}},
		},
		{
			name: "comment-only text is still an echo",
			in:   "# not a script",
			want: []op{{Kind: opEcho, Line: 1, Text: "# not a script"}},
		},
		{
			name: "commands, echo lines, comments and blanks",
			in:   "say hi there\n\n# comment\nhello\n  /think  deep thought \nmessage\r\n",
			want: []op{
				{Kind: opSay, Line: 1, Text: "hi there"},
				{Kind: opEcho, Line: 4, Text: "hello"},
				{Kind: opThink, Line: 5, Text: "deep thought"},
				{Kind: opMessage, Line: 6},
			},
		},
		{
			name: "quoted text",
			in:   `say "a\nb"` + "\n" + `say "unterminated`,
			want: []op{{Kind: opSay, Line: 1, Text: "a\nb"}, {Kind: opSay, Line: 2, Text: `"unterminated`}},
		},
		{
			name: "keywords are case-sensitive",
			in:   "Sleep well\nsay x",
			want: []op{{Kind: opEcho, Line: 1, Text: "Sleep well"}, {Kind: opSay, Line: 2, Text: "x"}},
		},
		{
			name: "tick",
			in:   "tick 3 20ms",
			want: []op{{Kind: opTick, Line: 1, N: 3, Delay: 20 * time.Millisecond}},
		},
		{
			name: "chunks",
			in:   "chunks 3\nchunks 0 part",
			want: []op{{Kind: opChunks, Line: 1, N: 3, Text: "chunk"}, {Kind: opChunks, Line: 2, N: 0, Text: "part"}},
		},
		{
			name: "tools",
			in:   "tool call_1\ntool c2 Read the file\ntoolstep c2 in_progress\ntoolstep c2 completed all good",
			want: []op{
				{Kind: opTool, Line: 1, ID: "call_1", Text: "Tool call_1"},
				{Kind: opTool, Line: 2, ID: "c2", Text: "Read the file"},
				{Kind: opToolStep, Line: 3, ID: "c2", Status: "in_progress"},
				{Kind: opToolStep, Line: 4, ID: "c2", Status: "completed", Text: "all good"},
			},
		},
		{
			name: "plan",
			in:   "plan [x] a | [~] b |c\nplan",
			want: []op{
				{Kind: opPlan, Line: 1, Entries: []planEntry{
					{Content: "a", Priority: "medium", Status: "completed"},
					{Content: "b", Priority: "medium", Status: "in_progress"},
					{Content: "c", Priority: "medium", Status: "pending"},
				}},
				{Kind: opPlan, Line: 2, Entries: []planEntry{}},
			},
		},
		{
			name: "permission",
			in:   "permission call_1 allow_once=allow, reject_once=reject\npermission c2\npermission c3 allow_always,future_kind=x",
			want: []op{
				{Kind: opPermission, Line: 1, ID: "call_1", Options: []permissionOption{
					{OptionID: "allow", Name: "Allow once", Kind: "allow_once"},
					{OptionID: "reject", Name: "Reject", Kind: "reject_once"},
				}},
				{Kind: opPermission, Line: 2, ID: "c2", Options: []permissionOption{
					{OptionID: "allow", Name: "Allow once", Kind: "allow_once"},
					{OptionID: "reject", Name: "Reject", Kind: "reject_once"},
				}},
				{Kind: opPermission, Line: 3, ID: "c3", Options: []permissionOption{
					{OptionID: "allow_always", Name: "Always allow", Kind: "allow_always"},
					{OptionID: "x", Name: "future_kind", Kind: "future_kind"},
				}},
			},
		},
		{
			name: "timing and control",
			in:   "sleep 250\nsleep 1.5s\npause p-1.a\nstop max_tokens\nerror -32000 Authentication required\nerror 500\ncrash\ncrash 3",
			want: []op{
				{Kind: opSleep, Line: 1, Delay: 250 * time.Millisecond},
				{Kind: opSleep, Line: 2, Delay: 1500 * time.Millisecond},
				{Kind: opPause, Line: 3, ID: "p-1.a"},
				{Kind: opStop, Line: 4, Status: "max_tokens"},
				{Kind: opError, Line: 5, N: -32000, Text: "Authentication required"},
				{Kind: opError, Line: 6, N: 500, Text: "Internal error"},
				{Kind: opCrash, Line: 7, N: 1},
				{Kind: opCrash, Line: 8, N: 3},
			},
		},
		{
			name: "raw output",
			in:   "garbage\ngarbage {oops\nbig 10\nstderr to stderr\nupdate {\"sessionUpdate\":\"x\"}\nnotify _a/b\nnotify _a/c {\"k\":1}\nusage 1 2\ntitle T\nmode plan\nconfig\ninstructions",
			want: []op{
				{Kind: opGarbage, Line: 1, Text: "this is not json"},
				{Kind: opGarbage, Line: 2, Text: "{oops"},
				{Kind: opBig, Line: 3, N: 10},
				{Kind: opStderr, Line: 4, Text: "to stderr"},
				{Kind: opUpdate, Line: 5, Raw: json.RawMessage(`{"sessionUpdate":"x"}`)},
				{Kind: opNotify, Line: 6, ID: "_a/b", Raw: json.RawMessage(`{}`)},
				{Kind: opNotify, Line: 7, ID: "_a/c", Raw: json.RawMessage(`{"k":1}`)},
				{Kind: opUsage, Line: 8, Used: 1, Size: 2},
				{Kind: opTitle, Line: 9, Text: "T"},
				{Kind: opMode, Line: 10, ID: "plan"},
				{Kind: opConfig, Line: 11},
				{Kind: opInstructions, Line: 12},
			},
		},
		{
			name: "stream",
			in:   "stream 100 50\nstream 3 0.5 0\nstream 1 1000 64",
			want: []op{
				{Kind: opStream, Line: 1, N: 100, Size: defaultStreamSize, Delay: 20 * time.Millisecond},
				{Kind: opStream, Line: 2, N: 3, Size: 0, Delay: 2 * time.Second},
				{Kind: opStream, Line: 3, N: 1, Size: 64, Delay: time.Millisecond},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseScript(tc.in)
			if err != nil {
				t.Fatalf("parseScript(%q) error = %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("parseScript(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestParseScriptErrors(t *testing.T) {
	for _, in := range []string{
		"message now",
		"chunks",
		"chunks -1",
		"chunks 99999999",
		"tick 3",
		"tick 0 1ms",
		"tick 3 soon",
		"tool",
		"toolstep c1",
		"plan a || b",
		"permission",
		"permission c1 allow_once=",
		"permission c1 =x",
		"permission c1 allow_once=a,reject_once=a",
		"sleep",
		"sleep soon",
		"sleep -5",
		"sleep 48h",
		"pause",
		"pause ../escape",
		"pause .hidden",
		"pause a b",
		"stop",
		"stop end turn",
		"error",
		"error abc message",
		"crash 256",
		"crash x",
		`garbage "a\nb"`,
		"big",
		"big -1",
		"big 999999999999",
		"update",
		"update [1]",
		"update {",
		"notify",
		"notify _x [1]",
		"usage 1",
		"usage a b",
		"mode",
		"mode a b",
		"config now",
		"stream",
		"stream 10",
		"stream 0 50",
		"stream 10 0",
		"stream 10 -5",
		"stream 10 fast",
		"stream 10 50 -1",
		"stream 10 50 16 extra",
	} {
		t.Run(in, func(t *testing.T) {
			_, err := parseScript("say ok\n" + in)
			var se *scriptError
			if !errors.As(err, &se) || se.Line != 2 {
				t.Fatalf("parseScript(%q) error = %v, want a scriptError on line 2", in, err)
			}
			if !strings.HasPrefix(err.Error(), "script error: line 2: ") {
				t.Errorf("error text = %q", err)
			}
		})
	}
}

// FuzzParseScript checks that the parser never panics and that what it
// accepts is well formed.
func FuzzParseScript(f *testing.F) {
	for _, seed := range []string{
		"", "Hello agent", "say hi\nchunks 3 x\nmessage\nthink t", "tool c1 Title\ntoolstep c1 completed ok",
		"plan [x] a | [~] b | c", "permission c1 allow_once=allow,reject_once=reject", "sleep 10\npause p1",
		"stop refusal\nerror 500 boom\ncrash 3", "garbage\nbig 5\nupdate {\"sessionUpdate\":\"x\"}",
		"notify _x {\"a\":1}\nusage 1 2\ntitle t\nmode plan", `say "\u00e9\n"`, "/say slash", "say \xff\xfe",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		ops, err := parseScript(in)
		if err != nil {
			var se *scriptError
			if !errors.As(err, &se) || se.Line < 1 {
				t.Fatalf("parseScript(%q) error %v is not a scriptError with a line", in, err)
			}
			return
		}
		if len(ops) == 0 && strings.TrimSpace(in) != "" && !allComments(in) {
			t.Fatalf("parseScript(%q) = no ops", in)
		}
		last := 0
		for _, o := range ops {
			if o.Line < last {
				t.Fatalf("parseScript(%q): lines out of order: %+v", in, ops)
			}
			last = o.Line
			switch o.Kind {
			case opChunks, opBig:
				if o.N < 0 {
					t.Fatalf("negative count in %+v", o)
				}
			case opPause:
				if !validPauseName(o.ID) {
					t.Fatalf("pause name %q accepted", o.ID)
				}
			case opUpdate, opNotify:
				if !json.Valid(o.Raw) {
					t.Fatalf("invalid JSON accepted: %+v", o)
				}
			case opTool, opToolStep, opPermission:
				if o.ID == "" {
					t.Fatalf("empty tool call id: %+v", o)
				}
			}
		}
	})
}

// allComments reports whether every non-blank line of s is a comment, in
// which case a script that has a command line elsewhere yields no op for it.
func allComments(s string) bool {
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

func TestSplitEven(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"echo: Hello agent", []string{"echo:", " Hello", " agent"}},
		{"echo: not a command", []string{"echo: not", " a", " command"}},
		{"abcdefghi", []string{"abc", "def", "ghi"}},
		{"ab", []string{"a", "b"}},
		{"", []string{""}},
		{"héllo wörld", []string{"héllo", " w", "örld"}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, splitEven(tc.in, echoParts)); diff != "" {
			t.Errorf("splitEven(%q) mismatch (-want +got):\n%s", tc.in, diff)
		}
	}
}

func FuzzSplitEven(f *testing.F) {
	f.Add("echo: Hello agent", 3)
	f.Add("\xff\xfe a", 2)
	f.Fuzz(func(t *testing.T, s string, parts int) {
		parts = parts%8 + 1
		if parts < 1 {
			parts += 8
		}
		got := splitEven(s, parts)
		if strings.Join(got, "") != s {
			t.Fatalf("splitEven(%q, %d) = %q, does not join back", s, parts, got)
		}
		if len(got) > parts || len(got) == 0 {
			t.Fatalf("splitEven(%q, %d) = %d pieces", s, parts, len(got))
		}
		for _, piece := range got {
			if utf8.ValidString(s) && (piece == "" && s != "" || !utf8.ValidString(piece)) {
				t.Fatalf("splitEven(%q, %d) = %q: empty or split rune", s, parts, got)
			}
		}
	})
}

func TestBigText(t *testing.T) {
	for _, n := range []int{0, 1, 36, 37, 100000} {
		if got := bigText(n); len(got) != n || !utf8.ValidString(got) {
			t.Errorf("len(bigText(%d)) = %d", n, len(got))
		}
	}
}
