package session

import (
	"context"
	"slices"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/inputform"
	"skein.dev/pkg/events/rpc"
)

// Input requests (ACP elicitation/create) are requests waiting for a
// person (waiting.go): the request is a durable input_request event under
// the runner's correlation ID, and the first resolution wins, recorded as
// a durable input_response event. A session opened with InputPolicyDecline
// records the request and its decline together and answers at once.

// input is an elicitation/create waiting for a person's answer.
type input struct {
	id      string            // the runner's correlation ID, never the adapter's JSON-RPC id
	request events.JSON       // as stored: the ACP params without the private sessionId
	schema  *inputform.Schema // the requested schema, to check answers against
	// requested is when it was recorded here; zero for one rebuilt by a
	// takeover (asktimeout.go).
	requested time.Time
}

// newInput reads the requested schema of an input request.
func newInput(id string, request events.JSON) (*input, error) {
	schema, err := inputform.Parse(request)
	if err != nil {
		return nil, err
	}
	return &input{id: id, request: request, schema: schema}, nil
}

// clientCapabilities is what the session's adapter is told the client
// supports: form elicitation unless nobody will answer (InputPolicyDecline),
// when the runner's default, which has none, is left as it is (nil).
func (sess *session) clientCapabilities() events.JSON {
	if sess.opened.InputPolicy == events.InputPolicyDecline {
		return nil
	}
	return events.JSON(events.ClientCapabilitiesWithInput)
}

// onInputRequest handles an elicitation/create the runner forwarded.
func (sess *session) onInputRequest(ctx context.Context, at ioPos, r *route, req *events.AdapterInputRequest) {
	cancelled := inputResponseJSON(events.InputCancel, nil)
	if r.drain != nil {
		// Its turn was cancelled: cancelled at once.
		sess.answerInput(ctx, r, req.RequestID, cancelled)
		return
	}
	// Everything the adapter said before asking is in the log first.
	if !sess.commitOrFail(ctx) {
		sess.answerInput(ctx, r, req.RequestID, cancelled)
		return
	}
	in, err := newInput(req.RequestID, req.Request)
	if err != nil {
		// The runner checked it: only a runner of another version gets here.
		sess.svc.m.ioRejected.WithLabelValues("malformed_input").Inc()
		sess.answerInput(ctx, r, req.RequestID, cancelled)
		sess.refuseRequest(ctx, at, events.Errorf(events.CodeAdapterProtocol, "input request: %v", events.AsError(err).Message))
		return
	}
	w := sess.waitingFor()
	entries := []eventlog.Entry{{Kind: events.LogEvents, Value: &events.InputRequest{RequestID: in.id, Request: in.request}}}
	declined := sess.opened.InputPolicy == events.InputPolicyDecline
	if declined {
		// Nobody will answer: the request and its decline are recorded
		// together, before the agent hears of it.
		reason := events.ReasonInputPolicy
		entries = append(entries, eventlog.Entry{Kind: events.LogEvents, Value: &events.InputResponse{
			RequestID: in.id, Response: inputResponseJSON(events.InputDecline, nil), Status: events.PermissionTerminal, Reason: &reason,
		}})
	} else if len(w.inputs) >= sess.svc.cfg.MaxPendingPermissions {
		sess.answerInput(ctx, r, req.RequestID, cancelled)
		sess.refuseRequest(ctx, at, events.Errorf(events.CodePayloadTooLarge, "more than %d input requests pending", sess.svc.cfg.MaxPendingPermissions))
		return
	}
	if _, err := sess.append(ctx, at, entries...); err != nil {
		sess.answerInput(ctx, r, req.RequestID, cancelled)
		sess.refuseRequest(ctx, at, events.Errorf(events.CodeOutputLost,
			"the agent's input request could not be written to the session's log: %s", events.AsError(err).Message))
		return
	}
	if declined {
		sess.resolve(in.id, events.ReasonInputPolicy, "")
		sess.answerInput(ctx, r, in.id, inputResponseJSON(events.InputDecline, nil))
		return
	}
	in.requested = time.Now()
	w.inputs = append(w.inputs, in)
	sess.project(ctx)
}

// respondInput is respondInput: the first resolution of a request wins
// (waiting.go). Content that does not fit the requested schema is
// invalid_request, and nothing is written or sent.
func (sess *session) respondInput(ctx context.Context, req *events.RespondInputRequest) (*events.RespondInputResponse, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.load(ctx); err != nil {
		return nil, err
	}
	if sess.opened == nil {
		// A request the session's deletion ended is answered, not an error.
		if r, ok := sess.resolved[req.RequestID]; ok {
			return inputNotPending(r.reason), nil
		}
		return nil, events.Errorf(events.CodeSessionNotFound, "session %s does not exist", sess.sid)
	}
	w, _, in, reason := sess.waitingWith(req.RequestID)
	if in == nil {
		if w != nil {
			reason = events.ReasonUnknownRequest // a permission request's ID
		}
		r := inputNotPending(reason)
		r.ResolvedBy = winner(sess.resolved, req.RequestID, reason)
		return r, nil
	}
	if req.Action == events.InputAccept {
		if err := in.schema.Check(req.Content); err != nil {
			return nil, err
		}
	}
	response := inputResponseJSON(req.Action, req.Content)
	if err := sess.svc.refuseIfFull(ctx); err != nil {
		return nil, err
	}
	if err := sess.answerInput(ctx, sess.adapter, in.id, response); err != nil {
		// Not delivered: the adapter is gone. Its exit, applied next, makes
		// the request terminal; this answer lost.
		return inputNotPending(events.ReasonAdapterExited), nil
	}
	by := principal(ctx)
	if _, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogEvents, Header: principalHeader(by), Value: &events.InputResponse{
		RequestID: in.id, Response: response, Status: events.PermissionAccepted,
	}}); err != nil {
		return nil, err
	}
	w.inputs = slices.DeleteFunc(w.inputs, func(x *input) bool { return x == in })
	sess.resolve(in.id, events.ReasonAlreadyResolved, by)
	sess.project(ctx)
	return &events.RespondInputResponse{Status: events.PermissionAccepted}, nil
}

func inputNotPending(reason string) *events.RespondInputResponse {
	return &events.RespondInputResponse{Status: events.PermissionNotPending, Reason: &reason}
}

// terminalInput is the input_response that ends request id unanswered.
func terminalInput(id, reason string) eventlog.Entry {
	return eventlog.Entry{Kind: events.LogEvents, Value: &events.InputResponse{
		RequestID: id, Response: inputResponseJSON(events.InputCancel, nil), Status: events.PermissionTerminal, Reason: &reason,
	}}
}

// answerInput tells the adapter, through its runner, what became of input
// request requestID: response, the elicitation response. A failure is
// logged and returned.
func (sess *session) answerInput(ctx context.Context, r *route, requestID string, response events.JSON) error {
	if r == nil {
		return events.ErrAdapterExited
	}
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	_, err := rpc.Call[events.RunnerAck](cctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerInput),
		&events.RunnerInputAnswer{RequestID: requestID, Response: response}, r.header())
	if err != nil {
		sess.lg.Warn("answer an input request", events.LogKeyErr, err)
	}
	return err
}

func (s *Service) handleRespondInput(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.RespondInputRequest](data)
	if err != nil {
		return nil, err
	}
	sid, err := req.Validate()
	if err != nil {
		return nil, err
	}
	return s.session(ns, sid).respondInput(ctx, req)
}
