package events

// What an agent offers and what it costs, kept so that a client can see it
// without starting the agent:
//
//   - its commands: the last available_commands_update (ACP's slash
//     commands and skills), cached in SessionMeta.AvailableCommands and
//     served by OpGetSessionCommands from ACP_SESSIONS alone;
//   - its usage: the last usage_update (tokens in the context, the context
//     window, the session's cost when the agent gives one), shown in the
//     session's info (AcpDurableSessionInfo.Usage), so in getSession and in
//     every listSessions row;
//   - the timing of each turn, as the session service measured it: in the
//     turn's TurnFinished (Timing), and the last one in the session's info
//     (AcpDurableSessionInfo.LastTurnTiming).
//
// The updates themselves are public events of the session's log like any
// other; these are caches of the newest, kept by the session's owner in its
// projection. The schema has none of this: the request, the response and
// the info's two fields are Skein's own additions.

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
