package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"skein.dev/pkg/events"
)

// The exit codes of the skein binary, documented in docs/CLI.md. A script
// tells from them what happened without reading the message.
const (
	ExitOK          = 0   // the command did what it was asked
	ExitError       = 1   // any failure without a code of its own
	ExitUsage       = 2   // a bad flag, argument or combination of them
	ExitCancelled   = 3   // the turn ended cancelled (Ctrl-C, skein cancel, a rejected permission)
	ExitTurnFailed  = 4   // the turn failed (the agent's error, its exit, a lost prompt)
	ExitNotFound    = 5   // no such session, agent, file or request
	ExitUnauth      = 6   // no token, a wrong one, or one that does not allow the request
	ExitUnavailable = 7   // the gateway cannot be reached or says it is unavailable
	ExitInterrupted = 130 // a second Ctrl-C: the command stopped before the turn's end was known
)

// UsageError is a command line that cannot run as written: cobra's flag
// and argument errors, and the commands' own checks of what they were
// given.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usagef returns a *UsageError.
func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// TurnError is how a turn ended when it did not end well: cancelled (by
// Ctrl-C, skein cancel, or an agent that stopped on a cancelled
// permission) or failed with the gateway's error. The turn's renderer has
// already printed it; the error carries the exit code.
type TurnError struct {
	Cancelled bool
	Err       error // the failure; nil for a cancelled turn
}

func (e *TurnError) Error() string {
	if e.Cancelled {
		return "the turn was cancelled"
	}
	return "the turn failed: " + e.Err.Error()
}

func (e *TurnError) Unwrap() error { return e.Err }

// errInterrupted is a command stopped by a second Ctrl-C.
var errInterrupted = errors.New("interrupted")

// UnreachableError is a request that never got an answer from the
// gateway: refused, reset, or a name that does not resolve.
type UnreachableError struct {
	Server string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the gateway at %s: %v", e.Server, unwrapURL(e.Err))
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// unwrapURL drops the *url.Error's "Get "…": " prefix, which repeats the
// server the message names already.
func unwrapURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// isTransport reports whether err is a failure to talk to the server at
// all, rather than an answer or a cancelled context.
func isTransport(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// turnFailureCodes are the error codes with which a prompt reports a turn
// that was accepted, or could not start, and failed: the codes of the
// registry's turn group, and the deadline and internal failures.
var turnFailureCodes = map[string]bool{
	string(events.CodePromptDeliveryUncertain):     true,
	string(events.CodeAgentUnavailable):            true,
	string(events.CodeAgentNotInstalled):           true,
	string(events.CodeAdapterExited):               true,
	string(events.CodeAdapterError):                true,
	string(events.CodeAdapterProtocol):             true,
	string(events.CodeLineTooLong):                 true,
	string(events.CodePermissionPolicyUnsatisfied): true,
	string(events.CodeMessageTooLarge):             true,
	string(events.CodeTurnOutputTooLarge):          true,
	string(events.CodeOutputLost):                  true,
	string(events.CodeTimeout):                     true,
	string(events.CodeInternal):                    true,
}

// ExitCode returns the exit code of a command that returned err.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, errInterrupted) || errors.Is(err, context.Canceled) {
		// Ctrl-C (or SIGTERM) ended the command's context mid-request.
		return ExitInterrupted
	}
	if te, ok := errors.AsType[*TurnError](err); ok {
		if te.Cancelled {
			return ExitCancelled
		}
		return ExitTurnFailed
	}
	if _, ok := errors.AsType[*UsageError](err); ok {
		return ExitUsage
	}
	if _, ok := errors.AsType[*UnreachableError](err); ok {
		return ExitUnavailable
	}
	if e, ok := errors.AsType[*APIError](err); ok {
		switch {
		case e.Code == string(events.CodeUnauthenticated) || e.Code == string(events.CodeForbidden) || e.Status == 401 || e.Status == 403:
			return ExitUnauth
		case e.Code == string(events.CodeSessionNotFound) || e.Code == string(events.CodeUnknownAgent) ||
			e.Code == string(events.CodeFileNotFound) || e.Code == "not_found" || e.Status == 404:
			return ExitNotFound
		case e.Code == string(events.CodeUnavailable) || e.Status == 502 || e.Status == 503 || e.Status == 504:
			return ExitUnavailable
		}
	}
	return ExitError
}

// markUsage makes cobra's own errors (an unknown flag, a missing argument,
// an unknown command) usage errors, for every command under root.
func markUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Err: err} })
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if args := cmd.Args; args != nil {
			cmd.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return &UsageError{Err: err}
				}
				return nil
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// MarkUsage makes cobra's flag and argument errors of root and every
// command under it *UsageErrors (exit code ExitUsage). The binary calls it
// once every command is added.
func MarkUsage(root *cobra.Command) { markUsage(root) }

// Interrupts routes Ctrl-C. A turn being watched (skein prompt, skein
// attach) takes the first one and cancels the turn, waiting to print how
// it ended; anything else, and a second Ctrl-C, stops the command by
// cancelling its context.
type Interrupts struct {
	mu     sync.Mutex
	ch     chan struct{} // the taker's, nil when no turn is watched
	taken  bool          // a turn took one already
	cancel context.CancelFunc
}

// NewInterrupts returns the router of ctx's Ctrl-C presses, and the
// context it cancels when a press is not a turn's to handle.
func NewInterrupts(ctx context.Context) (*Interrupts, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	i := &Interrupts{cancel: cancel}
	return i, context.WithValue(ctx, interruptsKey{}, i)
}

type interruptsKey struct{}

// Interrupt delivers one Ctrl-C. It returns true when a watched turn took
// it, and false when it stopped the command (it was the second, or no
// turn was watched).
func (i *Interrupts) Interrupt() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.ch != nil && !i.taken {
		i.taken = true
		close(i.ch)
		return true
	}
	i.cancel()
	return false
}

// Stop cancels the command's context: SIGTERM, or the process ending.
func (i *Interrupts) Stop() { i.cancel() }

// take returns a channel closed by the next Ctrl-C of ctx, nil when ctx
// has no router (the channel then never delivers), and the function that
// gives the Ctrl-C back to the default.
func take(ctx context.Context) (<-chan struct{}, func()) {
	i, ok := ctx.Value(interruptsKey{}).(*Interrupts)
	if !ok {
		return nil, func() {}
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	ch := make(chan struct{})
	i.ch = ch
	return ch, func() {
		i.mu.Lock()
		defer i.mu.Unlock()
		if i.ch == ch {
			i.ch = nil
		}
	}
}

// Reported reports whether the command already told the user about err
// (a turn's end, printed as it ended), so that the binary does not print
// it again.
func Reported(err error) bool {
	if errors.Is(err, errInterrupted) {
		return true
	}
	_, ok := errors.AsType[*TurnError](err)
	return ok
}
