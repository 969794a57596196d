package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events/eventjson"
)

// printer renders a turn live: the agent's reply as it streams, tool calls
// and plans as lines of their own.
//
// On a pipe (plain) everything is appended as text: a tool call is a line
// when it appears and another when it ends, a plan is printed whenever it
// changes, thoughts are left out. On a terminal the printer keeps a live
// region under the transcript that it redraws in place: the running tool
// calls with their elapsed time, the current plan, and a spinner saying
// what the turn is doing. A tool call leaves the region as one finished
// line (status, title, duration); the plan leaves it at the turn's end.
// Thoughts are printed dimmed.
//
// Message text arrives twice: as ephemeral deltas while the agent writes,
// and as the durable completed message. The printer prints the deltas and,
// when the durable message comes, only what the deltas missed (a stream
// that joined late or was cut off); a message whose deltas were all seen
// prints nothing more. Thoughts are handled the same way.
type printer struct {
	w         io.Writer
	tty       bool
	width     int              // of the terminal; lines of the region are cut to it
	now       func() time.Time // the clock of durations and the spinner
	session   string           // named in the hint to answer a request
	showUser  bool             // print the user's prompt (attach, events): a view of a turn another client sent
	lineStart bool
	open      string          // the kind of text the open line holds: "message", "thought" or ""
	streamed  strings.Builder // message text printed from deltas of the current message
	thought   strings.Builder // the same for thoughts
	tools     map[string]*toolState
	running   []*toolState // in the order they appeared
	plan      []planEntry
	planShown bool // the plan in the region was committed
	err       error

	// The live region, on a terminal.
	region  int       // lines it occupies now, the cursor on the line after
	phase   string    // what the spinner says the turn does
	started time.Time // when the spinner's clock started
	frame   int
	paused  bool // a question is asked on the terminal: no region
}

// toolState is what the printer knows of a tool call.
type toolState struct {
	id, title, status, kind string
	start                   time.Time
	content                 json.RawMessage
	rawInput, rawOutput     json.RawMessage
	done                    bool
}

// missedNote introduces a message printed again, whole, because the live
// stream missed part of it.
const missedNote = "[the live stream missed part of this message; all of it:]"

// The terminal's escape sequences: select graphic rendition, and the
// cursor moves that erase the region.
const (
	sgrDim   = "\x1b[2m"
	sgrRed   = "\x1b[31m"
	sgrGreen = "\x1b[32m"
	sgrReset = "\x1b[0m"
)

// spinnerFrames are the spinner's frames, one a tick.
var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func newPrinter(w io.Writer) *printer {
	return &printer{w: w, lineStart: true, tools: map[string]*toolState{}, now: time.Now, width: 80}
}

// newTermPrinter returns a printer for a terminal width columns wide.
func newTermPrinter(w io.Writer, width int) *printer {
	p := newPrinter(w)
	p.tty = true
	if width > 10 {
		p.width = width
	}
	return p
}

// write appends s to the transcript.
func (p *printer) write(s string) {
	if s == "" || p.err != nil {
		return
	}
	p.clearRegion()
	_, p.err = io.WriteString(p.w, s)
	p.lineStart = strings.HasSuffix(s, "\n")
	if p.lineStart {
		p.open = ""
	}
	p.drawRegion()
}

// line prints s on a line of its own.
func (p *printer) line(s string) {
	p.endLine()
	p.write(s + "\n")
}

// endLine ends an open line of text.
func (p *printer) endLine() {
	if !p.lineStart {
		p.write("\n")
	}
}

// style wraps s in an SGR sequence on a terminal.
func (p *printer) style(sgr, s string) string {
	if !p.tty || s == "" {
		return s
	}
	return sgr + s + sgrReset
}

// setPhase sets what the spinner says, and restarts its clock when the
// phase is the first.
func (p *printer) setPhase(phase string) {
	if p.started.IsZero() {
		p.started = p.now()
	}
	p.phase = phase
	p.redraw()
}

// tick advances the spinner.
func (p *printer) tick() {
	p.frame++
	p.redraw()
}

// pause takes the region away while a question is asked on the terminal,
// and resume brings it back.
func (p *printer) pause() {
	p.clearRegion()
	p.paused = true
}

func (p *printer) resume() {
	p.paused = false
	p.drawRegion()
}

func (p *printer) redraw() {
	p.clearRegion()
	p.drawRegion()
}

// clearRegion erases the live region: the cursor goes up to its first
// line, and everything from there down is cleared.
func (p *printer) clearRegion() {
	if p.region == 0 || p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, "\x1b[%dA\r\x1b[J", p.region)
	p.region = 0
}

