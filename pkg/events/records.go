package events

// Skein's own records. The protocol's types (protocol.go) say what a client
// sees; these say what happened to a session, on its LogControl subject, in
// KV, and between the session service and the runners. They share the codec
// and the variant registry with the protocol types.

import (
	"maps"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// SessionOpened is the first record of a session: the options it was opened
// with, normalised (defaults applied), immutable afterwards.
type SessionOpened struct {
	Agent                  string  `msgpack:"agent"`
	Cwd                    string  `msgpack:"cwd"`
	AdditionalDirectories  JSON    `msgpack:"additionalDirectories,omitempty"`
	Env                    JSON    `msgpack:"env,omitempty"`
	McpServers             JSON    `msgpack:"mcpServers,omitempty"`
	PermissionPolicy       string  `msgpack:"permissionPolicy"`
	SkipOsInstructions     bool    `msgpack:"skipOsInstructions,omitempty"`
	AdditionalInstructions *string `msgpack:"additionalInstructions,omitempty"`
	// InputPolicy is InputPolicyDecline, or "" for the default: a person
	// answers input requests (InputPolicyAsk).
	InputPolicy string `msgpack:"inputPolicy,omitempty"`
	// Runner is the runner a placed session is pinned to; "" for none.
	// Labels are the labels of a placement by labels, which chose Runner.
	Runner string            `msgpack:"runner,omitempty"`
	Labels map[string]string `msgpack:"labels,omitempty"`
	// CreatedBy is the principal that opened it; a reopen by another matches.
	CreatedBy string `msgpack:"createdBy,omitempty"`
}

// Permission policies (AcpOpenSessionRequest.permissionPolicy).
const (
	PolicyAllowAll  = "allow_all"
	PolicyRejectAll = "reject_all"
	PolicyAsk       = "ask"
)

// Restore tiers: how an adapter came to hold a session.
const (
	TierNew      = "new"      // session/new for a session with no native context yet
	TierResume   = "resume"   // native session/resume
	TierLoad     = "load"     // native session/load, its replay discarded
	TierFallback = "fallback" // session/new plus the continuation preamble
)

// AdapterAttached records that an adapter process now serves the session.
type AdapterAttached struct {
	RunnerID          string  `msgpack:"runnerId"`
	ProcessID         string  `msgpack:"processId"`
	Pid               *uint32 `msgpack:"pid,omitempty"`
	AcpSessionID      string  `msgpack:"acpSessionId"` // private: never in a public event
	Tier              string  `msgpack:"tier"`
	TierReason        string  `msgpack:"tierReason,omitempty"` // AdapterReady.Reason: why the restore ended at Tier
	AgentCapabilities JSON    `msgpack:"agentCapabilities,omitempty"`
	AgentInfo         JSON    `msgpack:"agentInfo,omitempty"`
	Modes             JSON    `msgpack:"modes,omitempty"`
	ConfigOptions     []JSON  `msgpack:"configOptions,omitempty"`
	// IOStartSeq is the ACP_IO sequence from which the owner consumes this
	// adapter's output.
	IOStartSeq uint64 `msgpack:"ioStartSeq"`
}

// Turn outcomes. Exactly one TurnFinished closes every accepted turn.
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	// OutcomeBudgetExhausted: the agent's cost reached the session's cap
	// and Skein cancelled the turn (budget.go); its Error says so.
	OutcomeBudgetExhausted = "budget_exhausted"
)

// A turn is opened by the record that carries HeaderTurnAccepted: the first
// user-message event of the prompt (the prompt's other blocks follow in the
// same atomic append). Every record appended while the turn runs carries
// HeaderTurnID, and TurnFinished closes it. So a session has an open turn
// exactly when its newest record carries HeaderTurnID and is not a
// TurnFinished: one read tells.

// TurnFinished closes a turn.
type TurnFinished struct {
	TurnID string `msgpack:"turnId"`
	// IdempotencyKey and ContentHash repeat the acceptance headers, so that
	// the outcome of a keyed prompt can be found from its finish record.
	IdempotencyKey *string `msgpack:"idempotencyKey,omitempty"`
	ContentHash    string  `msgpack:"contentHash,omitempty"`
	Outcome        string  `msgpack:"outcome"`
	StopReason     string  `msgpack:"stopReason,omitempty"`
	Message        JSON    `msgpack:"message,omitempty"` // the turn's last completed agent message update
	// MessageSeq is the sequence of Message's record in the log: a
	// prompt's result shows the message as history does, from the record
	// (turnwait.Result). 0: the turn sent no message.
	MessageSeq uint64            `msgpack:"messageSeq,omitempty"`
	Error      *AcpErrorResponse `msgpack:"error,omitempty"`
	// Timing is the turn's timing as the owner that accepted it measured
	// it (offers.go); nil for a turn it did not accept.
	Timing *TurnTiming `msgpack:"timing,omitempty"`
}

