package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
)

// event is the part of an event's public JSON (events.PublicDurableJSON,
// events.PublicEphemeralJSON) that the commands read.
type event struct {
	SessionID     string          `json:"sessionId"`
	Sequence      uint64          `json:"sequence"`
	AfterSequence uint64          `json:"afterSequence"`
	Timestamp     string          `json:"timestamp"`
	Durability    string          `json:"durability"`
	Type          string          `json:"type"`
	Content       json.RawMessage `json:"content"`
	ToolCallID    string          `json:"toolCallId"`
	Title         string          `json:"title"`
	Status        string          `json:"status"`
	Entries       []planEntry     `json:"entries"`
	RequestID     string          `json:"requestId"`
	ToolCall      *struct {
		Title string `json:"title"`
	} `json:"toolCall"`
	// Fields of the permission events, decoded only for them (options,
	// reason): an agent's own update may use the same names differently.
	Options json.RawMessage `json:"options"`
	Reason  json.RawMessage `json:"reason"`
	Outcome json.RawMessage `json:"outcome"`
	// Fields of the input events (answer.go), raw for the same reason.
	Message json.RawMessage `json:"message"`
	Action  json.RawMessage `json:"action"`
}

// permissionOption is one choice of a permission request.
type permissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// toolTitle returns the title of a permission request's tool call, or its
// request ID.
func (e *event) toolTitle() string {
	if e.ToolCall != nil && e.ToolCall.Title != "" {
		return e.ToolCall.Title
	}
	return e.RequestID
}

// permissionOptions returns the options of a permission request; nil if it
// has none it can read.
func (e *event) permissionOptions() []permissionOption {
	var options []permissionOption
	if len(e.Options) == 0 || json.Unmarshal(e.Options, &options) != nil {
		return nil
	}
	return options
}

// resolution returns what ended a permission request, as a permission
// response tells it: the option selected, or the reason it ended
// unanswered, or "".
func (e *event) resolution() string {
	var outcome struct {
		OptionID string `json:"optionId"`
	}
	if e.Status == events.PermissionAccepted && json.Unmarshal(e.Outcome, &outcome) == nil && outcome.OptionID != "" {
		return outcome.OptionID
	}
	var reason string
	if json.Unmarshal(e.Reason, &reason) == nil {
		return reason
	}
	return ""
}

type planEntry struct {
	Content string `json:"content"`
	Status  string `json:"status"`
}

// text returns the text of a text content block, and whether it is one.
func (e *event) text() (string, bool) {
	var block struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if len(e.Content) == 0 || json.Unmarshal(e.Content, &block) != nil || block.Type != "text" {
		return "", false
	}
	return block.Text, true
}

// contentType returns the type of a content block, or "".
func (e *event) contentType() string {
	var block struct {
		Type string `json:"type"`
	}
	if len(e.Content) == 0 || json.Unmarshal(e.Content, &block) != nil {
		return ""
	}
	return block.Type
}

// planMark returns the checkbox of a plan entry status.
func planMark(status string) string {
	switch status {
	case "completed":
		return "[x]"
	case "in_progress":
		return "[~]"
	default:
		return "[ ]"
	}
}

// printer renders a turn live: the agent's reply as it streams, tool calls
// and plans as lines of their own.
//
// Message text arrives twice: as ephemeral deltas while the agent writes,
// and as the durable completed message. The printer prints the deltas and,
// when the durable message comes, only what the deltas missed (a stream
// that joined late or was cut off); a message whose deltas were all seen
// prints nothing more.
type printer struct {
	w         io.Writer
	session   string // named in the hint to answer a permission request
	lineStart bool
	streamed  strings.Builder   // text printed from deltas of the current message
	titles    map[string]string // tool call ID → title
	err       error             // the first write error
}

// missedNote introduces a message printed again, whole, because the live
// stream missed part of it.
const missedNote = "[the live stream missed part of this message; all of it:]"

func newPrinter(w io.Writer) *printer {
	return &printer{w: w, lineStart: true, titles: map[string]string{}}
}

func (p *printer) write(s string) {
	if s == "" || p.err != nil {
		return
	}
	_, p.err = io.WriteString(p.w, s)
	p.lineStart = strings.HasSuffix(s, "\n")
}

// line prints s on a line of its own.
func (p *printer) line(s string) {
	if !p.lineStart {
		p.write("\n")
	}
	p.write(s + "\n")
}

// finish ends the last line.
func (p *printer) finish() error {
	if !p.lineStart {
		p.write("\n")
	}
	return p.err
}

