package adapterrunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/events"
)

func TestACPError(t *testing.T) {
	rpcErr := &acpwire.RPCError{Code: acpwire.CodeAuthRequired, Message: "Authentication required"}
	mapped := events.Errorf(events.CodeTimeout, "agent did not answer")
	tests := []struct {
		name     string
		err      error
		want     events.Code // "" when err must come back unchanged
		wantText string
	}{
		{"agent error", fmt.Errorf("session/new: %w", rpcErr), events.CodeAdapterError, "session/new: acp error -32000: Authentication required"},
		{"protocol", &acpwire.Error{Kind: acpwire.ErrProtocol, Message: "line is not JSON"}, events.CodeAdapterProtocol, "line is not JSON"},
		{"line too long", &acpwire.Error{Kind: acpwire.ErrLineTooLong, Message: "adapter wrote a line longer than 16 bytes"}, events.CodeLineTooLong, "longer than 16"},
		{"EOF", fmt.Errorf("prompt: %w", &acpwire.Error{Kind: acpwire.ErrClosed, Message: "adapter closed its stdout", Err: io.EOF}), events.CodeAdapterExited, "prompt: acpwire: adapter closed its stdout: EOF"},
		{"write failed", &acpwire.Error{Kind: acpwire.ErrClosed, Message: "write to adapter stdin", Err: errors.New("broken pipe")}, events.CodeAdapterExited, "broken pipe"},
		{"invalid argument", &acpwire.Error{Kind: acpwire.ErrInvalidArgument, Message: "session/prompt: prompt: raw value is not valid JSON"}, events.CodeInvalidRequest, "not valid JSON"},
		{"unknown kind", &acpwire.Error{Kind: errors.New("new kind"), Message: "m"}, events.CodeInternal, "m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := errors.AsType[*events.Error](acpError(tt.err))
			if !ok || got.Code != tt.want || !strings.Contains(got.Message, tt.wantText) {
				t.Errorf("acpError(%v) = %v, want %s containing %q", tt.err, got, tt.want, tt.wantText)
			}
		})
	}
	for _, err := range []error{nil, context.Canceled, fmt.Errorf("x: %w", context.DeadlineExceeded), mapped} {
		if got := acpError(err); got != err {
			t.Errorf("acpError(%v) = %v, want it unchanged", err, got)
		}
	}
}

// TestACPErrorFromConn maps the errors of a real connection's end.
func TestACPErrorFromConn(t *testing.T) {
	r, w := io.Pipe()
	c := acpwire.NewConn(r, io.Discard, acpwire.Options{})
	w.Close()
	<-c.Done()
	if e := events.AsError(acpError(c.Err())); e.Code != events.CodeAdapterExited {
		t.Errorf("acpError(Err() after EOF) = %v, want %s", e, events.CodeAdapterExited)
	}
	_, err := c.Call(t.Context(), acpwire.MethodSessionNew, nil)
	if e := events.AsError(acpError(err)); e.Code != events.CodeAdapterExited {
		t.Errorf("acpError(Call after EOF) = %v, want %s", e, events.CodeAdapterExited)
	}
	if e := events.AsError(acpError(c.Notify("", nil))); e.Code != events.CodeInvalidRequest {
		t.Errorf("acpError(Notify without a method) = %v, want %s", e, events.CodeInvalidRequest)
	}
}
