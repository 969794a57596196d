package events

import (
	"errors"
	"fmt"
	"slices"
)

// Code is a stable, wire-visible error code. Codes are append-only: never
// renumber, rename or reuse one. Every code is listed in Codes.
type Code string

// The registry. Each code says what the caller did or what happened, so that
// a client can branch on it.
const (
	// Bad input. Nothing was changed.
	CodeInvalidRequest      Code = "invalid_request"      // malformed body, missing or contradictory fields
	CodeInvalidPayload      Code = "invalid_payload"      // a bus payload that does not decode
	CodeInvalidNamespace    Code = "invalid_namespace"    // namespace fails [a-z0-9][a-z0-9_-]{0,62}
	CodeInvalidSessionID    Code = "invalid_session_id"   // session ID fails [A-Za-z0-9_-]{1,128}
	CodeInvalidCursor       Code = "invalid_cursor"       // a history cursor that names no event of the session
	CodePayloadTooLarge     Code = "payload_too_large"    // over a configured size or count limit
	CodeUnknownAgent        Code = "unknown_agent"        // no registry entry has that agent ID
	CodeIdempotencyConflict Code = "idempotency_conflict" // same idempotency key, different content
	CodeUnsupportedContent  Code = "unsupported_content"  // a prompt block the session's agent did not advertise (promptCapabilities)

	// Access. Nothing was changed.
	CodeUnauthenticated Code = "unauthenticated" // no bearer token, or one that names no principal
	CodeForbidden       Code = "forbidden"       // the principal's role or namespaces do not allow the request

	// State.
	CodeSessionNotFound Code = "session_not_found" // no such session (or deleted)
	CodeSessionConflict Code = "session_conflict"  // reopening with different immutable options
	CodeSessionBusy     Code = "session_busy"      // a prompt is already running
	CodeCursorExpired   Code = "cursor_expired"    // the cursor is older than retained history
	CodeSessionNotEmpty Code = "session_not_empty" // discard: the session ran a turn or holds a user message
	CodeFileNotFound    Code = "file_not_found"    // no such file or upload transfer in the session's working directory
	CodeNotQueued       Code = "not_queued"        // no such entry in the session's prompt queue
	CodePromptDequeued  Code = "prompt_dequeued"   // the queue entry already started, or was withdrawn

	// HTTP routing, answered by the gateway alone. Nothing was changed.
	CodeNotFound         Code = "not_found"          // no route has that path
	CodeMethodNotAllowed Code = "method_not_allowed" // the path's routes take other methods (the Allow header lists them)
	// The ACP endpoint's HTTP profile (/acp): a request in a media type it
	// does not take or asking for one it does not give, and a stream that
	// already has its one receiver.
	CodeUnsupportedMediaType Code = "unsupported_media_type" // a body in a media type the route does not take
	CodeNotAcceptable        Code = "not_acceptable"         // an Accept header that admits nothing the route answers with
	CodeStreamBusy           Code = "stream_busy"            // the stream already has a receiver

	// Turns and adapters.
	CodePromptDeliveryUncertain     Code = "prompt_delivery_uncertain" // accepted, but no proof the adapter received it; never replayed
	CodeAgentUnavailable            Code = "agent_unavailable"         // no runner can host the agent now
	CodeAgentNotInstalled           Code = "agent_not_installed"       // runners know the agent, but its command does not resolve on them
	CodeAdapterExited               Code = "adapter_exited"            // the adapter process is gone
	CodeAdapterError                Code = "adapter_error"             // the adapter answered with a JSON-RPC error
	CodeAdapterProtocol             Code = "adapter_protocol"          // the adapter wrote something that is not ACP
	CodeLineTooLong                 Code = "line_too_long"             // an ACP line over the configured maximum
	CodePermissionPolicyUnsatisfied Code = "permission_policy_unsatisfied"
	CodeInvalidPermissionOption     Code = "invalid_permission_option"
	CodeMessageTooLarge             Code = "message_too_large"     // a completed message over its cap
	CodeTurnOutputTooLarge          Code = "turn_output_too_large" // a turn's output over its cap
	CodeOutputLost                  Code = "output_lost"           // accepted, then a fault kept some of the agent's output from the log
	CodeEdgeLinkLost                Code = "edge_link_lost"        // the link to the session's edge runner stayed down past session.edge-link-timeout
	CodeBudgetExhausted             Code = "budget_exhausted"      // the session's (or its namespace's daily) spending cap is reached

	// The system.
	CodeWriteConflict Code = "write_conflict" // the log moved under a writer: it is no longer the owner
	CodeUnavailable   Code = "unavailable"    // a dependency (NATS, a service) is not reachable; retry
	CodeStorageFull   Code = "storage_full"   // JetStream refuses writes: its store is at its limit; free space or raise the limit
	CodeTimeout       Code = "timeout"        // the operation's deadline passed
	CodeRateLimited   Code = "rate_limited"   // over the principal's request rate, or its streams or prompts open at once; retry after Retry-After
	CodeInternal      Code = "internal"       // a bug; details are in the server log only
)