// Failed reports whether the turn failed: it carries an error, or its
// outcome says so. Every reader that shows how a turn ended (the state
// events, history's current state, a prompt's answer) decides it here.
func (f *TurnFinished) Failed() bool { return f.Error != nil || f.Outcome == OutcomeFailed }

// Failure is a failed turn's error: the one recorded, else a generic one
// for a failure recorded without it. Nil when the turn did not fail.
func (f *TurnFinished) Failure() *AcpErrorResponse {
	switch {
	case f.Error != nil:
		return f.Error
	case f.Outcome == OutcomeFailed:
		return &AcpErrorResponse{Code: string(CodeInternal), Message: "the turn failed"}
	}
	return nil
}

// ConfigChanged records the session's complete configuration options after
// a change (the ACP session/set_config_option answer, or a mode/model change
// the agent announced), with the cache revision it makes current.
type ConfigChanged struct {
	Revision      uint64 `msgpack:"revision"`
	ConfigOptions []JSON `msgpack:"configOptions"`
}

// SessionUnloaded records that the adapter was stopped on purpose (unload,
// idle reclaim); the session and its history stay.
type SessionUnloaded struct {
	Reason string `msgpack:"reason"`
}

// OwnerChanged is the fence a session service replica appends when it takes
// ownership of a session: conditioned on the last sequence it read, so any
// earlier owner's next append fails.
type OwnerChanged struct {
	Owner         string `msgpack:"owner"`
	LeaseRevision uint64 `msgpack:"leaseRevision"`
}

// SessionDeleted is the tombstone a deletion leaves (a rollup of the
// session's subject), so that no stale writer can resurrect the session.
type SessionDeleted struct {
	Reason string `msgpack:"reason,omitempty"`
}

// Statuses of AcpCancelPromptResponse. When the turn a cancel aimed at had
// already ended by the time the cancel was applied, the status is that
// turn's outcome (OutcomeCompleted, OutcomeFailed, OutcomeCancelled).
const (
	CancelCancelled      = "cancelled"
	CancelNoActivePrompt = "no_active_prompt"
)

// Statuses and reasons of permission resolutions. A respondPermission call
// answers PermissionAccepted (its decision won and reached the adapter) or
// PermissionNotPending with the reason naming what won instead. A durable
// AcpDurablePermissionResponse has PermissionAccepted, or
// PermissionTerminal with the reason the request ended unanswered.
const (
	PermissionAccepted   = "accepted"
	PermissionNotPending = "not_pending"
	PermissionTerminal   = "terminal"

	ReasonAlreadyResolved = "already_resolved"
	ReasonPromptCancelled = "prompt_cancelled"
	ReasonAdapterExited   = "adapter_exited"
	ReasonSessionDeleted  = "session_deleted"
	ReasonTurnFailed      = "turn_failed"
	ReasonUnknownRequest  = "unknown_request"
	ReasonAskTimeout      = "ask_timeout" // nobody answered in session.ask-timeout: Skein did, safely
	// ReasonSessionUnloaded ends a request outside a turn when the session unloads.
	ReasonSessionUnloaded = "session_unloaded"
)

// SessionMeta is the ACP_SESSIONS projection of a session, rebuilt from the
// log whenever it is lost. Reads (getSession) come from here and from the
// log, never from an adapter.
type SessionMeta struct {
	Namespace         string                `msgpack:"namespace"`
	Info              AcpDurableSessionInfo `msgpack:"info"`
	PermissionPolicy  string                `msgpack:"permissionPolicy"`
	AgentCapabilities JSON                  `msgpack:"agentCapabilities,omitempty"`
	AgentInfo         JSON                  `msgpack:"agentInfo,omitempty"`
	ConfigRevision    uint64                `msgpack:"configRevision"`
	ConfigOptions     []JSON                `msgpack:"configOptions,omitempty"`
	// AcpSessionID is the agent's private ID of the session, which a
	// restore brings back. It never leaves Skein's services.
	AcpSessionID string `msgpack:"acpSessionId,omitempty"`
	// RunnerID and ProcessID name the adapter attached last, which a new
	// owner asks about before taking over a turn.
	RunnerID  string `msgpack:"runnerId,omitempty"`
	ProcessID string `msgpack:"processId,omitempty"`
	// LogPosition is the sequence of the newest log record this projection
	// reflects. A reader that finds newer records in the log knows the
	// projection lags (its writer is between an append and the projection
	// write, or died there); the log wins.
	LogPosition uint64 `msgpack:"logPosition,omitempty"`
	// Hosted: an adapter serves the session now (on RunnerID), attached for
	// Principal (HeaderPrincipal; "" for none). Every replica counts a
	// namespace's and a principal's live adapters from these, for their
	// quotas and evictions (services/session/ledger.go).
	Hosted    bool   `msgpack:"hosted,omitempty"`
	Principal string `msgpack:"principal,omitempty"`
	// AvailableCommands is the agent's last available_commands_update's
	// list, which OpGetSessionCommands serves (offers.go).
	AvailableCommands JSON `msgpack:"availableCommands,omitempty"`
}

