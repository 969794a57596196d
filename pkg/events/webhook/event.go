package webhook

import (
	"encoding/json"
	"strconv"
	"time"
)

// Body is a notification as a webhook receives it and ACP_NOTIFY stores
// it: {"type", "timestamp", "data": {"sessionId", ...}}.
type Body struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"` // RFC 3339, UTC: when the log stored the record
	Data      Data   `json:"data"`
}

// Data is a notification's data. Which fields are set depends on Type.
type Data struct {
	SessionID string `json:"sessionId"`
	// Sequence is the ACP_LOG sequence of the record the notification
	// comes from: history after it is what happened next.
	Sequence   uint64 `json:"sequence"`
	TurnID     string `json:"turnId,omitempty"`
	Outcome    string `json:"outcome,omitempty"`    // turn.finished: completed or cancelled
	StopReason string `json:"stopReason,omitempty"` // turn.finished
	ErrorCode  string `json:"errorCode,omitempty"`  // turn.failed
	Message    string `json:"message,omitempty"`    // turn.failed: the error's message
	RequestID  string `json:"requestId,omitempty"`  // session.waiting
	Kind       string `json:"kind,omitempty"`       // session.waiting: "permission" or "input"
	QuietMs    int64  `json:"quietMs,omitempty"`    // session.stalled
}

// Kinds of session.waiting.
const (
	KindPermission = "permission"
	KindInput      = "input"
)

// EventID returns the notification ID of the log record at seq: the
// webhook-id of every attempt, and the Nats-Msg-Id of its ACP_NOTIFY
// message. One record raises at most one notification.
func EventID(seq uint64) string { return "msg_" + strconv.FormatUint(seq, 10) }

// Marshal returns the body's JSON.
func (b *Body) Marshal() ([]byte, error) { return json.Marshal(b) }

// NewBody returns a body of type typ for a record stored at stored.
func NewBody(typ string, stored time.Time, d Data) *Body {
	return &Body{Type: typ, Timestamp: stored.UTC().Format(time.RFC3339Nano), Data: d}
}
