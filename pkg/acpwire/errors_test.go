package acpwire_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
)

func TestRPCErrorIdentity(t *testing.T) {
	rpcErr := &acpwire.RPCError{Code: acpwire.CodeAuthRequired, Message: "Authentication required"}
	wrapped := fmt.Errorf("session/new: %w", rpcErr)

	if !errors.Is(wrapped, &events.Error{Code: events.CodeAdapterError}) {
		t.Errorf("errors.Is(%v, CodeAdapterError) = false, want true", wrapped)
	}
	if errors.Is(wrapped, events.ErrAdapterExited) {
		t.Errorf("errors.Is(%v, ErrAdapterExited) = true, want false", wrapped)
	}
	if got, ok := errors.AsType[*acpwire.RPCError](wrapped); !ok || got != rpcErr {
		t.Errorf("errors.AsType[*RPCError](%v) = %v, %t, want the original", wrapped, got, ok)
	}
	e := events.AsError(wrapped)
	if e.Code != events.CodeAdapterError || !strings.Contains(e.Message, "-32000") {
		t.Errorf("events.AsError(%v) = %v, want %s naming -32000", wrapped, e, events.CodeAdapterError)
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
		{"events error", events.ErrSessionNotFound, false},
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
