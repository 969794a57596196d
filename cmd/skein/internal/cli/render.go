package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"skein.dev/pkg/events"
)

// ACP session update types the commands render (the public "type").
const (
	typeUserMessage    = "user_message_chunk"
	typeAgentMessage   = "agent_message_chunk"
	typeAgentThought   = "agent_thought_chunk"
	typeToolCall       = "tool_call"
	typeToolCallUpdate = "tool_call_update"
	typePlan           = "plan"
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
	lineStart bool
	streamed  strings.Builder   // text printed from deltas of the current message
	titles    map[string]string // tool call ID → title
	err       error             // the first write error
}

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
	case typeAgentMessage:
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
			p.write(text[len(seen):])
		case seen == "":
			p.write(text)
		}
	case typeToolCall:
		if e.ToolCallID != "" {
			p.titles[e.ToolCallID] = e.Title
		}
		p.line(fmt.Sprintf("[tool] %s: %s", orDefault(e.Title, e.ToolCallID), orDefault(e.Status, "pending")))
	case typeToolCallUpdate:
		if e.Title != "" {
			p.titles[e.ToolCallID] = e.Title
		}
		if e.Status == "" {
			return // content or title changes only
		}
		p.line(fmt.Sprintf("[tool] %s: %s", orDefault(p.titles[e.ToolCallID], e.ToolCallID), e.Status))
	case typePlan:
		p.line("[plan]")
		for _, entry := range e.Entries {
			p.line("  " + planMark(entry.Status) + " " + entry.Content)
		}
	case events.PublicTypePermissionRequest:
		title := e.RequestID
		if e.ToolCall != nil && e.ToolCall.Title != "" {
			title = e.ToolCall.Title
		}
		p.line(fmt.Sprintf("[permission] %s: waiting for a decision (request %s)", title, e.RequestID))
	case events.PublicTypePermissionResponse:
		p.line(fmt.Sprintf("[permission] request %s: %s", e.RequestID, e.Status))
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
	case typeUserMessage, typeAgentMessage, typeAgentThought:
		if text, ok := e.text(); ok {
			summary = strconv.Quote(text)
		} else {
			summary = "<" + orDefault(e.contentType(), "content") + ">"
		}
	case typeToolCall:
		summary = fmt.Sprintf("%s %q %s", e.ToolCallID, e.Title, orDefault(e.Status, "pending"))
	case typeToolCallUpdate:
		summary = strings.TrimSpace(e.ToolCallID + " " + e.Status)
	case typePlan:
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
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s %s %s", e.Sequence, e.Timestamp, e.Type, summary))
}
