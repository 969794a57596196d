package acpwire

import (
	"encoding/json"
	"errors"

	"skein.dev/pkg/acp"
)

// Kind classifies a JSON-RPC message by shape: method and id make a request,
// method alone a notification, id with result or error a response.
type Kind int

// The kinds. The zero Kind is KindInvalid: a Message that Parse did not
// produce (for example a zero Message) may have it; Parse never returns one.
const (
	KindInvalid Kind = iota
	KindRequest
	KindNotification
	KindResponse
)

// String returns "request", "notification", "response" or "invalid".
func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	default:
		return "invalid"
	}
}

// Message is one JSON-RPC 2.0 message, kept as the bytes it arrived as.
//
// Raw is the exact line, without the trailing newline, byte for byte. ID,
// Params, Result and Error.Data are sub-slices of Raw (capped, so appending
// to one cannot overwrite Raw): unknown fields, unknown sessionUpdate
// variants, unknown content types and _meta pass through untouched because
// nothing is ever re-marshalled. Treat all of them as read-only.
//
// A Message that Conn synthesizes (see CallAsync) has Raw == nil.
type Message struct {
	Raw []byte

	// ID is the id exactly as sent: a JSON number or string (codex uses UUID
	// strings for its requests), or null in responses to unparseable input.
	// It is nil for notifications. Echo it back verbatim; never renumber.
	ID json.RawMessage

	// Method is set for requests and notifications.
	Method string

	// Params is the params value (object, array or null) or nil when absent.
	Params json.RawMessage

	// Result is the result value of a successful response (possibly the
	// literal null, which session/load may return) or nil.
	Result json.RawMessage

	// Error is set for error responses.
	Error *RPCError
}

// Kind returns the message's kind, derived from its fields.
func (m *Message) Kind() Kind {
	switch {
	case m.Method != "" && m.ID != nil:
		return KindRequest
	case m.Method != "":
		return KindNotification
	case m.ID != nil && (m.Result != nil || m.Error != nil):
		return KindResponse
	default:
		return KindInvalid
	}
}

// Parse decodes line as exactly one JSON-RPC 2.0 message. line must not
// include the newline that framed it; surrounding JSON whitespace is
// allowed and kept in Raw.
//
// Parse keeps line: Raw is line itself and the other raw fields point into
// it, so the caller must not modify line afterwards. Conn hands every
// callback a fresh copy.
//
// Anything that is not one JSON-RPC 2.0 message is an *Error of kind
// ErrProtocol: invalid JSON, batches (ACP does not use them), any
// other non-object, a missing or wrong "jsonrpc" (it must be the string
// "2.0"), a duplicated member name among jsonrpc/id/method/params/result/
// error, a method that is not a non-empty string, an id that is not a
// number, string or null, params that are not an object, array or null, a
// message with a method and a result or error, params without a method, a
// message with neither a method nor an id, a response with both or neither
// of result and error (even "error":null), and an error that is
// not an object with an integer code and a string message. Member names are
// case-sensitive; unknown members are ignored (and kept in Raw).
//
// Parse never panics.
func Parse(line []byte) (*Message, error) {
	var version, id, method, params, result, rpcErr []byte
	err := getFields(line,
		field{Name: "jsonrpc", Value: &version}, field{Name: "id", Value: &id}, field{Name: "method", Value: &method},
		field{Name: "params", Value: &params}, field{Name: "result", Value: &result}, field{Name: "error", Value: &rpcErr})
	switch {
	case errors.Is(err, errNotJSON):
		return nil, protocolError("line is not JSON")
	case errors.Is(err, errNotObject) && trimSpace(line)[0] == '[':
		return nil, protocolError("JSON-RPC batches are not used by ACP")
	case errors.Is(err, errNotObject):
		return nil, protocolError("message is a JSON %s, not an object", valueType(trimSpace(line)))
	case err != nil:
		return nil, protocolError("%v", err)
	}
	if v, ok := acp.StringValue(version); !ok || v != "2.0" {
		return nil, protocolError(`"jsonrpc" is %s, want "2.0"`, describe(version))
	}
	m := &Message{Raw: line}
	if id != nil {
		switch valueType(id) {
		case "number", "string", "null":
			m.ID = id
		default:
			return nil, protocolError(`"id" is a JSON %s`, valueType(id))
		}
	}
	if params != nil {
		switch valueType(params) {
		case "object", "array", "null":
			m.Params = params
		default:
			return nil, protocolError(`"params" is a JSON %s`, valueType(params))
		}
	}
	if method != nil {
		name, ok := acp.StringValue(method)
		if !ok || name == "" {
			return nil, protocolError(`"method" is %s, want a non-empty string`, describe(method))
		}
		if result != nil || rpcErr != nil {
			return nil, protocolError("message has a method and a result or error")
		}
		m.Method = name
		return m, nil
	}
	if params != nil {
		return nil, protocolError("message has params but no method")
	}
	if id == nil {
		return nil, protocolError("message has neither a method nor an id")
	}
	switch {
	case result != nil && rpcErr != nil:
		return nil, protocolError("response has both result and error")
	case result != nil:
		m.Result = result
	case rpcErr != nil:
		e, err := parseRPCError(rpcErr)
		if err != nil {
			return nil, err
		}
		m.Error = e
	default:
		return nil, protocolError("response has neither result nor error")
	}
	return m, nil
}

// parseRPCError decodes the error member of a response.
func parseRPCError(v []byte) (*RPCError, error) {
	if valueType(v) != "object" {
		return nil, protocolError(`"error" is a JSON %s, want an object`, valueType(v))
	}
	var code, msg, data []byte
	if err := getFields(v, field{Name: "code", Value: &code}, field{Name: "message", Value: &msg}, field{Name: "data", Value: &data}); err != nil {
		return nil, protocolError("error object: %v", err)
	}
	n, ok := integer(code)
	if !ok || n < minInt || n > maxInt {
		return nil, protocolError(`error "code" is %s, want an integer`, describe(code))
	}
	text, ok := acp.StringValue(msg)
	if !ok {
		return nil, protocolError(`error "message" is %s, want a string`, describe(msg))
	}
	return &RPCError{Code: int(n), Message: text, Data: data}, nil
}

// The int range, so that int(n) is exact on 32-bit platforms too.
const (
	maxInt = int64(^uint(0) >> 1)
	minInt = -maxInt - 1
)

// describe renders a raw value for an error message: absent, or its JSON
// type and (short) text.
func describe(v []byte) string {
	if v == nil {
		return "missing"
	}
	const limit = 40
	if len(v) > limit {
		return "a JSON " + valueType(v)
	}
	return string(v)
}