// Codes lists every code once. TestCodesUnique checks it.
var Codes = []Code{
	CodeInvalidRequest, CodeInvalidPayload, CodeInvalidNamespace, CodeInvalidSessionID,
	CodeInvalidCursor, CodePayloadTooLarge, CodeUnknownAgent, CodeIdempotencyConflict,
	CodeSessionNotFound, CodeSessionConflict, CodeSessionBusy, CodeCursorExpired,
	CodePromptDeliveryUncertain, CodeAgentUnavailable, CodeAdapterExited, CodeAdapterError,
	CodeAdapterProtocol, CodeLineTooLong, CodePermissionPolicyUnsatisfied,
	CodeInvalidPermissionOption, CodeMessageTooLarge, CodeTurnOutputTooLarge,
	CodeWriteConflict, CodeUnavailable, CodeTimeout, CodeInternal,
	CodeAgentNotInstalled, CodeUnauthenticated, CodeForbidden,
	CodeRateLimited, CodeOutputLost, CodeSessionNotEmpty, CodeFileNotFound,
	CodeNotFound, CodeMethodNotAllowed, CodeUnsupportedContent,
	CodeUnsupportedMediaType, CodeNotAcceptable, CodeStreamBusy, CodeStorageFull,
	CodeEdgeLinkLost, CodeNotQueued, CodePromptDequeued, CodeBudgetExhausted,
}

// Known reports whether c is in the registry.
func (c Code) Known() bool {
	return slices.Contains(Codes, c)
}

// Error is the wire form of a failure. It travels as AcpErrorResponse in
// reply payloads and as the nats micro error headers.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is makes errors.Is(err, ErrSessionNotFound) true for any *Error with the
// same code, including one decoded from another process.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Response returns e as the protocol's AcpErrorResponse.
func (e *Error) Response() *AcpErrorResponse {
	return &AcpErrorResponse{Code: string(e.Code), Message: e.Message}
}

// Errorf returns an *Error with code c.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is. Their messages are generic; real errors carry
// specific ones.
var (
	ErrInvalidRequest    = &Error{Code: CodeInvalidRequest, Message: "invalid request"}
	ErrInvalidPayload    = &Error{Code: CodeInvalidPayload, Message: "invalid payload"}
	ErrSessionNotFound   = &Error{Code: CodeSessionNotFound, Message: "session not found"}
	ErrSessionBusy       = &Error{Code: CodeSessionBusy, Message: "a prompt is already running"}
	ErrCursorExpired     = &Error{Code: CodeCursorExpired, Message: "cursor is older than retained history"}
	ErrAgentUnavailable  = &Error{Code: CodeAgentUnavailable, Message: "no runner can host the agent"}
	ErrAdapterExited     = &Error{Code: CodeAdapterExited, Message: "adapter exited"}
	ErrWriteConflict     = &Error{Code: CodeWriteConflict, Message: "the session log moved under this writer"}
	ErrDeliveryUncertain = &Error{Code: CodePromptDeliveryUncertain, Message: "prompt delivery uncertain"}
	ErrUnavailable       = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrInternal          = &Error{Code: CodeInternal, Message: "internal error"}
)

// AsError returns err as an *Error. An error that is not one becomes
// CodeInternal, with err's text kept for the server log; the edge masks it.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}
