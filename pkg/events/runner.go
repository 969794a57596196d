package events

// The conversation between the session service and an adapter-runner, the
// only one to speak ACP JSON-RPC (pkg/acp/acpwire): typed requests on
// RunnerSubject, and what the adapter did as typed records on the
// session's ACP_IO subject, in the order observed, each with
// HeaderProcessID and HeaderRecord. ACP payloads stay raw JSON; no JSON-RPC
// envelope crosses NATS. The runner answers other agent-to-client requests
// itself (Skein advertises none of those capabilities).

// RunnerPromptRequest asks RunnerPrompt to send a turn's session/prompt to
// the adapter. The runner acknowledges (RunnerAck) once the request is
// written to the adapter's stdin; the answer arrives later on ACP_IO as an
// AdapterPromptResult with the same TurnID.
type RunnerPromptRequest struct {
	TurnID string `msgpack:"turnId"`
	// Prompt is the ACP content block array, exactly as the agent gets it
	// (a fallback restore's preamble block already put first).
	Prompt JSON `msgpack:"prompt"`
}

// RunnerCancelRequest asks RunnerCancel to send session/cancel for the
// turn TurnID: RunnerAck once written. The adapter's answer to that turn's
// session/prompt follows on ACP_IO as usual.
type RunnerCancelRequest struct {
	TurnID string `msgpack:"turnId"`
}

// RunnerRemoveRequest asks RunnerRemove to remove what a deleted session
// left on a runner: its HOME and TMPDIR under the runner's data
// directory, and its default workspace, <first root>/<namespace>/<session
// ID>, when Cwd, the session's working directory as it was opened, is
// that directory or "" (a session opened before the default was given),
// and KeepWorkspace is false. Any other cwd is the user's own, and stays;
// KeepWorkspace keeps the default one too, when another session works in
// it (a fork works where its source did).
type RunnerRemoveRequest struct {
	Cwd           string `msgpack:"cwd,omitempty"`
	KeepWorkspace bool   `msgpack:"keepWorkspace,omitempty"`
}

// RunnerPermissionAnswer asks RunnerPermission to answer the adapter's
// permission request RequestID (AdapterPermissionRequest.RequestID):
// selected OptionID, or cancelled when OptionID is nil. RunnerAck once the
// answer is written; unknown_request (CodeInvalidRequest) when the runner
// has no such request pending for this process.
type RunnerPermissionAnswer struct {
	RequestID string  `msgpack:"requestId"`
	OptionID  *string `msgpack:"optionId,omitempty"`
}

// RunnerSetConfigRequest asks RunnerSetConfig to set one configuration
// option: session/set_config_option, or, for an option the runner mapped
// from the legacy modes or models lists, session/set_mode or
// session/set_model. Value is one JSON string or boolean. The runner waits
// for the agent's answer and replies RunnerConfigResponse.
type RunnerSetConfigRequest struct {
	ConfigID string `msgpack:"configId"`
	Value    JSON   `msgpack:"value"`
}

// RunnerConfigResponse answers RunnerSetConfig: the agent's complete
// options after the change. Nil ConfigOptions means the agent answered
// without a list (a legacy set_mode/set_model, or a set_config_option
// answer without configOptions): the caller sets the option's current
// value in its cache itself. The agent's refusal is an error reply,
// CodeAdapterError, with its JSON-RPC code and message in the message; a
// value that is not one JSON string or boolean (or not a string, for a
// legacy option) is CodeInvalidRequest, and nothing is sent.
type RunnerConfigResponse struct {
	ConfigOptions []JSON `msgpack:"configOptions,omitempty"`
}

// AdapterUpdate is one session/update notification's update object, raw.
//
// Kind and MessageID are the update's sessionUpdate and messageId, as the
// runner read them when it checked the notification (acpwire), so that
// the session service routes the update without scanning it again. The
// runner always sets Kind; MessageID is nil when the update has none.
type AdapterUpdate struct {
	Update    JSON    `msgpack:"update"`
	Kind      string  `msgpack:"kind,omitempty"`
	MessageID *string `msgpack:"messageId,omitempty"`
}

// AdapterUpdates is several session/update notifications' update objects,
// raw, in the order the adapter wrote them: the ones the runner read from
// its stdout at once (a burst), stored as one record. An update in it is
// placed in ACP_IO by the record's sequence and its number there, from 1
// (HeaderIOSeq "seq.n").
//
// Kinds and MessageIDs are each update's sessionUpdate and messageId, as
// for AdapterUpdate: Kinds has one entry per update, MessageIDs one per
// update or none (no update has a messageId). Route reads them.
type AdapterUpdates struct {
	Updates    []JSON    `msgpack:"updates"`
	Kinds      []string  `msgpack:"kinds,omitempty"`
	MessageIDs []*string `msgpack:"messageIds,omitempty"`
}

// Route returns update i's sessionUpdate and messageId as the runner
// carried them; ok is false when the lists do not match the updates (a
// record no runner writes), and the reader must read them from the update.
func (u *AdapterUpdates) Route(i int) (kind string, messageID *string, ok bool) {
	if len(u.Kinds) != len(u.Updates) || u.Kinds[i] == "" || u.MessageIDs != nil && len(u.MessageIDs) != len(u.Updates) {
		return "", nil, false
	}
	if u.MessageIDs != nil {
		messageID = u.MessageIDs[i]
	}
	return u.Kinds[i], messageID, true
}