// render prints one event.
func (p *printer) render(e *event) {
	switch e.Type {
	case acp.UpdateAgentMessageChunk:
		text, ok := e.text()
		if !ok {
			return
		}
		if e.Durability == events.DurabilityEphemeral {
			p.write(text)
			p.streamed.WriteString(text)
			return
		}
		// The completed message: print what the deltas did not.
		seen := p.streamed.String()
		p.streamed.Reset()
		switch {
		case strings.HasPrefix(text, seen):
			// The deltas were its start, or there were none.
			p.write(text[len(seen):])
		case strings.HasPrefix(seen, text):
			// One part of a message split to fit the log: the deltas
			// covered it, and the rest of them the parts to come.
			p.streamed.WriteString(seen[len(text):])
		default:
			// A delta in the middle was lost (live deltas are best
			// effort: one published as a NATS node died, say). What was
			// printed cannot be taken back: the whole message follows.
			p.line(missedNote)
			p.write(text)
		}
	case acp.UpdateToolCall:
		if e.ToolCallID != "" {
			p.titles[e.ToolCallID] = e.Title
		}
		p.line(fmt.Sprintf("[tool] %s: %s", orDefault(e.Title, e.ToolCallID), orDefault(e.Status, "pending")))
	case acp.UpdateToolCallUpdate:
		if e.Title != "" {
			p.titles[e.ToolCallID] = e.Title
		}
		if e.Status == "" {
			return // content or title changes only
		}
		p.line(fmt.Sprintf("[tool] %s: %s", orDefault(p.titles[e.ToolCallID], e.ToolCallID), e.Status))
	case acp.UpdatePlan:
		p.line("[plan]")
		for _, entry := range e.Entries {
			p.line("  " + planMark(entry.Status) + " " + entry.Content)
		}
	case events.PublicTypePermissionRequest:
		p.line(fmt.Sprintf("[permission] %s (request %s)", e.toolTitle(), e.RequestID))
		for i, o := range e.permissionOptions() {
			p.line(fmt.Sprintf("  %d. %s: %s (%s)", i+1, o.OptionID, orDefault(o.Name, o.OptionID), orDefault(o.Kind, "?")))
		}
		hint := "  answer: skein respond " + e.RequestID + " <optionId>"
		if p.session != "" && p.session != defaultSession {
			hint += " -s " + p.session
		}
		p.line(hint)
	case events.PublicTypePermissionResponse:
		detail := e.resolution()
		if detail != "" {
			detail = " (" + detail + ")"
		}
		p.line(fmt.Sprintf("[permission] request %s: %s%s", e.RequestID, e.Status, detail))
	case events.PublicTypeInputRequest, events.PublicTypeInputResponse:
		p.input(e)
	}
	// user_message_chunk (the prompt itself), thoughts and the rest
	// (available commands, modes, ...) are not part of the reply.
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// oneLine returns the readable one-line form of an event: sequence,
// timestamp, type and a summary.
func oneLine(e *event) string {
	var summary string
	switch e.Type {
	case acp.UpdateUserMessageChunk, acp.UpdateAgentMessageChunk, acp.UpdateAgentThoughtChunk:
		if text, ok := e.text(); ok {
			summary = strconv.Quote(text)
		} else {
			summary = "<" + orDefault(e.contentType(), "content") + ">"
		}
	case acp.UpdateToolCall:
		summary = fmt.Sprintf("%s %q %s", e.ToolCallID, e.Title, orDefault(e.Status, "pending"))
	case acp.UpdateToolCallUpdate:
		summary = strings.TrimSpace(e.ToolCallID + " " + e.Status)
	case acp.UpdatePlan:
		parts := make([]string, len(e.Entries))
		for i, entry := range e.Entries {
			parts[i] = planMark(entry.Status) + " " + strconv.Quote(entry.Content)
		}
		summary = strings.Join(parts, " ")
	case events.PublicTypePermissionRequest:
		summary = e.RequestID
		if e.ToolCall != nil {
			summary += " " + strconv.Quote(e.ToolCall.Title)
		}
	case events.PublicTypePermissionResponse:
		summary = e.RequestID + " " + e.Status
	case events.PublicTypeInputRequest:
		summary = e.RequestID + " " + strconv.Quote(rawString(e.Message))
	case events.PublicTypeInputResponse:
		summary = strings.TrimSpace(e.RequestID + " " + e.Status + " " + rawString(e.Action))
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s %s %s", e.Sequence, e.Timestamp, e.Type, summary))
}
