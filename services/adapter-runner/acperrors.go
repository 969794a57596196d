package adapterrunner

import (
	"errors"

	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/events"
)

// acpError maps an error from pkg/acp/acpwire, which imports nothing of Skein
// and so has its own errors, to the registry's code, the one place where
// that mapping is written:
//
//	*acpwire.RPCError (the agent answered with an error)  → adapter_error
//	acpwire.ErrProtocol (the agent wrote something not ACP) → adapter_protocol
//	acpwire.ErrLineTooLong (a line over the limit)           → line_too_long
//	acpwire.ErrClosed (the adapter's stdio is gone)          → adapter_exited
//	acpwire.ErrInvalidArgument (the runner passed a value
//	that cannot be sent: a caller's JSON, say)               → invalid_request
//
// The *events.Error it returns carries err's whole text (the context the
// caller wrapped around it included) as its message. nil, an error that is
// already an *events.Error, and any other error (ctx.Err(), ...) are
// returned unchanged, so acpError can be applied to whatever a call into
// acpwire returned. An agent's error wins over an acpwire error in the
// same chain: it is what the agent said.
func acpError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*events.Error](err); ok {
		return err
	}
	if _, ok := errors.AsType[*acpwire.RPCError](err); ok {
		return events.Errorf(events.CodeAdapterError, "%s", err.Error())
	}
	e, ok := errors.AsType[*acpwire.Error](err)
	if !ok {
		return err
	}
	code := events.CodeInternal // a kind added to acpwire and not mapped here: a bug
	switch e.Kind {
	case acpwire.ErrProtocol:
		code = events.CodeAdapterProtocol
	case acpwire.ErrLineTooLong:
		code = events.CodeLineTooLong
	case acpwire.ErrClosed:
		code = events.CodeAdapterExited
	case acpwire.ErrInvalidArgument:
		code = events.CodeInvalidRequest
	}
	return events.Errorf(code, "%s", err.Error())
}
