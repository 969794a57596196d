package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestInterrupts: with a turn watched, the first Ctrl-C is the turn's and
// the second ends the command's context; with none, the first does.
func TestInterrupts(t *testing.T) {
	i, ctx := NewInterrupts(context.Background())
	ch, release := take(ctx)
	if !i.Interrupt() {
		t.Fatal("the watched turn did not take the first Ctrl-C")
	}
	select {
	case <-ch:
	default:
		t.Fatal("the turn was not told of the Ctrl-C")
	}
	if ctx.Err() != nil {
		t.Fatal("the first Ctrl-C ended the command")
	}
	if i.Interrupt() || ctx.Err() == nil {
		t.Fatal("the second Ctrl-C did not end the command")
	}
	release()

	i, ctx = NewInterrupts(context.Background())
	if i.Interrupt() || ctx.Err() == nil {
		t.Fatal("a Ctrl-C with no turn watched did not end the command")
	}
}

func TestExitCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{errors.New("x"), ExitError},
		{usagef("bad"), ExitUsage},
		{&TurnError{Cancelled: true}, ExitCancelled},
		{&TurnError{Err: &APIError{Code: "adapter_exited"}}, ExitTurnFailed},
		{&APIError{Status: 404, Code: "session_not_found"}, ExitNotFound},
		{&APIError{Status: 401, Code: "unauthenticated"}, ExitUnauth},
		{&APIError{Status: 403, Code: "forbidden"}, ExitUnauth},
		{&APIError{Status: 503, Code: "unavailable"}, ExitUnavailable},
		{&UnreachableError{Server: "http://x", Err: errors.New("refused")}, ExitUnavailable},
		{errInterrupted, ExitInterrupted},
		{fmt.Errorf("open s1: %w", context.Canceled), ExitInterrupted},
	} {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestServerURL(t *testing.T) {
	for _, tt := range []struct{ flag, env, want string }{
		{"", "", DefaultServer},
		{"", "http://gw:8080/", "http://gw:8080"},
		{"127.0.0.1:9000", "http://gw:8080", "http://127.0.0.1:9000"},
		{"https://skein.example.com", "", "https://skein.example.com"},
	} {
		if got := serverURL(tt.flag, tt.env); got != tt.want {
			t.Errorf("serverURL(%q, %q) = %q, want %q", tt.flag, tt.env, got, tt.want)
		}
	}
}
