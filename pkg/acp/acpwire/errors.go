package acpwire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"skein.dev/pkg/acp"
)

// The kinds of this package's own failures, for errors.Is. Each *Error
// wraps exactly one of them. What a failure means to the caller, and so
// what a service reports, depends only on its kind:
var (
	// ErrProtocol: the adapter wrote something that is not ACP JSON-RPC
	// 2.0 (Parse, ParseSessionUpdate, ParsePermissionRequest, and a result
	// of the wrong shape in the typed helpers). The connection goes on.
	ErrProtocol = errors.New("not ACP")

	// ErrLineTooLong: the adapter wrote a line longer than
	// Options.MaxLineBytes. The connection has ended.
	ErrLineTooLong = errors.New("line too long")

	// ErrClosed: the connection is gone: the adapter closed its stdout,
	// reading it or writing its stdin failed, or Close was called.
	ErrClosed = errors.New("connection closed")

	// ErrInvalidArgument: the caller passed something that cannot be sent
	// (a raw value that is not JSON, a missing method, a bad id). Nothing
	// was written.
	ErrInvalidArgument = errors.New("invalid argument")
)

// Error is a failure of this package (not the agent's: that is an
// *RPCError). errors.Is(err, Kind) holds for its kind, and errors.Is and
// errors.As also see the cause, if any: errors.Is(err, io.EOF) is true
// for the Err of a Conn whose adapter closed its stdout.
type Error struct {
	Kind    error  // ErrProtocol, ErrLineTooLong, ErrClosed or ErrInvalidArgument
	Message string // what happened, for people
	Err     error  // the underlying cause (a read or write error), or nil
}

// Error returns "acpwire: <message>", then ": <cause>" when there is one.
func (e *Error) Error() string {
	if e.Err == nil {
		return "acpwire: " + e.Message
	}
	return "acpwire: " + e.Message + ": " + e.Err.Error()
}

// Unwrap returns the kind and, when there is one, the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// newError returns an *Error of kind with a formatted message.
func newError(kind, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), Err: cause}
}

// protocolError returns the error for something the adapter wrote that is
// not ACP.
func protocolError(format string, args ...any) error {
	return newError(ErrProtocol, nil, format, args...)
}

// invalidArgument reports a caller's bad argument: nothing was written.
func invalidArgument(format string, args ...any) error {
	return newError(ErrInvalidArgument, nil, format, args...)
}

// RPCError is a JSON-RPC error object: the agent's answer when a call
// fails, or what a client handler sends back with Conn.RespondError. It is
// the agent's error, not this package's: it wraps none of the kinds above.
// errors.As(err, new(*RPCError)) finds it in a chain.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"` // raw, as sent; nil when absent
}

// Error returns "acp error <code>: <message>", followed by data when there is
// some (truncated to 200 bytes): agents put the useful part there
// (TypeScript SDK: data.details; codex: data.message).
func (e *RPCError) Error() string {
	var b strings.Builder
	b.WriteString("acp error ")
	b.WriteString(strconv.Itoa(e.Code))
	b.WriteString(": ")
	b.WriteString(e.Message)
	if len(e.Data) > 0 {
		const limit = 200
		b.WriteString(" (data: ")
		if len(e.Data) > limit {
			b.Write(e.Data[:limit])
			b.WriteString("...")
		} else {
			b.Write(e.Data)
		}
		b.WriteString(")")
	}
	return b.String()
}

// IsUnknownSession reports whether err (anywhere in its chain) is an
// *RPCError with which an agent says it does not know the session a call
// named. Each accepted shape, and where it comes from:
//
//   - code CodeResourceNotFound (-32002), any message: the spec's answer
//     (TypeScript SDK RequestError.resourceNotFound).
//   - code CodeInternalError (-32603) with data.details "NotFoundError": an
//     error class name passed through by TypeScript agents (reported by the
//     Skein lead; not in the recorded transcripts).
//   - code CodeInternalError (-32603) whose data.details, data.message or
//     message says "session ... not found" (case-insensitive): the
//     TypeScript SDK example agent answers a prompt for an unknown session
//     with {"code":-32603,"message":"Internal error","data":{"details":"Session nope not found"}}
//     (testdata/transcripts/run-example-errors.log).
//   - code CodeInvalidParams (-32602) with the same wording in message or
//     data: gemini-cli 0.61.0 answers session/prompt for an unknown session
//     with {"code":-32602,"message":"Session not found: none"}
//     (run-gemini-0.61.0.log).
//
// The claude-agent-acp transcripts (run-caa-before-load.log,
// run-claude-agent-acp-mock-load.log) contain no unknown-session error: the
// session/load and session/resume there succeed.
//
// -32002 also means "file not found" for fs methods: ask this only about the
// answer to a call that named a session.
func IsUnknownSession(err error) bool {
	var e *RPCError
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case CodeResourceNotFound:
		return true
	case CodeInternalError, CodeInvalidParams:
		details := dataString(e.Data, "details")
		if e.Code == CodeInternalError && details == "NotFoundError" {
			return true
		}
		return saysSessionNotFound(e.Message) || saysSessionNotFound(details) ||
			saysSessionNotFound(dataString(e.Data, "message"))
	default:
		return false
	}
}

// saysSessionNotFound reports whether s mentions "session" followed later by
// "not found", ignoring case.
func saysSessionNotFound(s string) bool {
	s = strings.ToLower(s)
	i := strings.Index(s, "session")
	return i >= 0 && strings.Contains(s[i:], "not found")
}

// dataString returns the string member name of the object data, or "".
func dataString(data json.RawMessage, name string) string {
	var v []byte
	if getFields(data, field{Name: name, Value: &v}) != nil {
		return ""
	}
	s, _ := acp.StringValue(v)
	return s
}
