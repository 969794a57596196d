package events

// The types of the AgentOS ACP extension schema (agentos-protocol 0.2.15,
// schema version 1), one Go struct per schema struct and one interface per
// schema union. TestSchemaConformance parses the schema file and fails when a
// type, field, optional-ness or union member here drifts from it.
//
// Mapping: str → string; bool → bool; u32/u64/i32 → uint32/uint64/int32;
// data → []byte; JsonUtf8 → JSON (exact bytes); list<T> → []T;
// map<str><str> → map[string]string; optional<T> → *T, or JSON/slice with
// omitempty. Field tags are the schema's names.

// AcpRuntimeKind is the schema's enum of adapter runtimes.
type AcpRuntimeKind string

// The AcpRuntimeKind values.
const (
	RuntimeJavaScript  AcpRuntimeKind = "JAVA_SCRIPT"
	RuntimePython      AcpRuntimeKind = "PYTHON"
	RuntimeWebAssembly AcpRuntimeKind = "WEB_ASSEMBLY"
)

// AcpRequest is the schema's request union.
type AcpRequest interface {
	Variant
	isAcpRequest()
}

// AcpResponse is the schema's response union.
type AcpResponse interface {
	Variant
	isAcpResponse()
}

// AcpDurableEvent is the generic durable event union stored in ACP_LOG.
type AcpDurableEvent interface {
	Variant
	isAcpDurableEvent()
}

// AcpEvent is the schema's live event union.
type AcpEvent interface {
	Variant
	isAcpEvent()
}

// AcpCallback is the schema's host-callback union.
type AcpCallback interface {
	Variant
	isAcpCallback()
}

// AcpCallbackResponse is the answer to an AcpCallback.
type AcpCallbackResponse interface {
	Variant
	isAcpCallbackResponse()
}

// Legacy driver structs: the session service and the adapter-runner speak
// them to each other.

type AcpCreateSessionRequest struct {
	AgentType              string            `msgpack:"agentType"`
	Runtime                AcpRuntimeKind    `msgpack:"runtime"`
	Cwd                    string            `msgpack:"cwd"`
	AdditionalDirectories  []string          `msgpack:"additionalDirectories"`
	Args                   []string          `msgpack:"args"`
	Env                    map[string]string `msgpack:"env"`
	ProtocolVersion        int32             `msgpack:"protocolVersion"`
	ClientCapabilities     JSON              `msgpack:"clientCapabilities"`
	McpServers             JSON              `msgpack:"mcpServers"`
	SkipOsInstructions     bool              `msgpack:"skipOsInstructions"`
	AdditionalInstructions *string           `msgpack:"additionalInstructions,omitempty"`
}

type AcpSessionRequest struct {
	SessionID string `msgpack:"sessionId"`
	Method    string `msgpack:"method"`
	Params    JSON   `msgpack:"params,omitempty"`
}

type AcpListAgentsRequest struct {
	Reserved bool `msgpack:"reserved"`
}

type AcpAgentEntry struct {
	ID                string `msgpack:"id"`
	Installed         bool   `msgpack:"installed"`
	AdapterEntrypoint string `msgpack:"adapterEntrypoint"`
}

type AcpListAgentsResponse struct {
	Agents  []AcpAgentEntry `msgpack:"agents"`
	Runners []RunnerEntry   `msgpack:"runners,omitempty"` // Skein extension
}

// RunnerEntry is one live runner in AcpListAgentsResponse: what it
// offers, and what placement knows of it (RunnerInfo, without what only
// the session service needs).
type RunnerEntry struct {
	ID         string            `msgpack:"id"`
	Agents     []AcpAgentEntry   `msgpack:"agents"`
	Labels     map[string]string `msgpack:"labels,omitempty"`
	PlacedOnly bool              `msgpack:"placedOnly,omitempty"`
	Load       uint32            `msgpack:"load"`
	Capacity   uint32            `msgpack:"capacity"`
}

// The durable session API.