// drawRegion draws the live region under the transcript, when the
// transcript's last line is complete (a message still streaming has the
// cursor in its line, and shows progress by itself).
func (p *printer) drawRegion() {
	if !p.tty || !p.lineStart || p.paused || p.err != nil {
		return
	}
	lines := p.regionLines()
	if len(lines) == 0 {
		return
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(cut(l, p.width-1))
		b.WriteString(sgrReset + "\n")
	}
	_, p.err = io.WriteString(p.w, b.String())
	p.region = len(lines)
}

// regionLines returns the lines of the live region: the plan, the running
// tool calls, and the spinner.
func (p *printer) regionLines() []string {
	var lines []string
	if len(p.plan) > 0 && !p.planShown {
		lines = append(lines, planLines(p.plan, true)...)
	}
	now := p.now()
	for _, t := range p.running {
		lines = append(lines, fmt.Sprintf("%s %s %s", spinnerFrames[p.frame%len(spinnerFrames)],
			orDefault(t.title, t.id), sgrDim+orDefault(t.status, "pending")+" "+duration(now.Sub(t.start))+sgrReset))
	}
	if p.phase != "" {
		phase := p.phase
		if len(p.running) > 0 && phase == phaseThinking {
			phase = phaseTool
		}
		lines = append(lines, sgrDim+spinnerFrames[p.frame%len(spinnerFrames)]+" "+phase+" "+duration(now.Sub(p.started))+sgrReset)
	}
	return lines
}

// The phases of a turn the spinner names.
const (
	phaseStarting = "starting the agent"
	phaseRestore  = "restoring the session"
	phaseThinking = "thinking"
	phaseTool     = "running a tool"
	phaseWaiting  = "waiting for you"
	phaseCancel   = "cancelling"
)

// cut shortens s to n visible columns, counting runes and skipping SGR
// sequences, so that no region line wraps (a wrapped line would throw the
// count of lines to erase off).
func cut(s string, n int) string {
	var b strings.Builder
	cols := 0
	for i := 0; i < len(s); {
		if s[i] == '\x1b' {
			j := strings.IndexByte(s[i:], 'm')
			if j < 0 {
				break
			}
			b.WriteString(s[i : i+j+1])
			i += j + 1
			continue
		}
		if cols >= n {
			break
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		b.WriteString(s[i : i+size])
		cols++
		i += size
	}
	return b.String()
}

// duration formats an elapsed time for people: 0.4s, 12s, 3m05s.
func duration(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	default:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
}

// finish ends the turn's output: the open line, the plan (committed on a
// terminal) and the region, and returns the first write error.
func (p *printer) finish() error {
	p.phase = ""
	p.endLine()
	for _, t := range p.running {
		p.commitTool(t) // a tool call the turn's end left unfinished
	}
	p.running = nil
	if p.tty && len(p.plan) > 0 && !p.planShown {
		p.planShown = true
		p.clearRegion()
		for _, l := range planLines(p.plan, true) {
			p.write(l + "\n")
		}
	}
	p.clearRegion()
	return p.err
}

// discard drops the deltas of a cancelled or failed turn that the durable
// log will never hold: what was printed stays, but nothing waits for it.
func (p *printer) discard() {
	p.streamed.Reset()
	p.thought.Reset()
}

// render prints one event.
func (p *printer) render(e *event) {
	switch e.Type {
	case acp.UpdateAgentMessageChunk:
		if text, ok := e.text(); ok {
			p.text("message", &p.streamed, e.Durability, text)
		}
	case acp.UpdateAgentThoughtChunk:
		if text, ok := e.text(); ok && p.tty {
			p.text("thought", &p.thought, e.Durability, text)
		}
	case acp.UpdateUserMessageChunk:
		// A prompt starts a turn: tool call IDs are the turn's own.
		clear(p.tools)
		if text, ok := e.text(); ok && p.showUser && e.Durability != eventjson.DurabilityEphemeral {
			p.endLine()
			for l := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
				p.line(p.style(sgrDim, "> "+l))
			}
		}
	case acp.UpdateToolCall, acp.UpdateToolCallUpdate:
		p.tool(e)
	case acp.UpdatePlan:
		p.plan = e.Entries
		p.planShown = false
		if !p.tty {
			p.line("[plan]")
			for _, l := range planLines(e.Entries, false) {
				p.line(l)
			}
			return
		}
		p.redraw()
	case eventjson.TypePermissionRequest:
		p.permission(e)
	case eventjson.TypePermissionResponse:
		detail := e.resolution()
		if detail != "" {
			detail = " (" + detail + ")"
		}
		p.line(fmt.Sprintf("[permission] request %s: %s%s", e.RequestID, e.Status, detail))
	case eventjson.TypeInputRequest, eventjson.TypeInputResponse:
		p.input(e)
	}
	// The rest (available commands, modes, usage, ...) is not part of
	// the reply.
}

