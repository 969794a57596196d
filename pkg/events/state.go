package events

import (
	"encoding/json"
	"fmt"
)

// SessionStatus is the status of a session, derived from its log: the
// "status" member of AcpDurableSessionInfo.state.
type SessionStatus string

// Session statuses.
const (
	// StatusIdle: no turn runs, and the last one did not fail.
	StatusIdle SessionStatus = "idle"
	// StatusRunning: a turn is open.
	StatusRunning SessionStatus = "running"
	// StatusWaiting: the agent waits for answers to the permission
	// requests in Requests or the input requests in Inputs: the open
	// turn's, or ones it raised outside any turn (TurnID empty then, when
	// no turn is open).
	StatusWaiting SessionStatus = "waiting"
	// StatusFailed: no turn runs, and the last one failed (Error says how).
	StatusFailed SessionStatus = "failed"
	// StatusStalled: a turn is open, no request waits on a person, and
	// its agent has said nothing for session.stall-after.
	StatusStalled SessionStatus = "stalled"
)

// SessionState is AcpDurableSessionInfo.state: written by the session
// service (the owner of the session's projection), read by everyone else.
// Its JSON is the public shape of getSession's state.
type SessionState struct {
	Status SessionStatus `json:"status"`
	// TurnID names the open turn (running, or waiting with one open).
	TurnID string `json:"turnId,omitempty"`
	// Requests are the pending permission requests, those raised outside
	// any turn first, then the open turn's, each oldest first (waiting).
	Requests []PendingPermission `json:"requests,omitempty"`
	// Inputs are the pending input requests (elicitations), in the order
	// of Requests (waiting), a Skein addition (input.go).
	Inputs []PendingInput `json:"inputs,omitempty"`
	// Error is the failed turn's error (failed).
	Error *StateError `json:"error,omitempty"`
}

// PendingPermission is one permission request waiting for an answer.
type PendingPermission struct {
	RequestID string `json:"requestId"`
	// Request is the ACP params as stored in the durable
	// permission_request event (no private session ID).
	Request JSON `json:"request"`
}

// StateError is a failed session's last error.
type StateError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// TurnOpen reports whether a turn runs (running, stalled, or waiting in one): a
// session that waits only on requests raised outside any turn runs none.
func (s *SessionState) TurnOpen() bool {
	return s.Status == StatusRunning || s.Status == StatusStalled || s.Status == StatusWaiting && s.TurnID != ""
}

// Encode returns the state's JSON. It fails only when a request's JSON is
// not valid JSON.
func (s *SessionState) Encode() (JSON, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode session state: %w", err)
	}
	return b, nil
}

// ParseSessionState decodes AcpDurableSessionInfo.state. An empty state
// is idle.
func ParseSessionState(data JSON) (*SessionState, error) {
	s := &SessionState{Status: StatusIdle}
	if len(data) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, Errorf(CodeInvalidPayload, "session state: %v", err)
	}
	switch s.Status {
	case StatusIdle, StatusRunning, StatusStalled, StatusWaiting, StatusFailed:
		return s, nil
	}
	return nil, Errorf(CodeInvalidPayload, "session state: unknown status %q", s.Status)
}