type AcpOpenSessionRequest struct {
	SessionID              *string    `msgpack:"sessionId,omitempty"`
	Agent                  string     `msgpack:"agent"`
	Cwd                    *string    `msgpack:"cwd,omitempty"`
	AdditionalDirectories  JSON       `msgpack:"additionalDirectories,omitempty"`
	Env                    JSON       `msgpack:"env,omitempty"`
	McpServers             JSON       `msgpack:"mcpServers,omitempty"`
	PermissionPolicy       *string    `msgpack:"permissionPolicy,omitempty"`
	SkipOsInstructions     *bool      `msgpack:"skipOsInstructions,omitempty"`
	AdditionalInstructions *string    `msgpack:"additionalInstructions,omitempty"`
	InputPolicy            *string    `msgpack:"inputPolicy,omitempty"` // Skein extension (input.go)
	Placement              *Placement `msgpack:"placement,omitempty"`   // Skein extension
	Budget                 *Budget    `msgpack:"budget,omitempty"`      // Skein extension (budget.go)
}

// Placement pins a session to one runner: named, or the least loaded of
// those with every label given. The session never moves off it.
type Placement struct {
	Runner *string           `msgpack:"runner,omitempty"`
	Labels map[string]string `msgpack:"labels,omitempty"`
}

type AcpGetDurableSessionRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

type AcpListDurableSessionsRequest struct {
	Cursor *string `msgpack:"cursor,omitempty"`
	Limit  *uint32 `msgpack:"limit,omitempty"`
}

type AcpDeleteSessionRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

type AcpUnloadSessionRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

type AcpPromptRequest struct {
	SessionID      *string `msgpack:"sessionId,omitempty"`
	IdempotencyKey *string `msgpack:"idempotencyKey,omitempty"`
	Content        JSON    `msgpack:"content"`
	Queue          bool    `msgpack:"queue,omitempty"` // a Skein addition (queue.go)
}

type AcpCancelPromptRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

type AcpRespondPermissionRequest struct {
	SessionID string `msgpack:"sessionId"`
	RequestID string `msgpack:"requestId"`
	OptionID  string `msgpack:"optionId"`
}

type AcpReadHistoryRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
	Before    *uint64 `msgpack:"before,omitempty"`
	After     *uint64 `msgpack:"after,omitempty"`
	Limit     *uint32 `msgpack:"limit,omitempty"`
	// IncludeState interleaves the session's state changes among the
	// events (SessionStateChange entries), a Skein extension
	// (sessionstate.go).
	IncludeState bool `msgpack:"includeState,omitempty"`
}

type AcpGetSessionConfigRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

type AcpGetSessionCapabilitiesRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

type AcpGetSessionAgentInfoRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

type AcpSetSessionConfigOptionRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
	ConfigID  string  `msgpack:"configId"`
	Value     JSON    `msgpack:"value"`
}

type AcpGetSessionStateRequest struct {
	SessionID string `msgpack:"sessionId"`
}

type AcpCloseSessionRequest struct {
	SessionID string `msgpack:"sessionId"`
}

type AcpResumeSessionRequest struct {
	SessionID             string            `msgpack:"sessionId"`
	AgentType             string            `msgpack:"agentType"`
	Runtime               AcpRuntimeKind    `msgpack:"runtime"`
	TranscriptPath        *string           `msgpack:"transcriptPath,omitempty"`
	Cwd                   string            `msgpack:"cwd"`
	AdditionalDirectories []string          `msgpack:"additionalDirectories"`
	McpServers            JSON              `msgpack:"mcpServers"`
	Env                   map[string]string `msgpack:"env"`
}

type AcpDeliverAgentOutputRequest struct {
	ProcessID string `msgpack:"processId"`
	Chunk     []byte `msgpack:"chunk"`
}

// Responses.