// text prints a message or thought chunk: a delta as it comes, the durable
// chunk only for what the deltas missed.
func (p *printer) text(kind string, streamed *strings.Builder, durability, text string) {
	if p.open != kind {
		p.endLine()
	}
	out := func(s string) {
		if s == "" {
			return
		}
		if kind == "thought" {
			s = p.style(sgrDim, s)
		}
		p.write(s)
		if !p.lineStart {
			p.open = kind
		}
	}
	if durability == eventjson.DurabilityEphemeral {
		out(text)
		streamed.WriteString(text)
		return
	}
	seen := streamed.String()
	streamed.Reset()
	switch {
	case strings.HasPrefix(text, seen):
		// The deltas were its start, or there were none.
		out(text[len(seen):])
	case strings.HasPrefix(seen, text):
		// One part of a message split to fit the log: the deltas
		// covered it, and the rest of them the parts to come.
		streamed.WriteString(seen[len(text):])
	default:
		// A delta in the middle was lost (live deltas are best effort:
		// one published as a NATS node died, say). What was printed
		// cannot be taken back: the whole message follows.
		p.line(missedNote)
		out(text)
	}
}

// finalStatus reports whether a tool call's status is its last.
func finalStatus(s string) bool { return s == "completed" || s == "failed" }

// tool follows a tool call or its update.
func (p *printer) tool(e *event) {
	t := p.tools[e.ToolCallID]
	if t != nil && t.done && e.Type == acp.UpdateToolCall {
		t = nil // a new call that reuses a finished one's ID (another turn's)
	}
	if t == nil {
		t = &toolState{id: e.ToolCallID, start: p.now(), status: "pending"}
		if e.ToolCallID != "" {
			p.tools[e.ToolCallID] = t
		}
		if !p.tty {
			// Plain: the call's first line, then one when it ends.
			defer func() {
				if !t.done {
					p.line(fmt.Sprintf("[tool] %s: %s", orDefault(t.title, t.id), t.status))
				}
			}()
		}
		if p.tty {
			p.running = append(p.running, t)
		}
	}
	if e.Title != "" {
		t.title = e.Title
	}
	if e.Kind != "" {
		t.kind = e.Kind
	}
	if e.Status != "" {
		t.status = e.Status
	}
	if len(e.Content) > 0 && string(e.Content) != "null" {
		t.content = e.Content
	}
	if len(e.RawInput) > 0 {
		t.rawInput = e.RawInput
	}
	if len(e.RawOutput) > 0 {
		t.rawOutput = e.RawOutput
	}
	if t.done || !finalStatus(t.status) {
		p.redraw()
		return
	}
	t.done = true
	for i, r := range p.running {
		if r == t {
			p.running = append(p.running[:i], p.running[i+1:]...)
			break
		}
	}
	p.commitTool(t)
}

// commitTool prints a tool call's finished line: status, title and
// duration, the reason and the tail of the output of a failed one, and the
// diffs it made.
func (p *printer) commitTool(t *toolState) {
	title := orDefault(t.title, t.id)
	if !p.tty {
		p.line(fmt.Sprintf("[tool] %s: %s", title, t.status))
	} else {
		mark := p.style(sgrGreen, "✓")
		switch t.status {
		case "failed":
			mark = p.style(sgrRed, "✗")
		case "completed":
		default:
			mark = p.style(sgrDim, "·")
		}
		p.line(fmt.Sprintf("%s %s %s", mark, title, p.style(sgrDim, t.status+" "+duration(p.now().Sub(t.start)))))
	}
	texts, diffs := toolContent(t.content)
	if t.status == "failed" {
		out := strings.Join(texts, "\n")
		if extra := rawOutputText(t.rawOutput); extra != "" && !strings.Contains(out, extra) {
			out = strings.TrimSpace(out + "\n" + extra)
		}
		for _, l := range tail(out, toolTailLines) {
			p.line("    " + p.style(sgrDim, l))
		}
	}
	for _, d := range diffs {
		for _, l := range d.compact(diffLines) {
			p.line("    " + p.diffStyle(l))
		}
	}
}

// How much of a tool call's output and diff is shown.
const (
	toolTailLines = 5
	diffLines     = 12
)

