package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeClock is a printer's clock that a test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// step is one input of a renderer test: an event to render, or the clock
// moved forward.
type step struct {
	event   string
	advance time.Duration
}

// renderSteps renders the steps on a plain printer or a terminal one with
// a fake clock, and returns what was written.
func renderSteps(t *testing.T, tty bool, steps []step) string {
	t.Helper()
	var out bytes.Buffer
	p := newPrinter(&out)
	if tty {
		p = newTermPrinter(&out, 60)
	}
	clock := &fakeClock{t: time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)}
	p.now = clock.now
	for _, s := range steps {
		if s.advance > 0 {
			clock.t = clock.t.Add(s.advance)
			continue
		}
		var e event
		if err := json.Unmarshal([]byte(s.event), &e); err != nil {
			t.Fatalf("event %s: %v", s.event, err)
		}
		p.render(&e)
	}
	if err := p.finish(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// screen replays what a terminal printer wrote as a terminal shows it:
// each "cursor up N, clear to the end" erases the last N lines. It fails
// on any other escape sequence than SGR ones, which it keeps.
func screen(t *testing.T, out string) string {
	t.Helper()
	erase := regexp.MustCompile(`\x1b\[(\d+)A\r\x1b\[J`)
	var lines []string
	var cur []byte
	for out != "" {
		if loc := erase.FindStringSubmatchIndex(out); loc != nil && loc[0] == 0 {
			var n int
			for _, c := range out[loc[2]:loc[3]] {
				n = n*10 + int(c-'0')
			}
			if len(cur) != 0 || n > len(lines) {
				t.Fatalf("erase of %d lines with %d lines and %q open", n, len(lines), cur)
			}
			lines = lines[:len(lines)-n]
			out = out[loc[1]:]
			continue
		}
		c := out[0]
		out = out[1:]
		if c == '\n' {
			lines = append(lines, string(cur))
			cur = nil
			continue
		}
		cur = append(cur, c)
	}
	if len(cur) != 0 {
		lines = append(lines, string(cur))
	}
	return strings.Join(lines, "\n") + "\n"
}

// noSGR drops the SGR sequences (colours, dim) of s.
func noSGR(s string) string { return regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAllString(s, "") }

func TestRenderers(t *testing.T) {
	const (
		call      = `{"durability":"durable","type":"tool_call","toolCallId":"c1","title":"go test ./...","kind":"execute","status":"pending","rawInput":{"command":"go test ./..."}}`
		running   = `{"durability":"durable","type":"tool_call_update","toolCallId":"c1","status":"in_progress"}`
		completed = `{"durability":"durable","type":"tool_call_update","toolCallId":"c1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"ok"}}]}`
		failed    = `{"durability":"durable","type":"tool_call_update","toolCallId":"c1","status":"failed","content":[{"type":"content","content":{"type":"text","text":"l1\nl2\nl3\nl4\nl5\nl6\nFAIL: TestX"}}],"rawOutput":{"exitCode":1,"stderr":"exit status 1"}}`
		edit      = `{"durability":"durable","type":"tool_call","toolCallId":"e1","title":"Edit a.go","kind":"edit","status":"completed","content":[{"type":"diff","path":"a.go","oldText":"package a\nvar x = 1\nvar y = 2\n","newText":"package a\nvar x = 10\nvar y = 2\nvar z = 3\n"}]}`
		plan1     = `{"durability":"durable","type":"plan","entries":[{"content":"read","status":"in_progress"},{"content":"write","status":"pending"}]}`
		plan2     = `{"durability":"durable","type":"plan","entries":[{"content":"read","status":"completed"},{"content":"write","status":"in_progress"}]}`
		thought   = `{"durability":"ephemeral","type":"agent_thought_chunk","content":{"type":"text","text":"hmm"}}`
		thoughtD  = `{"durability":"durable","type":"agent_thought_chunk","content":{"type":"text","text":"hmm"}}`
		say       = `{"durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":"Done."}}`
	)
	tests := []struct {
		name       string
		steps      []step
		plain      string
		terminal   string // the screen at the end, SGR sequences dropped
		terminalRe string // a pattern the raw terminal output must match
	}{
		{
			name:     "a tool call is one line with its status, title and duration",
			steps:    []step{{event: call}, {advance: time.Second}, {event: running}, {advance: 1500 * time.Millisecond}, {event: completed}},
			plain:    "[tool] go test ./...: pending\n[tool] go test ./...: completed\n",
			terminal: "✓ go test ./... completed 2.5s\n",
		},
		{
			name:  "a failed tool call shows the tail of its output and why",
			steps: []step{{event: call}, {advance: 300 * time.Millisecond}, {event: failed}},
			plain: "[tool] go test ./...: pending\n[tool] go test ./...: failed\n" +
				"    …\n    l4\n    l5\n    l6\n    FAIL: TestX\n    exit status 1\n",
			terminal: "✗ go test ./... failed 0.3s\n    …\n    l4\n    l5\n    l6\n    FAIL: TestX\n    exit status 1\n",
		},
		{
			name:       "a diff is shown compactly",
			steps:      []step{{event: edit}},
			plain:      "[tool] Edit a.go: completed\n    a.go +2 -1\n    - var x = 1\n    + var x = 10\n    + var z = 3\n",
			terminal:   "✓ Edit a.go completed 0.0s\n    a.go +2 -1\n    - var x = 1\n    + var x = 10\n    + var z = 3\n",
			terminalRe: `\x1b\[31m- var x = 1\x1b\[0m`,
		},
		{
			name:     "a plan is printed at each change on a pipe and redrawn in place on a terminal",
			steps:    []step{{event: plan1}, {event: plan2}, {event: say}},
			plain:    "[plan]\n  [~] read\n  [ ] write\n[plan]\n  [x] read\n  [~] write\nDone.\n",
			terminal: "Done.\nplan:\n  [x] read\n  [~] write\n",
		},
		{
			name: "a later turn's call that reuses an ID is a call of its own",
			steps: []step{{event: call}, {event: completed},
				{event: `{"durability":"durable","type":"user_message_chunk","content":{"type":"text","text":"again"}}`},
				{event: call}, {event: completed}},
			plain:    "[tool] go test ./...: pending\n[tool] go test ./...: completed\n[tool] go test ./...: pending\n[tool] go test ./...: completed\n",
			terminal: "✓ go test ./... completed 0.0s\n✓ go test ./... completed 0.0s\n",
		},
		{
			name:       "thoughts are dimmed on a terminal and left out on a pipe",
			steps:      []step{{event: thought}, {event: thoughtD}, {event: say}},
			plain:      "Done.\n",
			terminal:   "hmm\nDone.\n",
			terminalRe: `\x1b\[2mhmm\x1b\[0m\nDone\.`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := renderSteps(t, false, tt.steps); got != tt.plain {
				t.Errorf("plain:\n%s\nwant\n%s", got, tt.plain)
			}
			if strings.Contains(renderSteps(t, false, tt.steps), "\x1b") {
				t.Error("plain output holds an escape sequence")
			}
			raw := renderSteps(t, true, tt.steps)
			if got := noSGR(screen(t, raw)); got != tt.terminal {
				t.Errorf("terminal screen:\n%s\nwant\n%s\nraw %q", got, tt.terminal, raw)
			}
			if tt.terminalRe != "" && !regexp.MustCompile(tt.terminalRe).MatchString(raw) {
				t.Errorf("terminal output %q does not match %s", raw, tt.terminalRe)
			}
		})
	}
}

