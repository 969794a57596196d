package events

// Op names one operation of the request API.
type Op string

// RunnerOp names one control operation of an adapter-runner.
type RunnerOp string

// Every operation on NATS, in one block: first the request API, served as
// nats micro endpoints on APISubject(ns, op), each taking the request
// struct named beside it and answering with the response struct, or an
// error (see package rpc); then runner control, request/reply on
// RunnerSubject(id, op), whose requests carry the session in
// HeaderNamespace and HeaderSessionID.
const (
	OpOpenSession Op = "open_session" // AcpOpenSessionRequest → AcpOpenSessionResponse
	OpPrompt      Op = "prompt"       // AcpPromptRequest → AcpPromptResponse
	OpReadHistory Op = "read_history" // AcpReadHistoryRequest → AcpHistoryPageResponse
	OpGetSession  Op = "get_session"  // AcpGetDurableSessionRequest → AcpGetDurableSessionResponse
	// OpListSessions: AcpListDurableSessionsRequest → AcpListDurableSessionsResponse.
	OpListSessions Op = "list_sessions"
	OpListAgents   Op = "list_agents" // AcpListAgentsRequest → AcpListAgentsResponse
	// OpCancelPrompt: AcpCancelPromptRequest → AcpCancelPromptResponse.
	OpCancelPrompt Op = "cancel_prompt"
	// OpGetSessionConfig: AcpGetSessionConfigRequest → AcpSessionConfigResponse.
	OpGetSessionConfig Op = "get_session_config"
	// OpGetSessionCapabilities: AcpGetSessionCapabilitiesRequest → AcpSessionCapabilitiesResponse.
	OpGetSessionCapabilities Op = "get_session_capabilities"
	// OpGetSessionAgentInfo: AcpGetSessionAgentInfoRequest → AcpSessionAgentInfoResponse.
	OpGetSessionAgentInfo Op = "get_session_agent_info"
	// OpSetSessionConfigOption: AcpSetSessionConfigOptionRequest → AcpSessionConfigResponse.
	OpSetSessionConfigOption Op = "set_session_config_option"
	// OpDeleteSession: AcpDeleteSessionRequest → AcpDeleteSessionResponse.
	OpDeleteSession Op = "delete_session"
	// OpUnloadSession: AcpUnloadSessionRequest → AcpUnloadSessionResponse.
	OpUnloadSession Op = "unload_session"
	// OpRespondPermission: AcpRespondPermissionRequest → AcpRespondPermissionResponse.
	OpRespondPermission Op = "respond_permission"
	// OpRenameSession: RenameSessionRequest → RenameSessionResponse (title.go).
	OpRenameSession Op = "rename_session"
	// OpRespondInput: RespondInputRequest → RespondInputResponse (input.go).
	OpRespondInput Op = "respond_input"
	// OpWithdrawPrompt: WithdrawPromptRequest → PromptWithdrawn (queue.go).
	OpWithdrawPrompt Op = "withdraw_prompt"
	// OpGetSessionCommands: GetSessionCommandsRequest → SessionCommandsResponse (offers.go).
	OpGetSessionCommands Op = "get_session_commands"

	// Discard, fork and folders (fork.go).

	// OpDiscardSession: DiscardSessionRequest → DiscardSessionResponse.
	// Served by the session service: deletes the session as
	// OpDeleteSession does, but only while it is idle and holds no user
	// message; otherwise CodeSessionNotEmpty and nothing changes.
	OpDiscardSession Op = "discard_session"
	// OpForkSession: ForkSessionRequest → ForkSessionResponse. Served by
	// the session service replica that owns the new session.
	OpForkSession Op = "fork_session"
	// OpListDirectories: ListDirectoriesRequest → ListDirectoriesResponse.
	// Served by the adapter-runners, which hold the workspace the agents
	// work in.
	OpListDirectories Op = "list_directories"

	// Attachments (files.go).

	// OpFileBegin: FileBeginRequest → FileTransferResponse.
	OpFileBegin Op = "file_begin"
	// OpFileWrite: FileWriteRequest → FileWriteResponse.
	OpFileWrite Op = "file_write"
	// OpFileCommit: FileCommitRequest → FileCommitResponse.
	OpFileCommit Op = "file_commit"
	// OpFileCancel: FileCancelRequest → FileCancelResponse.
	OpFileCancel Op = "file_cancel"
	// OpFileList: FileListRequest → FileListResponse.
	OpFileList Op = "file_list"
	// OpFileRead: FileReadRequest → FileReadResponse.
	OpFileRead Op = "file_read"

	// Runner control.

	// RunnerCreate spawns an adapter and negotiates an ACP session:
	// AcpCreateSessionRequest → AcpSessionCreatedResponse.
	RunnerCreate RunnerOp = "create"
	// RunnerRestore spawns an adapter and brings back an earlier ACP session
	// by the restore ladder: session/resume (when advertised), then
	// session/load (its replay discarded), then, only if the agent says the
	// session is unknown, session/new: RestoreRequest (the
	// AcpResumeSessionRequest and the session's instruction settings) →
	// AdapterReady, whose Tier says which worked.
	RunnerRestore RunnerOp = "restore"
	// RunnerStatus reports on one adapter process (HeaderProcessID) and, with
	// HeaderTurnID, on one turn's session/prompt: AcpGetSessionStateRequest →
	// AdapterStatus. A new owner asks before taking over a turn.
	RunnerStatus RunnerOp = "status"
	// RunnerPrompt sends a turn's session/prompt: RunnerPromptRequest →
	// RunnerAck once it is written to the adapter's stdin. The answer
	// arrives on ACP_IO as an AdapterPromptResult with the same turn ID.
	RunnerPrompt RunnerOp = "prompt"
	// RunnerCancel sends session/cancel for a turn: RunnerCancelRequest →
	// RunnerAck once written.
	RunnerCancel RunnerOp = "cancel"
	// RunnerPermission answers a permission request seen on ACP_IO
	// (AdapterPermissionRequest): RunnerPermissionAnswer → RunnerAck once
	// the answer is written.
	RunnerPermission RunnerOp = "permission"
	// RunnerSetConfig sets one configuration option and waits for the
	// agent's answer: RunnerSetConfigRequest → RunnerConfigResponse.
	RunnerSetConfig RunnerOp = "set_config"
	// RunnerStop stops the adapter: AcpCloseSessionRequest → RunnerAck.
	RunnerStop RunnerOp = "stop"
	// RunnerInput answers an input request seen on ACP_IO
	// (AdapterInputRequest): RunnerInputAnswer → RunnerAck once written.
	RunnerInput RunnerOp = "input"
	// RunnerRemove removes a deleted session's files from the runner,
	// stopping its adapter there first if one is still hosted, and ends
	// its uploads in progress there, their partial files removed:
	// RunnerRemoveRequest → RunnerAck once they are gone. Any runner
	// answers, hosting the session or not (an upload outlives its
	// adapter, and lies on the runner its begin reached).
	RunnerRemove RunnerOp = "remove"
	// RunnerFile carries one file op to the runner that holds the
	// session's working directory: RunnerFileRequest → the op's response.
	RunnerFile RunnerOp = "file"
)
