package acpwire_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"skein.dev/pkg/acp/acpwire"
)

func TestRPCErrorIdentity(t *testing.T) {
	rpcErr := &acpwire.RPCError{Code: acpwire.CodeAuthRequired, Message: "Authentication required"}
	wrapped := fmt.Errorf("session/new: %w", rpcErr)

	if got, ok := errors.AsType[*acpwire.RPCError](wrapped); !ok || got != rpcErr {
		t.Errorf("errors.AsType[*RPCError](%v) = %v, %t, want the original", wrapped, got, ok)
	}
	if got, ok := errors.AsType[*acpwire.Error](wrapped); ok {
		t.Errorf("errors.AsType[*Error](%v) = %v, want none: the agent's error is not the package's", wrapped, got)
	}
	for _, kind := range []error{acpwire.ErrProtocol, acpwire.ErrLineTooLong, acpwire.ErrClosed, acpwire.ErrInvalidArgument} {
		if errors.Is(wrapped, kind) {
			t.Errorf("errors.Is(%v, %v) = true, want false", wrapped, kind)
		}
	}
}

func TestErrorIdentity(t *testing.T) {
	kinds := []error{acpwire.ErrProtocol, acpwire.ErrLineTooLong, acpwire.ErrClosed, acpwire.ErrInvalidArgument}
	cause := errors.New("broken pipe")
	tests := []struct {
		err   *acpwire.Error
		cause error
		text  string
	}{
		{&acpwire.Error{Kind: acpwire.ErrProtocol, Message: "line is not JSON"}, nil, "acpwire: line is not JSON"},
		{&acpwire.Error{Kind: acpwire.ErrClosed, Message: "adapter closed its stdout", Err: io.EOF}, io.EOF, "acpwire: adapter closed its stdout: EOF"},
		{&acpwire.Error{Kind: acpwire.ErrClosed, Message: "write to adapter stdin", Err: cause}, cause, "acpwire: write to adapter stdin: broken pipe"},
	}
	for _, tt := range tests {
		wrapped := fmt.Errorf("call: %w", tt.err)
		for _, kind := range kinds {
			if got, want := errors.Is(wrapped, kind), kind == tt.err.Kind; got != want {
				t.Errorf("errors.Is(%v, %v) = %t, want %t", wrapped, kind, got, want)
			}
		}
		if tt.cause != nil && !errors.Is(wrapped, tt.cause) {
			t.Errorf("errors.Is(%v, %v) = false, want true", wrapped, tt.cause)
		}
		if got, ok := errors.AsType[*acpwire.Error](wrapped); !ok || got != tt.err {
			t.Errorf("errors.AsType[*Error](%v) = %v, %t, want the original", wrapped, got, ok)
		}
		if got := tt.err.Error(); got != tt.text {
			t.Errorf("Error() = %q, want %q", got, tt.text)
		}
	}
}

func TestRPCErrorString(t *testing.T) {
	tests := []struct {
		err  *acpwire.RPCError
		want string
	}{
		{&acpwire.RPCError{Code: -32601, Message: "Method not found"}, "acp error -32601: Method not found"},
		{&acpwire.RPCError{Code: -32603, Message: "Internal error", Data: raw(`{"details":"boom"}`)},
			`acp error -32603: Internal error (data: {"details":"boom"})`},
		{&acpwire.RPCError{Code: 1, Message: "m", Data: raw(`"` + strings.Repeat("x", 300) + `"`)},
			`acp error 1: m (data: "` + strings.Repeat("x", 199) + `...)`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestIsUnknownSession(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"resource not found", &acpwire.RPCError{Code: acpwire.CodeResourceNotFound, Message: "Resource not found", Data: raw(`"s1"`)}, true},
		{"NotFoundError details", &acpwire.RPCError{Code: acpwire.CodeInternalError, Message: "Internal error", Data: raw(`{"details":"NotFoundError"}`)}, true},
		// run-example-errors.log:11
		{"TS example agent", &acpwire.RPCError{Code: acpwire.CodeInternalError, Message: "Internal error", Data: raw(`{"details":"Session nope not found"}`)}, true},
		// run-gemini-0.61.0.log:6
		{"gemini", &acpwire.RPCError{Code: acpwire.CodeInvalidParams, Message: "Session not found: none"}, true},
		{"codex style data.message", &acpwire.RPCError{Code: acpwire.CodeInternalError, Message: "Internal error", Data: raw(`{"message":"session 01a2 not found"}`)}, true},
		{"wrapped", fmt.Errorf("prompt: %w", &acpwire.RPCError{Code: acpwire.CodeResourceNotFound}), true},

		// run-gemini-setmodel.log:4
		{"other internal error", &acpwire.RPCError{Code: acpwire.CodeInternalError, Message: "Internal error", Data: raw(`{"details":"Cannot enable privileged approval modes in an untrusted folder."}`)}, false},
		// run-example-errors.log:13
		{"invalid params", &acpwire.RPCError{Code: acpwire.CodeInvalidParams, Message: "Invalid params", Data: raw(`{"_errors":[],"mcpServers":{"_errors":["Invalid input: expected array, received undefined"]}}`)}, false},
		{"method not found mentioning a session", &acpwire.RPCError{Code: acpwire.CodeMethodNotFound, Message: "Session not found"}, false},
		{"auth required", &acpwire.RPCError{Code: acpwire.CodeAuthRequired, Message: "Authentication required"}, false},
		{"not found before session", &acpwire.RPCError{Code: acpwire.CodeInternalError, Message: "file not found in session"}, false},
		{"NotFoundError on invalid params", &acpwire.RPCError{Code: acpwire.CodeInvalidParams, Data: raw(`{"details":"NotFoundError"}`)}, false},
		{"package error", &acpwire.Error{Kind: acpwire.ErrClosed, Message: "session not found"}, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := acpwire.IsUnknownSession(tt.err); got != tt.want {
				t.Errorf("IsUnknownSession(%v) = %t, want %t", tt.err, got, tt.want)
			}
		})
	}
}