// TestLiveRegion: on a terminal, a running tool call and the spinner are
// redrawn in place (the region is erased, not scrolled) and leave no
// trace once the call ends.
func TestLiveRegion(t *testing.T) {
	var out bytes.Buffer
	p := newTermPrinter(&out, 60)
	clock := &fakeClock{t: time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)}
	p.now = clock.now
	render := func(raw string) {
		var e event
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			t.Fatal(err)
		}
		p.render(&e)
	}
	p.setPhase(phaseThinking)
	clock.t = clock.t.Add(1200 * time.Millisecond)
	p.tick()
	if got := noSGR(screen(t, out.String())); got != "⠙ thinking 1.2s\n" {
		t.Errorf("screen with the spinner = %q", got)
	}
	render(`{"durability":"durable","type":"tool_call","toolCallId":"c1","title":"ls","status":"in_progress"}`)
	clock.t = clock.t.Add(2 * time.Second)
	p.tick()
	if got := noSGR(screen(t, out.String())); got != "⠹ ls in_progress 2.0s\n⠹ running a tool 3.2s\n" {
		t.Errorf("screen with a running tool = %q", got)
	}
	render(`{"durability":"durable","type":"tool_call_update","toolCallId":"c1","status":"completed"}`)
	if err := p.finish(); err != nil {
		t.Fatal(err)
	}
	if got := noSGR(screen(t, out.String())); got != "✓ ls completed 2.0s\n" {
		t.Errorf("screen at the end = %q", got)
	}
	// A line longer than the terminal is cut, so that erasing the region
	// erases exactly it.
	if got := cut("\x1b[2m"+strings.Repeat("x", 100), 10); noSGR(got) != strings.Repeat("x", 10) {
		t.Errorf("cut = %q", got)
	}
}

func TestWhatWillRun(t *testing.T) {
	tests := []struct {
		name, toolCall string
		want           []string
	}{
		{"the command", `{"title":"Run tests","rawInput":{"command":"go test ./..."}}`, []string{"$ go test ./..."}},
		{"an argv", `{"title":"Run","rawInput":{"command":["rm","-rf","build"]}}`, []string{"$ rm -rf build"}},
		{"a command the title is", `{"title":"ls","rawInput":{"command":"ls"}}`, nil},
		{"a diff", `{"title":"Edit","content":[{"type":"diff","path":"b.txt","oldText":null,"newText":"hi\n"}]}`, []string{"b.txt +1 -0 (new)", "+ hi"}},
		{"the raw input", `{"title":"Fetch","rawInput":{"url":"https://example.com"}}`, []string{`input: {"url":"https://example.com"}`}},
		{"nothing", `{"title":"Think"}`, nil},
	}
	for _, tt := range tests {
		var tc toolCallInfo
		if err := json.Unmarshal([]byte(tt.toolCall), &tc); err != nil {
			t.Fatal(err)
		}
		if got := whatWillRun(&tc); strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: whatWillRun = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestCompactDiff(t *testing.T) {
	old := strings.Repeat("same\n", 3) + "a\nb\nc\n"
	d := fileDiff{path: "f", oldText: old, newText: strings.Repeat("same\n", 3) + "A\nb\nC\nD\n"}
	got := d.compact(3)
	want := []string{"f +3 -2", "- a", "+ A", "- c", "… 2 more changed lines"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("compact = %q, want %q", got, want)
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{time.Second, "just now"}, {42 * time.Second, "42s ago"}, {3 * time.Minute, "3m ago"}, {5 * time.Hour, "5h ago"}, {49 * time.Hour, "2d ago"}} {
		if got := ago(now.Add(-tt.d).Format(time.RFC3339Nano), now); got != tt.want {
			t.Errorf("ago(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
	if got := ago("", now); got != "-" {
		t.Errorf(`ago("") = %q, want "-"`, got)
	}
}