// RestoreRequest asks RunnerRestore to bring an ACP session back: the
// schema's AcpResumeSessionRequest (which protocol.go mirrors field for
// field), wrapped with the instruction settings a restore reapplies, as
// AcpCreateSessionRequest carries them (free text fits no header).
type RestoreRequest struct {
	Resume                 AcpResumeSessionRequest `msgpack:"resume"`
	SkipOsInstructions     bool                    `msgpack:"skipOsInstructions,omitempty"`
	AdditionalInstructions *string                 `msgpack:"additionalInstructions,omitempty"`
	// ClientCapabilities is what the runner advertises in initialize,
	// sent verbatim; empty means its default (no elicitation).
	ClientCapabilities JSON `msgpack:"clientCapabilities,omitempty"`
}

// AdapterReady answers RunnerRestore: the adapter and its ACP session, and
// the tier of the restore ladder that produced it (TierResume, TierLoad or
// TierFallback).
type AdapterReady struct {
	Tier    string                    `msgpack:"tier"`
	Session AcpSessionCreatedResponse `msgpack:"session"`
	// Reason says why the ladder ended at Tier when that was not simply the
	// first method the agent advertises: the agent's errors it stepped
	// past or retried, or that the agent offers neither resume nor load.
	// The session service records it as AdapterAttached.TierReason.
	Reason string `msgpack:"reason,omitempty"`
}

// AdapterStatus answers RunnerStatus.
type AdapterStatus struct {
	// Alive: the runner hosts the process and it has not exited.
	Alive bool `msgpack:"alive"`
	// PromptWritten: the session/prompt of the turn named by HeaderTurnID
	// was written to the adapter's stdin, so its answer, when the adapter
	// gives one, is in ACP_IO.
	PromptWritten bool `msgpack:"promptWritten"`
}

// ConfigResponse returns the cached configuration as the protocol's answer:
// the revision and the options as one JSON array.
func (m *SessionMeta) ConfigResponse() *AcpSessionConfigResponse {
	opts := []byte("[")
	for i, o := range m.ConfigOptions {
		if i > 0 {
			opts = append(opts, ',')
		}
		opts = append(opts, o...)
	}
	return &AcpSessionConfigResponse{Revision: m.ConfigRevision, Options: append(opts, ']')}
}

// RunnerAck answers a runner control request that has no other result: the
// runner did what was asked (for RunnerCall: the line is written to the
// adapter's stdin).
type RunnerAck struct {
	ProcessID string `msgpack:"processId,omitempty"`
}

// RunnerInfo is a runner's heartbeat in BucketRunners.
type RunnerInfo struct {
	ID       string          `msgpack:"id"`
	Agents   []AcpAgentEntry `msgpack:"agents"`
	Capacity uint32          `msgpack:"capacity"`
	Load     uint32          `msgpack:"load"`
	// AllowEnv lists, per agent ID, the environment variables a session
	// may set (the registry's allowEnv: names, or prefixes ending in
	// "*"); an agent absent from it allows none. The session service
	// refuses any other at open (workspace.CheckEnv).
	AllowEnv AllowEnvLists `msgpack:"allowEnv,omitempty"`
	// Labels describe the runner to placement ({"where": "laptop"}).
	Labels map[string]string `msgpack:"labels,omitempty"`
	// PlacedOnly: the runner hosts only sessions placed on it (an edge
	// runner, on a developer's machine).
	PlacedOnly bool `msgpack:"placedOnly,omitempty"`
	// Instance is the runner process's own: a runner started again under
	// the same ID has another, and the adapters of the last one are gone.
	Instance string `msgpack:"instance,omitempty"`
}

