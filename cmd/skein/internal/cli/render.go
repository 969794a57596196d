package cli

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// event is the part of an event's public JSON (eventjson.Durable,
// eventjson.Ephemeral) that the commands read.
type event struct {
	SessionID     string          `json:"sessionId"`
	Sequence      uint64          `json:"sequence"`
	AfterSequence uint64          `json:"afterSequence"`
	Timestamp     string          `json:"timestamp"`
	Durability    string          `json:"durability"`
	Type          string          `json:"type"`
	Principal     string          `json:"principal"`
	Content       json.RawMessage `json:"content"`
	ToolCallID    string          `json:"toolCallId"`
	Title         string          `json:"title"`
	Status        string          `json:"status"`
	Entries       []planEntry     `json:"entries"`
	RequestID     string          `json:"requestId"`
	ToolCall      *toolCallInfo   `json:"toolCall"`
	Kind          string          `json:"kind"`
	RawInput      json.RawMessage `json:"rawInput"`
	RawOutput     json.RawMessage `json:"rawOutput"`
	EventNo       uint64          `json:"eventNo"`
	MessageID     string          `json:"messageId"`
	// Fields of a usage_update, read only for it.
	Used *uint64 `json:"used"`
	Size *uint64 `json:"size"`
	// Fields of the permission events, decoded only for them (options,
	// reason): an agent's own update may use the same names differently.
	Options json.RawMessage `json:"options"`
	Reason  json.RawMessage `json:"reason"`
	Outcome json.RawMessage `json:"outcome"`
	// Fields of the input events (answer.go), raw for the same reason.
	Message json.RawMessage `json:"message"`
	Action  json.RawMessage `json:"action"`
}

// toolCallInfo is the tool call of a permission request.
type toolCallInfo struct {
	Title    string          `json:"title"`
	Kind     string          `json:"kind"`
	Content  json.RawMessage `json:"content"`
	RawInput json.RawMessage `json:"rawInput"`
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

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// oneLine returns the readable one-line form of an event: sequence,
// timestamp, type and a summary.
func oneLine(e *event) string {
	return strings.TrimSpace(fmt.Sprintf("%d %s %s %s", e.Sequence, e.Timestamp, e.Type, summary(e)))
}

// EventLine returns the readable one-line form of an event's public JSON:
// sequence, timestamp, type and a summary (skein follow's human output).
func EventLine(raw []byte) (string, error) {
	var e event
	if err := decodeVisible(raw, &e); err != nil {
		return "", fmt.Errorf("decode event: %w", err)
	}
	return oneLine(&e), nil
}

// summary returns what an event says, on one line.
func summary(e *event) string {
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
	case eventjson.TypePermissionRequest:
		summary = e.RequestID
		if e.ToolCall != nil {
			summary += " " + strconv.Quote(e.ToolCall.Title)
		}
	case eventjson.TypePermissionResponse:
		summary = e.RequestID + " " + e.Status
	case eventjson.TypeInputRequest:
		summary = e.RequestID + " " + strconv.Quote(rawString(e.Message))
	case "usage_update":
		if e.Used != nil && e.Size != nil {
			summary = fmt.Sprintf("%d/%d", *e.Used, *e.Size)
		}
	case eventjson.TypeInputResponse:
		summary = strings.TrimSpace(e.RequestID + " " + e.Status + " " + rawString(e.Action))
	}
	return summary
}
