package events

// What an agent offers and costs, cached in its session's projection so a
// client sees it without starting the agent: its last
// available_commands_update (SessionMeta.AvailableCommands), its last
// usage_update (AcpDurableSessionInfo.Usage) and each turn's timing
// (TurnFinished.Timing; the last in AcpDurableSessionInfo.LastTurnTiming).
// The updates are in the log; these are Skein's additions to the schema.

// MaxCommandsBytes bounds the cached command list, so that an agent's
// oversized list cannot make the session's projection too large to store.
// A larger list is not cached (the previous one stays), and the update is
// still in the log.
const MaxCommandsBytes = 256 << 10

// GetSessionCommandsRequest asks OpGetSessionCommands for a session's
// available commands. An omitted session ID means main.
type GetSessionCommandsRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

// Validate checks a getSessionCommands request: its session.
func (r *GetSessionCommandsRequest) Validate() (SessionID, error) {
	return OptionalSessionID(r.SessionID)
}

// SessionCommandsResponse answers OpGetSessionCommands: the commands of
// the agent's last available_commands_update, a JSON array of ACP
// AvailableCommand objects, each exactly as the agent wrote it (items
// without a string name and description are left out, as ACP's
// skip-invalid-items says). Empty when the agent has reported none.
type SessionCommandsResponse struct {
	Commands JSON `msgpack:"commands,omitempty"`
}

// CommandsResponse returns the cached commands as OpGetSessionCommands
// answers them.
func (m *SessionMeta) CommandsResponse() *SessionCommandsResponse {
	return &SessionCommandsResponse{Commands: m.AvailableCommands}
}

// SessionUsage is the agent's last usage_update: Used tokens of a context
// window of Size, and Cost, the session's cumulative cost when the agent
// gave one: {"amount": <number as the agent wrote it>, "currency": <string>}
// (the agent's _meta left out).
type SessionUsage struct {
	Used uint64 `msgpack:"used"`
	Size uint64 `msgpack:"size"`
	Cost JSON   `msgpack:"cost,omitempty"`
}

// TurnTiming is a turn's timing in milliseconds from its acceptance (the
// append of the user's message), measured by the session service that
// accepted it: DispatchMs until the runner confirmed the prompt was on the
// agent's stdin, FirstReplyMs until the first agent message chunk with
// text, FinishedMs until the turn's end was recorded. A field that is nil
// was not observed (a turn taken over by another replica, a prompt never
// delivered, a turn with no text); 0 is a measurement.
type TurnTiming struct {
	DispatchMs   *uint64 `msgpack:"dispatchMs,omitempty"`
	FirstReplyMs *uint64 `msgpack:"firstReplyMs,omitempty"`
	FinishedMs   *uint64 `msgpack:"finishedMs,omitempty"`
}

func (GetSessionCommandsRequest) VariantName() string { return "GetSessionCommandsRequest" }
func (SessionCommandsResponse) VariantName() string   { return "SessionCommandsResponse" }

func init() {
	register(func() Variant { return new(GetSessionCommandsRequest) })
	register(func() Variant { return new(SessionCommandsResponse) })
}