type AcpDurableSessionInfo struct {
	SessionID             string  `msgpack:"sessionId"`
	Agent                 string  `msgpack:"agent"`
	Cwd                   string  `msgpack:"cwd"`
	AdditionalDirectories JSON    `msgpack:"additionalDirectories"`
	State                 JSON    `msgpack:"state"`
	LatestSequence        uint64  `msgpack:"latestSequence"`
	Title                 *string `msgpack:"title,omitempty"`
	Metadata              JSON    `msgpack:"metadata,omitempty"`
	CreatedAt             string  `msgpack:"createdAt"`
	UpdatedAt             string  `msgpack:"updatedAt"`
	// Usage and LastTurnTiming are Skein additions, not in the schema
	// (offers.go): the agent's last usage_update, and the last turn's
	// timing as the session service measured it; nil when none is known.
	Usage          *SessionUsage `msgpack:"usage,omitempty"`
	LastTurnTiming *TurnTiming   `msgpack:"lastTurnTiming,omitempty"`
	// LogSequence, a Skein addition: the ACP_LOG sequence of the newest
	// record, of any kind, State reflects (the gateway's watch's cursor).
	LogSequence uint64 `msgpack:"logSequence,omitempty"`
	// Runner, a Skein addition: the runner a placed session is pinned to.
	Runner string `msgpack:"runner,omitempty"`
	// CreatedBy, a Skein addition: the principal that opened the session.
	CreatedBy string `msgpack:"createdBy,omitempty"`
	// Queue and QueueHeld, Skein additions (queue.go): the prompts waiting,
	// and whether they wait for the next prompt sent without queue.
	Queue     []QueuedPrompt `msgpack:"queued,omitempty"`
	QueueHeld bool           `msgpack:"queueHeld,omitempty"`
	// Budget, a Skein addition: the session's cap and spend (budget.go).
	Budget *BudgetInfo `msgpack:"budget,omitempty"`
}

type AcpOpenSessionResponse struct {
	Reserved bool `msgpack:"reserved"`
}

type AcpGetDurableSessionResponse struct {
	Session AcpDurableSessionInfo `msgpack:"session"`
}

type AcpListDurableSessionsResponse struct {
	Sessions   []AcpDurableSessionInfo `msgpack:"sessions"`
	NextCursor *string                 `msgpack:"nextCursor,omitempty"`
}

type AcpDeleteSessionResponse struct {
	Reserved bool `msgpack:"reserved"`
}

type AcpUnloadSessionResponse struct {
	Reserved bool `msgpack:"reserved"`
}

type AcpPromptResponse struct {
	SessionID  string `msgpack:"sessionId"`
	Message    JSON   `msgpack:"message,omitempty"`
	StopReason string `msgpack:"stopReason"`
}

type AcpCancelPromptResponse struct {
	Status string `msgpack:"status"`
}

type AcpRespondPermissionResponse struct {
	Status string  `msgpack:"status"`
	Reason *string `msgpack:"reason,omitempty"`
	// ResolvedBy, a Skein addition: a late answer's winner (principal).
	ResolvedBy *string `msgpack:"resolvedBy,omitempty"`
}

// The durable event union and its history envelope.

type AcpDurableSessionUpdate struct {
	Update JSON `msgpack:"update"`
}

type AcpDurablePermissionRequest struct {
	RequestID string `msgpack:"requestId"`
	Request   JSON   `msgpack:"request"`
}

type AcpDurablePermissionResponse struct {
	RequestID string  `msgpack:"requestId"`
	Response  JSON    `msgpack:"response"`
	Status    string  `msgpack:"status"`
	Reason    *string `msgpack:"reason,omitempty"`
}

// AcpDurableHistoryEntry carries one Skein extension beyond the schema:
// EventNo, the contiguous per-session event number (HeaderEventNo), so that
// a reader can tell pruned history from the gaps other sessions leave in the
// stream sequence.
type AcpDurableHistoryEntry struct {
	SessionID string                 `msgpack:"sessionId"`
	Sequence  uint64                 `msgpack:"sequence"`
	Timestamp string                 `msgpack:"timestamp"`
	Event     Union[AcpDurableEvent] `msgpack:"event"`
	EventNo   uint64                 `msgpack:"eventNo,omitempty"` // Skein extension
	// Principal, a Skein extension: who caused it (its HeaderPrincipal).
	Principal string `msgpack:"principal,omitempty"`
}

type AcpHistoryPageResponse struct {
	Events        []AcpDurableHistoryEntry `msgpack:"events"`
	HasMoreBefore bool                     `msgpack:"hasMoreBefore"`
	HasMoreAfter  bool                     `msgpack:"hasMoreAfter"`
}

type AcpSessionConfigResponse struct {
	Revision uint64 `msgpack:"revision"`
	Options  JSON   `msgpack:"options"`
}

