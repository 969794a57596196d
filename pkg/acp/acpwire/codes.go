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
