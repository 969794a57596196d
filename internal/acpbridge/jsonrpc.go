package acpbridge

import (
	"encoding/json"
	"errors"
	"fmt"
)

// message is one JSON-RPC 2.0 message of either side: a request (method
// and id), a notification (method, no id) or a response (id, and result or
// error). ID keeps the sender's bytes, to be echoed verbatim.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// JSON-RPC's error codes, and ACP's for a resource that does not exist.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternal       = -32603
	codeAuthRequired   = -32000
	codeNotFound       = -32002
)

// rpcError is a JSON-RPC error. Data carries Skein's error code (the
// registry of pkg/events) when Skein refused: {"code": "session_busy"}.
type rpcError struct {
	Code    int        `json:"code"`
	Message string     `json:"message"`
	Data    *errorData `json:"data,omitempty"`
}

// errorData is the data of an error Skein answered.
type errorData struct {
	Code      string `json:"code"`
	RequestID string `json:"requestId,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }

// invalidParams is a request whose params are not what its method takes.
func invalidParams(format string, args ...any) *rpcError {
	return &rpcError{Code: codeInvalidParams, Message: fmt.Sprintf(format, args...), Data: &errorData{Code: "invalid_request"}}
}

// asRPCError turns an error of a method into its JSON-RPC error: Skein's
// refusals keep their code in data, and an unknown session is ACP's
// resource-not-found.
func asRPCError(err error) *rpcError {
	if e, ok := errors.AsType[*rpcError](err); ok {
		return e
	}
	e, ok := errors.AsType[*apiError](err)
	if !ok {
		return &rpcError{Code: codeInternal, Message: err.Error(), Data: &errorData{Code: "internal"}}
	}
	code := codeInternal
	switch e.Code {
	case "session_not_found", "file_not_found", "unknown_agent":
		code = codeNotFound
	case "invalid_request", "invalid_session_id", "invalid_cursor", "invalid_permission_option",
		"payload_too_large", "unsupported_content", "invalid_namespace":
		code = codeInvalidParams
	case "unauthenticated":
		code = codeAuthRequired
	}
	return &rpcError{Code: code, Message: e.Message, Data: &errorData{Code: e.Code, RequestID: e.RequestID}}
}

// isRequest, isNotification and isResponse classify a message.
func (m *message) isRequest() bool      { return m.Method != "" && m.ID != nil }
func (m *message) isNotification() bool { return m.Method != "" && m.ID == nil }
func (m *message) isResponse() bool {
	return m.Method == "" && m.ID != nil && (m.Result != nil || m.Error != nil)
}
