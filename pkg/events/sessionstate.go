package events

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Session state events: a Skein addition beyond the seed's durable union.
// Every viewer of a session learns where each turn began and ended, and
// how, from the same log records the session service wrote; nothing is
// stored for them. A state change is derived from one log record
// (StateChangeOf), the same way wherever the record was read: the
// gateway's live feed from the stream's RePublish, the history service
// from direct gets. So a live viewer and one replaying history see the
// same changes, byte for byte.
//
// The records that change a session's state, and the change each causes:
//
//   - the accepting record of a turn (HeaderTurnAccepted, a durable
//     user-message event): turn_accepted, status running;
//   - a durable permission_request or input_request event: waiting,
//     status waiting, waitingFor naming the request;
//   - TurnFinished: turn_finished, status idle (completed or cancelled,
//     with the stop reason) or failed (with the error). A cancelled or
//     failed turn's change says discardDeltas: every viewer drops the
//     ephemeral deltas it showed for the turn, which no durable message
//     completes;
//   - SessionUnloaded: unloaded;
//   - an adapter's exit nobody asked for (AcpAgentExitedEvent):
//     adapter_exited.
//
// A change caused by a durable event has that event's sequence, and is
// shown just before it; one caused by a control record has the record's
// sequence, which no durable event has.

// PublicTypeSessionState is the public type of a state change. It is
// reserved: an agent's session update of this type is dropped, as one that
// names a permission event is.
const PublicTypeSessionState = "session_state"

// State changes: SessionStateChange.Change.
const (
	ChangeTurnAccepted  = "turn_accepted"
	ChangeTurnFinished  = "turn_finished"
	ChangeWaiting       = "waiting"
	ChangeUnloaded      = "unloaded"
	ChangeAdapterExited = "adapter_exited"
)

// Kinds of what a waiting session waits for: WaitingFor.Kind.
const (
	WaitingPermission = "permission"
	WaitingInput      = "input"
)

// SessionStateChange is one change of a session's state, derived from the
// log record whose sequence its history entry carries. It joins the
// AcpDurableEvent union so that a history page can interleave it among the
// events (AcpReadHistoryRequest.IncludeState); it is never stored.
type SessionStateChange struct {
	Change string `msgpack:"change"`
	// Status is the session's status after the change, as getSession
	// would answer it then.
	Status SessionStatus `msgpack:"status"`
	// TurnID names the turn the change belongs to, if any.
	TurnID string `msgpack:"turnId,omitempty"`
	// StopReason is a completed or cancelled turn's (turn_finished).
	StopReason string `msgpack:"stopReason,omitempty"`
	// Error is a failed turn's (turn_finished).
	Error *StateChangeError `msgpack:"error,omitempty"`
	// DiscardDeltas: the turn was cancelled or failed, and the deltas
	// shown for it are to be dropped (turn_finished).
	DiscardDeltas bool `msgpack:"discardDeltas,omitempty"`
	// WaitingFor names the request the session waits for (waiting).
	WaitingFor *WaitingFor `msgpack:"waitingFor,omitempty"`
}

// StateChangeError is a failed turn's error in a state change.
type StateChangeError struct {
	Code    string `msgpack:"code"`
	Message string `msgpack:"message"`
}

// WaitingFor is what a waiting session waits for: the request whose
// durable event has the change's sequence.
type WaitingFor struct {
	Kind      string `msgpack:"kind"`
	RequestID string `msgpack:"requestId"`
}

func (SessionStateChange) VariantName() string { return "SessionStateChange" }
func (SessionStateChange) isAcpDurableEvent()  {}

func init() { register(func() Variant { return new(SessionStateChange) }) }

// CausedByEvent reports whether the change was caused by a durable event
// (it has that event's sequence, and precedes it) rather than by a control
// record (whose sequence is its own).
func (c *SessionStateChange) CausedByEvent() bool {
	return c.Change == ChangeTurnAccepted || c.Change == ChangeWaiting
}

// StateChangeOf returns the state change that the stored log record with
// headers hdr and payload data causes, or nil when it changes nothing.
//
// The status after an unload or an adapter exit outside a turn is what it
// was before: failed when the session's last turn failed, else idle.
// lastFailed answers that; it is called only then, and may read the log.
// Inside a turn (the record carries HeaderTurnID) the status is running:
// the turn's TurnFinished follows and says how it ended.
func StateChangeOf(hdr nats.Header, data []byte, lastFailed func() (bool, error)) (*SessionStateChange, error) {
	turnID := hdr.Get(HeaderTurnID)
	switch kind := hdr.Get(HeaderRecord); kind {
	case AcpDurableSessionUpdate{}.VariantName():
		if hdr.Get(HeaderTurnAccepted) == "" {
			return nil, nil
		}
		return &SessionStateChange{Change: ChangeTurnAccepted, Status: StatusRunning, TurnID: turnID}, nil
	case AcpDurablePermissionRequest{}.VariantName(), InputRequest{}.VariantName():
		v, err := Unmarshal(data)
		if err != nil {
			return nil, err
		}
		w := &WaitingFor{}
		switch r := v.(type) {
		case *AcpDurablePermissionRequest:
			w.Kind, w.RequestID = WaitingPermission, r.RequestID
		case *InputRequest:
			w.Kind, w.RequestID = WaitingInput, r.RequestID
		default:
			return nil, Errorf(CodeInvalidPayload, "record marked %s holds %s", kind, v.VariantName())
		}
		return &SessionStateChange{Change: ChangeWaiting, Status: StatusWaiting, TurnID: turnID, WaitingFor: w}, nil
	case RecordTurnFinished:
		f, err := Decode[TurnFinished](data)
		if err != nil {
			return nil, err
		}
		c := &SessionStateChange{Change: ChangeTurnFinished, Status: StatusIdle, TurnID: f.TurnID, StopReason: f.StopReason}
		switch {
		case f.Failed():
			e := f.Failure()
			c.Status, c.DiscardDeltas, c.StopReason = StatusFailed, true, ""
			c.Error = &StateChangeError{Code: e.Code, Message: e.Message}
		case f.Outcome == OutcomeCancelled:
			c.DiscardDeltas = true
		}
		return c, nil
	case RecordSessionUnloaded, RecordAgentExited:
		c := &SessionStateChange{Change: ChangeUnloaded, Status: StatusIdle, TurnID: turnID}
		if kind == RecordAgentExited {
			c.Change = ChangeAdapterExited
		}
		if turnID != "" {
			c.Status = StatusRunning
			return c, nil
		}
		failed, err := lastFailed()
		if err != nil {
			return nil, err
		}
		if failed {
			c.Status = StatusFailed
		}
		return c, nil
	}
	return nil, nil
}

