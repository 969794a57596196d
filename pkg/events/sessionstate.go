package events

// Session state events: a Skein addition beyond the seed's durable union.
// A SessionStateChange is derived from one log record, never stored; package
// sessionstate derives it.

// State changes: SessionStateChange.Change.
const (
	ChangeTurnAccepted  = "turn_accepted"
	ChangeTurnFinished  = "turn_finished"
	ChangeWaiting       = "waiting"
	ChangeUnloaded      = "unloaded"
	ChangeAdapterExited = "adapter_exited"
	ChangeStalled       = "stalled"  // TurnStall: the turn's agent went silent
	ChangeResumed       = "resumed"  // TurnStall: it spoke again
	ChangeQueued        = "queued"   // PromptQueued
	ChangeDequeued      = "dequeued" // PromptDequeued
)

// Kinds of what a waiting session waits for: WaitingFor.Kind.
const (
	WaitingPermission = "permission"
	WaitingInput      = "input"
)

// SessionStateChange is one change of a session's state, derived from the
// log record its history entry names; never stored, it joins
// AcpDurableEvent to be interleaved in history (IncludeState).
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
	// Queue names the queue entry (queued, dequeued).
	Queue *QueueChange `msgpack:"queue,omitempty"`
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