// AllowEnvLists is RunnerInfo.AllowEnv: per agent ID, its allowed
// environment variables, encoded with its keys sorted (msgpack/v5 sorts
// only maps of strings, booleans and interfaces; FuzzUnmarshal caught it).
type AllowEnvLists map[string][]string

// EncodeMsgpack writes m as a map whose keys are in order.
func (m AllowEnvLists) EncodeMsgpack(enc *msgpack.Encoder) error {
	if m == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeMapLen(len(m)); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.Encode(m[k]); err != nil {
			return err
		}
	}
	return nil
}

// Record kinds: the variant names of Skein's own records, as HeaderRecord
// carries them on every stored record. Compare a record's kind with these,
// never with a literal.
const (
	RecordSessionOpened            = "SessionOpened"
	RecordAdapterAttached          = "AdapterAttached"
	RecordTurnFinished             = "TurnFinished"
	RecordConfigChanged            = "ConfigChanged"
	RecordSessionUnloaded          = "SessionUnloaded"
	RecordOwnerChanged             = "OwnerChanged"
	RecordSessionDeleted           = "SessionDeleted"
	RecordAgentExited              = "AcpAgentExitedEvent"
	RecordAgentStderr              = "AcpAgentStderrEvent"
	RecordAdapterUpdate            = "AdapterUpdate"
	RecordAdapterUpdates           = "AdapterUpdates"
	RecordAdapterPermissionRequest = "AdapterPermissionRequest"
	RecordAdapterPromptResult      = "AdapterPromptResult"
	RecordAdapterLimitHit          = "AdapterLimitHit"
	RecordTurnStall                = "TurnStall"
)

// TurnStall, with the open turn's HeaderTurnID: its agent said nothing for
// session.stall-after while no request waited on a person (Stalled), or
// spoke again after that (not Stalled). QuietMs is how long it was silent.
type TurnStall struct {
	Stalled bool  `msgpack:"stalled,omitempty"`
	QuietMs int64 `msgpack:"quietMs,omitempty"`
}

// Reasons of SessionUnloaded: why the adapter was stopped on purpose.
const (
	UnloadRequested     = "unload"         // unloadSession
	UnloadIdle          = "idle"           // no activity for session.idle-timeout
	UnloadMaxAge        = "max_age"        // attached for session.max-adapter-age
	UnloadCancelIgnored = "cancel_ignored" // it did not answer a cancelled prompt within session.cancel-grace
	UnloadBroken        = "broken"         // it wrote a line longer than the runner reads: its connection is gone
	// UnloadEvicted: the adapter was idle, the least recently used, and its
	// slot was needed (runners full, or a session.max-adapters-per-* quota).
	UnloadEvicted = "evicted"
)

// DeleteRequested is the reason of a SessionDeleted that deleteSession wrote.
const DeleteRequested = "deleted"

func (SessionOpened) VariantName() string   { return RecordSessionOpened }
func (AdapterAttached) VariantName() string { return RecordAdapterAttached }
func (TurnFinished) VariantName() string    { return RecordTurnFinished }
func (ConfigChanged) VariantName() string   { return RecordConfigChanged }
func (SessionUnloaded) VariantName() string { return RecordSessionUnloaded }
func (OwnerChanged) VariantName() string    { return RecordOwnerChanged }
func (SessionDeleted) VariantName() string  { return RecordSessionDeleted }
func (SessionMeta) VariantName() string     { return "SessionMeta" }
func (RunnerAck) VariantName() string       { return "RunnerAck" }
func (RestoreRequest) VariantName() string  { return "RestoreRequest" }
func (AdapterReady) VariantName() string    { return "AdapterReady" }
func (AdapterStatus) VariantName() string   { return "AdapterStatus" }
func (RunnerInfo) VariantName() string      { return "RunnerInfo" }
func (TurnStall) VariantName() string       { return RecordTurnStall }

func init() {
	register(func() Variant { return new(SessionOpened) })
	register(func() Variant { return new(AdapterAttached) })
	register(func() Variant { return new(TurnFinished) })
	register(func() Variant { return new(ConfigChanged) })
	register(func() Variant { return new(SessionUnloaded) })
	register(func() Variant { return new(OwnerChanged) })
	register(func() Variant { return new(SessionDeleted) })
	register(func() Variant { return new(SessionMeta) })
	register(func() Variant { return new(RunnerAck) })
	register(func() Variant { return new(RestoreRequest) })
	register(func() Variant { return new(AdapterReady) })
	register(func() Variant { return new(AdapterStatus) })
	register(func() Variant { return new(RunnerInfo) })
	register(func() Variant { return new(TurnStall) })
}
