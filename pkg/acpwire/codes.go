package acpwire

// ProtocolVersion is the ACP protocol version this package speaks. An agent
// may answer initialize with another version; the caller decides whether it
// can continue (REFERENCE.md §2: disconnect if not 1).
const ProtocolVersion = 1

// JSON-RPC 2.0 and ACP error codes. Any other integer is allowed on the wire
// (gemini-cli sends 500); code that branches on a code uses these names,
// never a literal.
const (
	CodeParseError       = -32700 // the receiver could not parse a line as JSON
	CodeInvalidRequest   = -32600 // JSON, but not a valid JSON-RPC request
	CodeMethodNotFound   = -32601 // unknown or unsupported method (also unknown "_" extensions)
	CodeInvalidParams    = -32602 // params failed validation
	CodeInternalError    = -32603 // implementation-defined; agents put details in data
	CodeAuthRequired     = -32000 // ACP: authenticate first (seen on session/new and session/prompt)
	CodeResourceNotFound = -32002 // ACP: no such session, file or other resource
	CodeRequestCancelled = -32800 // ACP: the request was cancelled with $/cancel_request
)

// Method names. "C->A" methods are handled by the agent (the client calls
// them), "A->C" methods by the client. A Conn does not restrict which side
// sends what: these are names, not a routing table.
const (
	// C->A requests.
	MethodInitialize             = "initialize"
	MethodAuthenticate           = "authenticate"
	MethodLogout                 = "logout"
	MethodSessionNew             = "session/new"
	MethodSessionLoad            = "session/load"
	MethodSessionResume          = "session/resume"
	MethodSessionClose           = "session/close"
	MethodSessionList            = "session/list"
	MethodSessionDelete          = "session/delete"
	MethodSessionPrompt          = "session/prompt"
	MethodSessionSetConfigOption = "session/set_config_option"
	MethodSessionSetMode         = "session/set_mode"
	// MethodSessionSetModel is the legacy, never-stabilised model switch.
	// gemini-cli 0.61.0 and claude-code-acp 0.16.2 still need it (they
	// answer set_config_option with -32601).
	MethodSessionSetModel = "session/set_model"

	// C->A notifications.
	MethodSessionCancel = "session/cancel"

	// Either direction (notification): cancel one outstanding request. The
	// receiver must still answer that request (a result or CodeRequestCancelled).
	MethodCancelRequest = "$/cancel_request"

	// A->C notifications.
	MethodSessionUpdate       = "session/update"
	MethodElicitationComplete = "elicitation/complete"

	// A->C requests.
	MethodRequestPermission   = "session/request_permission"
	MethodFSReadTextFile      = "fs/read_text_file"
	MethodFSWriteTextFile     = "fs/write_text_file"
	MethodTerminalCreate      = "terminal/create"
	MethodTerminalOutput      = "terminal/output"
	MethodTerminalWaitForExit = "terminal/wait_for_exit"
	MethodTerminalKill        = "terminal/kill"
	MethodTerminalRelease     = "terminal/release"
	MethodElicitationCreate   = "elicitation/create"
)

// Stop reasons of a session/prompt result. An agent may send others; keep
// the string.
const (
	StopReasonEndTurn         = "end_turn"
	StopReasonMaxTokens       = "max_tokens"
	StopReasonMaxTurnRequests = "max_turn_requests"
	StopReasonRefusal         = "refusal"
	StopReasonCancelled       = "cancelled"
)

// Values of update.sessionUpdate in a session/update notification (v1 stable
// schema). Unknown values are legal and must be kept, not rejected.
const (
	UpdateUserMessageChunk       = "user_message_chunk"
	UpdateAgentMessageChunk      = "agent_message_chunk"
	UpdateAgentThoughtChunk      = "agent_thought_chunk"
	UpdateToolCall               = "tool_call"
	UpdateToolCallUpdate         = "tool_call_update"
	UpdatePlan                   = "plan"
	UpdateAvailableCommands      = "available_commands_update"
	UpdateCurrentMode            = "current_mode_update"
	UpdateConfigOption           = "config_option_update"
	UpdateSessionInfo            = "session_info_update"
	UpdateUsage                  = "usage_update"
	UpdateNotice                 = "notice"
	UpdateCompaction             = "compaction_update"
	UpdateCompactionSummaryChunk = "compaction_summary_chunk"
)

// Kinds of a permission option. Choose an option by kind and answer with its
// OptionID: option IDs are agent-defined ("allow-once", "approved", ...).
const (
	PermissionAllowOnce    = "allow_once"
	PermissionAllowAlways  = "allow_always"
	PermissionRejectOnce   = "reject_once"
	PermissionRejectAlways = "reject_always"
)
