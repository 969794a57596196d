package acp

import "slices"

// UpdateKinds lists every value of update.sessionUpdate that the ACP v1
// schema's SessionUpdate union defines (schema.json), in its order: what an
// agent may send in a session/update. Agents also invent values of their
// own, which stay legal; a client that gives some values a meaning of its
// own (Skein's permission events) checks an agent's value against this
// list and its own before it stores the update.
var UpdateKinds = []string{
	UpdateUserMessageChunk,
	UpdateAgentMessageChunk,
	UpdateAgentThoughtChunk,
	UpdateToolCall,
	UpdateToolCallUpdate,
	UpdatePlan,
	UpdateAvailableCommands,
	UpdateCurrentMode,
	UpdateConfigOption,
	UpdateSessionInfo,
	UpdateUsage,
	UpdateNotice,
	UpdateCompaction,
	UpdateCompactionSummaryChunk,
}

// KnownUpdate reports whether kind is one of UpdateKinds.
func KnownUpdate(kind string) bool { return slices.Contains(UpdateKinds, kind) }
