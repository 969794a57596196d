package acp

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