// ControlStateRecord reports whether a control record with headers hdr
// (one not on the LogEvents subject) may change the session's state: a
// cheap look, before anything is read or decoded for it.
func ControlStateRecord(hdr nats.Header) bool {
	switch hdr.Get(HeaderRecord) {
	case RecordTurnFinished, RecordSessionUnloaded, RecordAgentExited:
		return true
	}
	return false
}

// StateEntry returns the history entry of change c, caused by the record
// at seq stored at stored.
func StateEntry(sid SessionID, seq uint64, stored time.Time, c *SessionStateChange) *AcpDurableHistoryEntry {
	return &AcpDurableHistoryEntry{
		SessionID: string(sid),
		Sequence:  seq,
		Timestamp: stored.UTC().Format(TimestampFormat),
		Event:     Union[AcpDurableEvent]{V: c},
	}
}

// StateTracker follows a session's records in log order and derives their
// state changes, remembering whether the last turn it saw failed, so that
// it asks its lookup (which reads the log) at most once, and only for an
// unload or an exit outside a turn before it has seen a turn end.
type StateTracker struct {
	// Lookup reports whether the session's last turn before the record at
	// seq failed.
	Lookup func(seq uint64) (bool, error)
	known  bool
	failed bool
}

// Change is StateChangeOf for the record at seq, which must follow every
// record the tracker was given before.
func (t *StateTracker) Change(seq uint64, hdr nats.Header, data []byte) (*SessionStateChange, error) {
	c, err := StateChangeOf(hdr, data, func() (bool, error) {
		if !t.known && t.Lookup != nil {
			failed, err := t.Lookup(seq)
			if err != nil {
				return false, err
			}
			t.known, t.failed = true, failed
		}
		return t.failed, nil
	})
	if err != nil || c == nil {
		return c, err
	}
	switch c.Change {
	case ChangeTurnAccepted:
		t.known, t.failed = true, false
	case ChangeTurnFinished:
		t.known, t.failed = true, c.Status == StatusFailed
	}
	return c, nil
}

// publicStateJSON renders a state change's history entry:
//
//	{"sessionId","sequence","timestamp","durability":"durable","type":"session_state",
//	 "change","status","turnId"?,"stopReason"?,"error"?:{"code","message"},
//	 "discardDeltas"?:true,"waitingFor"?:{"kind","requestId"}}
func publicStateJSON(e *AcpDurableHistoryEntry, c *SessionStateChange) []byte {
	b := make([]byte, 0, 256)
	b = append(b, `{"sessionId":`...)
	b = appendJSONString(b, e.SessionID)
	b = append(b, `,"sequence":`...)
	b = strconv.AppendUint(b, e.Sequence, 10)
	b = append(b, `,"timestamp":`...)
	b = appendJSONString(b, e.Timestamp)
	b = append(b, `,"durability":"`+DurabilityDurable+`","type":"`+PublicTypeSessionState+`","change":`...)
	b = appendJSONString(b, c.Change)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(c.Status))
	if c.TurnID != "" {
		b = append(b, `,"turnId":`...)
		b = appendJSONString(b, c.TurnID)
	}
	if c.StopReason != "" {
		b = append(b, `,"stopReason":`...)
		b = appendJSONString(b, c.StopReason)
	}
	if c.Error != nil {
		b = append(b, `,"error":{"code":`...)
		b = appendJSONString(b, c.Error.Code)
		b = append(b, `,"message":`...)
		b = appendJSONString(b, c.Error.Message)
		b = append(b, '}')
	}
	if c.DiscardDeltas {
		b = append(b, `,"discardDeltas":true`...)
	}
	if c.WaitingFor != nil {
		b = append(b, `,"waitingFor":{"kind":`...)
		b = appendJSONString(b, c.WaitingFor.Kind)
		b = append(b, `,"requestId":`...)
		b = appendJSONString(b, c.WaitingFor.RequestID)
		b = append(b, '}')
	}
	return append(b, '}')
}