type AcpSessionCapabilitiesResponse struct {
	Capabilities JSON `msgpack:"capabilities,omitempty"`
}

type AcpSessionAgentInfoResponse struct {
	AgentInfo JSON `msgpack:"agentInfo,omitempty"`
}

type AcpSessionCreatedResponse struct {
	SessionID         string  `msgpack:"sessionId"`
	Pid               *uint32 `msgpack:"pid,omitempty"`
	Modes             JSON    `msgpack:"modes,omitempty"`
	ConfigOptions     []JSON  `msgpack:"configOptions"`
	AgentCapabilities JSON    `msgpack:"agentCapabilities,omitempty"`
	AgentInfo         JSON    `msgpack:"agentInfo,omitempty"`
}

type AcpSessionRpcResponse struct {
	SessionID  string `msgpack:"sessionId"`
	Response   JSON   `msgpack:"response"`
	EventCount uint32 `msgpack:"eventCount"`
}

type AcpSessionStateResponse struct {
	SessionID         string  `msgpack:"sessionId"`
	AgentType         string  `msgpack:"agentType"`
	ProcessID         string  `msgpack:"processId"`
	Pid               *uint32 `msgpack:"pid,omitempty"`
	Closed            bool    `msgpack:"closed"`
	ExitCode          *int32  `msgpack:"exitCode,omitempty"`
	Modes             JSON    `msgpack:"modes,omitempty"`
	ConfigOptions     []JSON  `msgpack:"configOptions"`
	AgentCapabilities JSON    `msgpack:"agentCapabilities,omitempty"`
	AgentInfo         JSON    `msgpack:"agentInfo,omitempty"`
}

type AcpSessionClosedResponse struct {
	SessionID string `msgpack:"sessionId"`
}

type AcpSessionResumedResponse struct {
	SessionID string `msgpack:"sessionId"`
	Mode      string `msgpack:"mode"`
}

type AcpErrorResponse struct {
	Code    string `msgpack:"code"`
	Message string `msgpack:"message"`
}

type AcpPendingResponse struct {
	ProcessID string `msgpack:"processId"`
}

// Live events.

// AcpDurableSessionEvent carries the same EventNo extension as
// AcpDurableHistoryEntry.
type AcpDurableSessionEvent struct {
	SessionID string                 `msgpack:"sessionId"`
	Sequence  uint64                 `msgpack:"sequence"`
	Timestamp string                 `msgpack:"timestamp"`
	Event     Union[AcpDurableEvent] `msgpack:"event"`
	EventNo   uint64                 `msgpack:"eventNo,omitempty"` // Skein extension
}

type AcpEphemeralSessionUpdateEvent struct {
	SessionID     string `msgpack:"sessionId"`
	AfterSequence uint64 `msgpack:"afterSequence"`
	Update        JSON   `msgpack:"update"`
}

type AcpSessionEvent struct {
	SessionID    string `msgpack:"sessionId"`
	Notification JSON   `msgpack:"notification"`
}

type AcpAgentStderrEvent struct {
	SessionID string `msgpack:"sessionId"`
	AgentType string `msgpack:"agentType"`
	ProcessID string `msgpack:"processId"`
	Chunk     []byte `msgpack:"chunk"`
}

// Restart values of AcpAgentExitedEvent.
const RestartNotAttempted = "not_attempted"

type AcpAgentExitedEvent struct {
	SessionID    string  `msgpack:"sessionId"`
	AgentType    string  `msgpack:"agentType"`
	ProcessID    string  `msgpack:"processId"`
	Pid          *uint32 `msgpack:"pid,omitempty"`
	ExitCode     *int32  `msgpack:"exitCode,omitempty"`
	Restart      string  `msgpack:"restart"`
	RestartCount uint32  `msgpack:"restartCount"`
	MaxRestarts  uint32  `msgpack:"maxRestarts"`
}

// Host callbacks.

type AcpHostRequestCallback struct {
	SessionID string `msgpack:"sessionId"`
	Request   JSON   `msgpack:"request"`
}

type AcpHostRequestCallbackResponse struct {
	Response JSON `msgpack:"response,omitempty"`
}
