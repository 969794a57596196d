package events

// The prompt queue, a Skein addition: a prompt sent with Queue while a turn
// runs waits in the session's log, in order, and runs as its own turn when
// the turns before it end. Each entry's records are on its own subject
// (QueueSubject): PromptQueued, then one PromptDequeued, so the newest
// record of each subject says what waits.

// QueueSubject returns "acp.log.<ns>.<sid>.queue.<qid>", where the records
// of one queue entry are stored.
func QueueSubject(ns Namespace, sid SessionID, qid string) string {
	return join("acp.log", string(ns), string(sid), "queue", qid)
}

// QueueSubjects returns "acp.log.<ns>.<sid>.queue.*": every QueueSubject of
// one session.
func QueueSubjects(ns Namespace, sid SessionID) string {
	return join("acp.log", string(ns), string(sid), "queue", "*")
}

// PromptQueued records a prompt put in the queue, by the principal its
// HeaderPrincipal names. Status is the session's status as it was queued.
type PromptQueued struct {
	QueueID        string        `msgpack:"queueId"`
	Position       uint32        `msgpack:"position"` // 1 for the next to run
	Content        JSON          `msgpack:"content"`
	ContentHash    string        `msgpack:"contentHash"`
	IdempotencyKey *string       `msgpack:"idempotencyKey,omitempty"`
	Status         SessionStatus `msgpack:"status"`
}

// PromptDequeued records a queue entry leaving the queue: started as TurnID
// (in the same atomic append as the turn's acceptance), withdrawn, or
// failed to start (Error).
type PromptDequeued struct {
	QueueID string            `msgpack:"queueId"`
	Reason  string            `msgpack:"reason"`
	TurnID  string            `msgpack:"turnId,omitempty"`
	Error   *AcpErrorResponse `msgpack:"error,omitempty"`
	Status  SessionStatus     `msgpack:"status"`
}

// Reasons of PromptDequeued.
const (
	DequeueStarted   = "started"
	DequeueWithdrawn = "withdrawn"
	DequeueFailed    = "failed"
)

// QueuedPrompt is one waiting entry as a session's info lists it. Its
// IdempotencyKey is the owner's, for the turn it starts; no reader shows it.
type QueuedPrompt struct {
	ID             string  `msgpack:"id"`
	Position       uint32  `msgpack:"position"`
	Content        JSON    `msgpack:"content"`
	Principal      string  `msgpack:"principal,omitempty"`
	QueuedAt       string  `msgpack:"queuedAt"`
	IdempotencyKey *string `msgpack:"idempotencyKey,omitempty"`
}

// QueueChange is what a queued or dequeued state change says of the entry.
type QueueChange struct {
	ID       string `msgpack:"id"`
	Position uint32 `msgpack:"position,omitempty"`
	Reason   string `msgpack:"reason,omitempty"`
}

// WithdrawPromptRequest asks OpWithdrawPrompt to take a waiting entry out of
// a session's queue; PromptWithdrawn answers it.
type WithdrawPromptRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
	QueueID   string  `msgpack:"queueId"`
}

type PromptWithdrawn struct {
	QueueID string `msgpack:"queueId"`
}

// Validate checks the request's IDs.
func (r *WithdrawPromptRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if !validQueueID(r.QueueID) {
		return "", Errorf(CodeInvalidRequest, "queue entry ID %.64q is not one", r.QueueID)
	}
	return sid, nil
}

// validQueueID: a queue entry's ID is "q_" and 22 letters or digits (a NUID).
func validQueueID(s string) bool {
	if len(s) != 24 || s[:2] != "q_" {
		return false
	}
	for _, c := range []byte(s[2:]) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

const (
	RecordPromptQueued   = "PromptQueued"
	RecordPromptDequeued = "PromptDequeued"
)

func (PromptQueued) VariantName() string          { return RecordPromptQueued }
func (PromptDequeued) VariantName() string        { return RecordPromptDequeued }
func (WithdrawPromptRequest) VariantName() string { return "WithdrawPromptRequest" }
func (PromptWithdrawn) VariantName() string       { return "PromptWithdrawn" }

func init() {
	register(func() Variant { return new(PromptQueued) })
	register(func() Variant { return new(PromptDequeued) })
	register(func() Variant { return new(WithdrawPromptRequest) })
	register(func() Variant { return new(PromptWithdrawn) })
}