// diffStyle colours a line of a compact diff on a terminal.
func (p *printer) diffStyle(l string) string {
	switch {
	case strings.HasPrefix(l, "+ "):
		return p.style(sgrGreen, l)
	case strings.HasPrefix(l, "- "):
		return p.style(sgrRed, l)
	}
	return l
}

// planLines returns a plan's lines, indented under a header on a terminal.
func planLines(entries []planEntry, header bool) []string {
	var lines []string
	if header {
		lines = append(lines, "plan:")
	}
	for _, entry := range entries {
		lines = append(lines, "  "+planMark(entry.Status)+" "+entry.Content)
	}
	return lines
}

// permission prints a permission request: what will run, the options,
// and the command that answers it.
func (p *printer) permission(e *event) {
	p.line(fmt.Sprintf("[permission] %s (request %s)", e.toolTitle(), e.RequestID))
	if e.ToolCall != nil {
		for _, l := range whatWillRun(e.ToolCall) {
			p.line("  " + p.diffStyle(l))
		}
	}
	for i, o := range e.permissionOptions() {
		p.line(fmt.Sprintf("  %d. %s: %s (%s)", i+1, o.OptionID, orDefault(o.Name, o.OptionID), orDefault(o.Kind, "?")))
	}
	hint := "  answer: skein respond " + e.RequestID + " <optionId>"
	if p.session != "" && p.session != defaultSession {
		hint += " -s " + p.session
	}
	p.line(hint)
}

// whatWillRun returns the lines that show what a permission request's
// tool call will do: the command it runs, else the diffs it makes, else
// its raw input; none when it says nothing the title does not.
func whatWillRun(tc *toolCallInfo) []string {
	if cmd := commandOf(tc.RawInput); cmd != "" {
		if cmd == tc.Title {
			return nil
		}
		return []string{"$ " + cmd}
	}
	_, diffs := toolContent(tc.Content)
	var lines []string
	for _, d := range diffs {
		lines = append(lines, d.compact(diffLines)...)
	}
	if len(lines) > 0 {
		return lines
	}
	if raw := compact(tc.RawInput); len(tc.RawInput) > 0 && raw != "null" && raw != "{}" {
		return []string{"input: " + cut(raw, 200)}
	}
	return nil
}

// commandOf returns the command of a tool call's raw input, as agents
// write it: {"command": "..."} or {"command": ["argv", ...]}, or "".
func commandOf(raw json.RawMessage) string {
	var in struct {
		Command json.RawMessage `json:"command"`
		Cmd     json.RawMessage `json:"cmd"`
	}
	if json.Unmarshal(raw, &in) != nil {
		return ""
	}
	for _, c := range []json.RawMessage{in.Command, in.Cmd} {
		var s string
		if json.Unmarshal(c, &s) == nil && s != "" {
			return s
		}
		var argv []string
		if json.Unmarshal(c, &argv) == nil && len(argv) > 0 {
			return strings.Join(argv, " ")
		}
	}
	return ""
}

// toolContent returns the text and the diffs of a tool call's content.
func toolContent(raw json.RawMessage) ([]string, []fileDiff) {
	var items []struct {
		Type    string `json:"type"`
		Content struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Path    string  `json:"path"`
		OldText *string `json:"oldText"`
		NewText string  `json:"newText"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &items) != nil {
		return nil, nil
	}
	var texts []string
	var diffs []fileDiff
	for _, it := range items {
		switch it.Type {
		case "content":
			if it.Content.Type == "text" && it.Content.Text != "" {
				texts = append(texts, it.Content.Text)
			}
		case "diff":
			d := fileDiff{path: it.Path, newText: it.NewText}
			if it.OldText != nil {
				d.oldText = *it.OldText
			}
			diffs = append(diffs, d)
		}
	}
	return texts, diffs
}

// rawOutputText returns what a tool call's raw output says: a string
// itself, or the usual fields of an object (stderr, error, output).
func rawOutputText(raw json.RawMessage) string {
	if s := rawString(raw); s != "" {
		return s
	}
	var out map[string]json.RawMessage
	if json.Unmarshal(raw, &out) != nil {
		return ""
	}
	var parts []string
	for _, k := range []string{"error", "stderr", "output", "stdout"} {
		if s := rawString(out[k]); strings.TrimSpace(s) != "" {
			parts = append(parts, strings.TrimSpace(s))
		}
	}
	return strings.Join(parts, "\n")
}

// tail returns the last n non-empty lines of s.
func tail(s string, n int) []string {
	var lines []string
	for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, strings.TrimRight(l, "\r"))
		}
	}
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return lines
}
