// Package errmap is the one place that turns an error code of the events
// registry into what an HTTP client sees: a status and a body. Nothing else
// in the gateway maps codes (DESIGN invariant 10, STYLE R8).
//
// Codes whose message may carry internals (a stack of wrapped Go errors, a
// subject, a decoding failure) are masked: the client sees code "internal"
// and a fixed message, and the caller logs the full error with the request
// ID that the client also sees.
package errmap

import (
	"errors"
	"net/http"

	"skein.dev/pkg/events"
)

// Entry says how the edge presents one code.
type Entry struct {
	// Status is the HTTP status of a response that fails with the code.
	Status int
	// Mask replaces the code and message with CodeInternal and
	// MaskedMessage, because the message is not meant for clients.
	Mask bool
}

// MaskedMessage is the message of every masked error.
const MaskedMessage = "internal error"

// table maps every code in events.Codes. TestTableCoversRegistry fails when
// a code is added to the registry without a row here.
var table = map[events.Code]Entry{
	// Bad input: nothing was changed, the caller must fix the request.
	events.CodeInvalidRequest:      {Status: http.StatusBadRequest},
	events.CodeInvalidNamespace:    {Status: http.StatusBadRequest},
	events.CodeInvalidSessionID:    {Status: http.StatusBadRequest},
	events.CodeInvalidCursor:       {Status: http.StatusBadRequest},
	events.CodePayloadTooLarge:     {Status: http.StatusRequestEntityTooLarge},
	events.CodeUnknownAgent:        {Status: http.StatusNotFound},
	events.CodeIdempotencyConflict: {Status: http.StatusConflict},
	// A block the session's agent did not advertise: the request is
	// well-formed, but this session cannot take it as it is.
	events.CodeUnsupportedContent: {Status: http.StatusBadRequest},
	// Access. The 401's message never says why a token was refused.
	events.CodeUnauthenticated: {Status: http.StatusUnauthorized},
	events.CodeForbidden:       {Status: http.StatusForbidden},
	// A bus payload that does not decode is a bug or version skew between
	// services: the gateway encodes every request itself.
	events.CodeInvalidPayload: {Status: http.StatusInternalServerError, Mask: true},

	// State.
	events.CodeSessionNotFound: {Status: http.StatusNotFound},
	events.CodeFileNotFound:    {Status: http.StatusNotFound},
	events.CodeNotQueued:       {Status: http.StatusNotFound},
	events.CodePromptDequeued:  {Status: http.StatusConflict},
	events.CodeSessionConflict: {Status: http.StatusConflict},
	events.CodeSessionBusy:     {Status: http.StatusConflict},
	events.CodeCursorExpired:   {Status: http.StatusGone},
	events.CodeSessionNotEmpty: {Status: http.StatusConflict},

	// Routing: a path no route has, or a method its routes do not take.
	events.CodeNotFound:         {Status: http.StatusNotFound},
	events.CodeMethodNotAllowed: {Status: http.StatusMethodNotAllowed},
	// The ACP endpoint's HTTP profile (/acp).
	events.CodeUnsupportedMediaType: {Status: http.StatusUnsupportedMediaType},
	events.CodeNotAcceptable:        {Status: http.StatusNotAcceptable},
	events.CodeStreamBusy:           {Status: http.StatusConflict},

	// Turns and adapters. The adapter is the upstream the gateway fronts,
	// so its failures are 502; a policy the adapter cannot satisfy and an
	// option it does not offer are the caller's to resolve.
	events.CodePromptDeliveryUncertain:     {Status: http.StatusBadGateway},
	events.CodeAgentUnavailable:            {Status: http.StatusServiceUnavailable},
	events.CodeAgentNotInstalled:           {Status: http.StatusServiceUnavailable}, // until a runner that has it is up
	events.CodeAdapterExited:               {Status: http.StatusBadGateway},
	events.CodeAdapterError:                {Status: http.StatusBadGateway},
	events.CodeAdapterProtocol:             {Status: http.StatusBadGateway},
	events.CodeLineTooLong:                 {Status: http.StatusBadGateway},
	events.CodePermissionPolicyUnsatisfied: {Status: http.StatusConflict},
	events.CodeInvalidPermissionOption:     {Status: http.StatusBadRequest},
	events.CodeMessageTooLarge:             {Status: http.StatusBadGateway},
	events.CodeTurnOutputTooLarge:          {Status: http.StatusBadGateway},
	// The turn ran and ended: a retry with its key answers this outcome
	// again, so it is not the retryable 503 of unavailable.
	events.CodeOutputLost:   {Status: http.StatusBadGateway},
	events.CodeEdgeLinkLost: {Status: http.StatusBadGateway},
	// A spending cap reached: not a conflict to retry (409) nor a rate to
	// wait out (429), but a payment matter no retry resolves until the
	// cap is raised, as 402 says; its own status, so a client can branch
	// on it without reading the body.
	events.CodeBudgetExhausted: {Status: http.StatusPaymentRequired},

	// The system. A write conflict means the writer lost ownership; the
	// next attempt reaches the new owner, so it is a retryable 503.
	events.CodeWriteConflict: {Status: http.StatusServiceUnavailable},
	events.CodeUnavailable:   {Status: http.StatusServiceUnavailable},
	// Not a 503: retrying does not help until an operator frees space.
	events.CodeStorageFull: {Status: http.StatusInsufficientStorage},
	events.CodeTimeout:     {Status: http.StatusGatewayTimeout},
	events.CodeRateLimited: {Status: http.StatusTooManyRequests},
	events.CodeInternal:    {Status: http.StatusInternalServerError, Mask: true},
}

// Lookup returns the entry of c, or false when c is not in the table.
func Lookup(c events.Code) (Entry, bool) {
	e, ok := table[c]
	return e, ok
}

// Public is what a client is told about a failure.
type Public struct {
	Status  int
	Code    events.Code
	Message string
	// Masked reports that Code and Message replace the real error, which
	// the caller must log in full.
	Masked bool
}

// Map returns what a client sees for err. An error that is not an
// *events.Error, or whose code the table does not know (a newer service
// speaking a newer registry), is masked as CodeInternal.
func Map(err error) Public {
	e, ok := errors.AsType[*events.Error](err)
	if !ok {
		return masked()
	}
	entry, known := table[e.Code]
	if !known || entry.Mask {
		return masked()
	}
	return Public{Status: entry.Status, Code: e.Code, Message: e.Message}
}

func masked() Public {
	return Public{
		Status:  http.StatusInternalServerError,
		Code:    events.CodeInternal,
		Message: MaskedMessage,
		Masked:  true,
	}
}
