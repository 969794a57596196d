package acpwire

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"skein.dev/pkg/events"
)

// RPCError is a JSON-RPC error object: the agent's answer when a call
// fails, or what a client handler sends back with Conn.RespondError.
//
// As an error it belongs to events.CodeAdapterError: errors.Is(err,
// &events.Error{Code: events.CodeAdapterError}) is true for an *RPCError
// anywhere in err's chain, and errors.As(err, new(*events.Error)) (hence
// events.AsError) yields a CodeAdapterError *events.Error carrying the
// JSON-RPC code and message. errors.As to *RPCError gives the original.
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

// Is reports whether target is an *events.Error with code
// events.CodeAdapterError (its message is not compared).
func (e *RPCError) Is(target error) bool {
	t, ok := target.(*events.Error)
	return ok && t.Code == events.CodeAdapterError
}

// As sets *target to an events.CodeAdapterError *events.Error when target is
// a **events.Error, so that events.AsError does not turn an agent's error
// into CodeInternal.
func (e *RPCError) As(target any) bool {
	t, ok := target.(**events.Error)
	if !ok {
		return false
	}
	*t = events.Errorf(events.CodeAdapterError, "%s", e.Error())
	return true
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
	if !json.Valid(data) {
		return ""
	}
	var v []byte
	if getFields(data, field{name, &v}) != nil {
		return ""
	}
	s, _ := unquote(v)
	return s
}