// AdapterPermissionRequest is a session/request_permission the adapter
// sent. RequestID is the runner's correlation ID ("perm_" + a NUID):
// globally unique, never the adapter's JSON-RPC id, so the session service
// uses it as the public requestId and answers with RunnerPermissionAnswer.
// Request is the ACP params without the private sessionId member, every
// other byte as the adapter sent it.
type AdapterPermissionRequest struct {
	RequestID string `msgpack:"requestId"`
	Request   JSON   `msgpack:"request"`
}

// AdapterPromptResult is the adapter's answer to a turn's session/prompt:
// StopReason and the raw result, or Error when it answered with a JSON-RPC
// error (or a result without a stopReason, CodeAdapterProtocol).
type AdapterPromptResult struct {
	TurnID     string            `msgpack:"turnId"`
	StopReason string            `msgpack:"stopReason,omitempty"`
	Result     JSON              `msgpack:"result,omitempty"`
	Error      *AdapterCallError `msgpack:"error,omitempty"`
}

// AdapterCallError is an ACP call's failure as the runner saw it: the
// registry code it maps to (CodeAdapterError for a JSON-RPC error,
// CodeAdapterProtocol for an answer that breaks the protocol) and, for a
// JSON-RPC error, its numeric code and message.
type AdapterCallError struct {
	Code    Code   `msgpack:"code"`
	RPCCode int32  `msgpack:"rpcCode,omitempty"`
	Message string `msgpack:"message"`
}

// Err returns the failure as a registry error.
func (e *AdapterCallError) Err() *Error { return &Error{Code: e.Code, Message: e.Message} }

// AdapterLimitHit records that an adapter, or a process it spawned, met
// one of the limits its runner set: the kernel refused it memory (its OOM
// killer ended a process) or a process (fork failed), or its session's
// directories grew past their watched size, for which the runner stopped
// it. The session service appends it to the session's log, as it comes.
type AdapterLimitHit struct {
	// Kind is LimitMemory, LimitPids or LimitDisk.
	Kind string `msgpack:"kind"`
	// Limit is the limit met: bytes of memory or of growth on disk, or
	// processes.
	Limit int64 `msgpack:"limit"`
	// Count is how many times the limit was met since the last record
	// (the kernel's counts: processes OOM-killed, forks refused).
	Count uint64 `msgpack:"count"`
	// Message says what happened, for a person reading the log.
	Message string `msgpack:"message"`
}

// The kinds of AdapterLimitHit.
const (
	LimitMemory = "memory"
	LimitPids   = "pids"
	LimitDisk   = "disk"
)

// PromptAccepted answers the prompt operation as soon as the turn is in the
// log (or was already): the turn's ID and Sequence, the ACP_LOG sequence
// of its accepting record. Whoever blocks through the turn reads the
// session's log after Sequence until the turn's TurnFinished
// (turnwait.Await). Finished is set when the turn had already ended
// (a keyed prompt retried after its turn finished): it is that turn's
// TurnFinished, and there is nothing to wait for.
type PromptAccepted struct {
	SessionID string `msgpack:"sessionId"`
	TurnID    string `msgpack:"turnId"`
	Sequence  uint64 `msgpack:"sequence"`
	// Keyed says where the turn's TurnFinished will be: on the session's
	// key subject (KeySubject) when true, on its control subject when
	// false; nil (not said) means either, and a waiter watches both.
	Keyed    *bool         `msgpack:"keyed,omitempty"`
	Finished *TurnFinished `msgpack:"finished,omitempty"`
	Queued   *QueueChange  `msgpack:"queued,omitempty"` // put in the queue: no turn yet (TurnID "")
}

// UpdatesOf returns the updates an ACP_IO record carries, in order: one
// for an AdapterUpdate, several for AdapterUpdates, none for any other.
func UpdatesOf(v Variant) []JSON {
	switch v := v.(type) {
	case *AdapterUpdate:
		return []JSON{v.Update}
	case *AdapterUpdates:
		return v.Updates
	}
	return nil
}

func (RunnerPromptRequest) VariantName() string      { return "RunnerPromptRequest" }
func (RunnerRemoveRequest) VariantName() string      { return "RunnerRemoveRequest" }
func (RunnerCancelRequest) VariantName() string      { return "RunnerCancelRequest" }
func (RunnerPermissionAnswer) VariantName() string   { return "RunnerPermissionAnswer" }
func (RunnerSetConfigRequest) VariantName() string   { return "RunnerSetConfigRequest" }
func (RunnerConfigResponse) VariantName() string     { return "RunnerConfigResponse" }
func (AdapterUpdate) VariantName() string            { return RecordAdapterUpdate }
func (AdapterUpdates) VariantName() string           { return RecordAdapterUpdates }
func (AdapterPermissionRequest) VariantName() string { return RecordAdapterPermissionRequest }
func (AdapterPromptResult) VariantName() string      { return RecordAdapterPromptResult }
func (PromptAccepted) VariantName() string           { return "PromptAccepted" }
func (AdapterLimitHit) VariantName() string          { return RecordAdapterLimitHit }

func init() {
	register(func() Variant { return new(RunnerPromptRequest) })
	register(func() Variant { return new(RunnerRemoveRequest) })
	register(func() Variant { return new(RunnerCancelRequest) })
	register(func() Variant { return new(RunnerPermissionAnswer) })
	register(func() Variant { return new(RunnerSetConfigRequest) })
	register(func() Variant { return new(RunnerConfigResponse) })
	register(func() Variant { return new(AdapterUpdate) })
	register(func() Variant { return new(AdapterUpdates) })
	register(func() Variant { return new(AdapterPermissionRequest) })
	register(func() Variant { return new(AdapterPromptResult) })
	register(func() Variant { return new(PromptAccepted) })
	register(func() Variant { return new(AdapterLimitHit) })
}
