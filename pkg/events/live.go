package events

// EphemeralUpdates is several live deltas of one session in one message on
// LiveSubject: the chunks of one AdapterUpdates burst with nothing durable
// between them, each shown as an AcpEphemeralSessionUpdateEvent of the same
// SessionID and AfterSequence is; a lone delta travels as one. A Skein
// record, not the schema's: deltas are best effort.
type EphemeralUpdates struct {
	SessionID     string `msgpack:"sessionId"`
	AfterSequence uint64 `msgpack:"afterSequence"`
	Updates       []JSON `msgpack:"updates"`
}

// Deltas returns the live deltas v carries, in order: one for an
// AcpEphemeralSessionUpdateEvent, each update of an
// EphemeralUpdates, none for any other variant.
func Deltas(v Variant) []AcpEphemeralSessionUpdateEvent {
	switch v := v.(type) {
	case *AcpEphemeralSessionUpdateEvent:
		return []AcpEphemeralSessionUpdateEvent{*v}
	case *EphemeralUpdates:
		out := make([]AcpEphemeralSessionUpdateEvent, len(v.Updates))
		for i, u := range v.Updates {
			out[i] = AcpEphemeralSessionUpdateEvent{SessionID: v.SessionID, AfterSequence: v.AfterSequence, Update: u}
		}
		return out
	}
	return nil
}

// RecordEphemeralUpdates is the HeaderRecord of an
// EphemeralUpdates.
const RecordEphemeralUpdates = "EphemeralUpdates"

func (EphemeralUpdates) VariantName() string { return RecordEphemeralUpdates }

func init() {
	register(func() Variant { return new(EphemeralUpdates) })
}

// TurnEndUnrecorded says, on EndNoticeSubject, that the owner ended a
// turn whose TurnFinished a full store refuses (Error: storage_full). The
// owner holds the record, appends it first once the store takes writes,
// and repeats this every few seconds until then: a caller waiting for
// the turn (package turnwait) takes it as the TurnFinished. Skein's own.
type TurnEndUnrecorded struct {
	SessionID string            `msgpack:"sessionId"`
	TurnID    string            `msgpack:"turnId"`
	Outcome   string            `msgpack:"outcome"`
	Error     *AcpErrorResponse `msgpack:"error,omitempty"`
}

// RecordTurnEndUnrecorded is the HeaderRecord of a TurnEndUnrecorded.
const RecordTurnEndUnrecorded = "TurnEndUnrecorded"

func (TurnEndUnrecorded) VariantName() string { return RecordTurnEndUnrecorded }

func init() {
	register(func() Variant { return new(TurnEndUnrecorded) })
}
