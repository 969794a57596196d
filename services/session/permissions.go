package session

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
)

// permission is a session/request_permission waiting for a caller's answer
// (policy ask).
type permission struct {
	id      string      // the runner's correlation ID: globally unique, never the adapter's JSON-RPC id
	options []string    // the exact option IDs on offer
	request events.JSON // as stored: the ACP params without the private sessionId
	// requested is when its request was appended here; zero for one
	// rebuilt by a takeover, whose wait is not timed.
	requested time.Time
}

// waited observes how long p waited, ended as end (permAnswered or
// permTerminal).
func (sess *session) waited(p *permission, end string) {
	if !p.requested.IsZero() {
		sess.svc.m.permissionSeconds.WithLabelValues(end).Observe(time.Since(p.requested).Seconds())
	}
}

// newPermission reads the options of a permission request.
func newPermission(id string, request events.JSON) (*permission, error) {
	opts, err := acp.PermissionOptions(json.RawMessage(request))
	if err != nil {
		return nil, err
	}
	p := &permission{id: id, request: request}
	for _, o := range opts {
		p.options = append(p.options, o.OptionID)
	}
	return p, nil
}

// resolution is why a request is no longer pending, and who answered it.
type resolution struct{ reason, by string }

// maxResolved bounds how many resolved request IDs a session remembers, to
// answer late responses with the reason that won.
const maxResolved = 10_000

// resolve remembers why requestID is no longer pending, and the principal
// whose answer resolved it (by; "" for none named, or no person: a policy,
// the turn's end).
func (sess *session) resolve(requestID, reason, by string) {
	if sess.resolved == nil {
		sess.resolved = map[string]resolution{}
	}
	if len(sess.resolvedOrder) >= maxResolved {
		delete(sess.resolved, sess.resolvedOrder[0])
		sess.resolvedOrder = sess.resolvedOrder[1:]
	}
	sess.resolved[requestID] = resolution{reason: reason, by: by}
	sess.resolvedOrder = append(sess.resolvedOrder, requestID)
}

// onPermissionRequest handles session/request_permission under the rules
// of waiting requests (waiting.go): an automatic policy answers at once
// and nothing is stored or shown; policy ask makes the request a durable
// permission_request event and waits for respondPermission. The request's
// ID is the runner's correlation ID: it is the public requestId too.
func (sess *session) onPermissionRequest(ctx context.Context, at ioPos, r *route, req *events.AdapterPermissionRequest) {
	if r.drain != nil {
		// Its turn was cancelled: cancelled at once.
		sess.answer(ctx, r, req.RequestID, nil)
		return
	}
	// Everything the adapter said before asking is in the log first.
	if !sess.commitOrFail(ctx) {
		sess.answer(ctx, r, req.RequestID, nil)
		return
	}
	p, err := newPermission(req.RequestID, req.Request)
	if err != nil {
		sess.svc.m.ioRejected.WithLabelValues("malformed_permission").Inc()
		sess.answer(ctx, r, req.RequestID, nil)
		sess.refuseRequest(ctx, at, events.Errorf(events.CodeAdapterProtocol, "permission request: %v", err))
		return
	}
	if sess.opened.PermissionPolicy != events.PolicyAsk {
		optionID, err := sess.decidePermission(req.Request)
		if err != nil {
			// The policy cannot answer: the adapter is told the request was
			// cancelled, and its turn fails.
			sess.answer(ctx, r, req.RequestID, nil)
			sess.refuseRequest(ctx, at, events.AsError(err))
			return
		}
		sess.answer(ctx, r, req.RequestID, &optionID)
		return
	}
	w := sess.waitingFor()
	if len(w.perms) >= sess.svc.cfg.MaxPendingPermissions {
		sess.answer(ctx, r, req.RequestID, nil)
		sess.refuseRequest(ctx, at, events.Errorf(events.CodePayloadTooLarge, "more than %d permission requests pending", sess.svc.cfg.MaxPendingPermissions))
		return
	}
	if _, err := sess.append(ctx, at, eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurablePermissionRequest{RequestID: p.id, Request: p.request}}); err != nil {
		// The log did not take the request (after the writer's retries):
		// a fault, not the turn's doing.
		sess.answer(ctx, r, req.RequestID, nil)
		sess.refuseRequest(ctx, at, events.Errorf(events.CodeOutputLost,
			"the agent's permission request could not be written to the session's log: %s", events.AsError(err).Message))
		return
	}
	p.requested = time.Now()
	w.perms = append(w.perms, p)
	sess.project(ctx)
}

// respond is respondPermission: the first resolution of a request wins
// (waiting.go).
func (sess *session) respond(ctx context.Context, requestID, optionID string) (*events.AcpRespondPermissionResponse, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.load(ctx); err != nil {
		return nil, err
	}
	if sess.opened == nil {
		// A request the session's deletion ended is answered, not an error.
		if r, ok := sess.resolved[requestID]; ok {
			return notPending(r.reason), nil
		}
		return nil, events.Errorf(events.CodeSessionNotFound, "session %s does not exist", sess.sid)
	}
	w, p, _, reason := sess.waitingWith(requestID)
	if p == nil {
		if w != nil {
			reason = events.ReasonUnknownRequest // an input request's ID
		}
		r := notPending(reason)
		r.ResolvedBy = winner(sess.resolved, requestID, reason)
		return r, nil
	}
	if !slices.Contains(p.options, optionID) {
		return nil, events.Errorf(events.CodeInvalidPermissionOption, "option %q is not one of %s", events.Truncate(optionID, 64), offered(p.options))
	}
	// The answer is delivered before it is recorded: not while the store
	// refuses writes, when the agent would act on an answer the log
	// cannot have.
	if err := sess.svc.refuseIfFull(ctx); err != nil {
		return nil, err
	}
	owe := false
	if err := sess.answer(ctx, sess.adapter, p.id, &optionID); err != nil {
		if sess.adapter == nil || !sess.svc.runners.isEdge(sess.adapter.runner) {
			// Not delivered: the adapter is gone. Its exit, applied
			// next, makes the request terminal; this response lost.
			return notPending(events.ReasonAdapterExited), nil
		}
		owe = true // an edge runner's link is down, maybe (owed.go)
	}
	response := acp.PermissionSelected(optionID)
	by := principal(ctx)
	if _, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogEvents, Header: principalHeader(by), Value: &events.AcpDurablePermissionResponse{
		RequestID: p.id, Response: events.JSON(response), Status: events.PermissionAccepted,
	}}); err != nil {
		return nil, err
	}
	if owe {
		sess.adapter.owe(p.id, &optionID)
	}
	sess.waited(p, permAnswered)
	w.perms = slices.DeleteFunc(w.perms, func(x *permission) bool { return x == p })
	sess.resolve(p.id, events.ReasonAlreadyResolved, by)
	sess.project(ctx)
	return &events.AcpRespondPermissionResponse{Status: events.PermissionAccepted}, nil
}

func notPending(reason string) *events.AcpRespondPermissionResponse {
	return &events.AcpRespondPermissionResponse{Status: events.PermissionNotPending, Reason: &reason}
}

// winner is the principal whose answer resolved requestID, for a late
// answer's outcome (reason already_resolved); nil when none is named.
func winner(resolved map[string]resolution, requestID, reason string) *string {
	if by := resolved[requestID].by; by != "" && reason == events.ReasonAlreadyResolved {
		return &by
	}
	return nil
}

// terminalPermission is the permission_response that ends request id
// unanswered.
func terminalPermission(id, reason string) eventlog.Entry {
	return eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurablePermissionResponse{
		RequestID: id, Response: events.JSON(acp.PermissionCancelled()), Status: events.PermissionTerminal, Reason: &reason,
	}}
}

// answer tells the adapter, through its runner, what became of permission
// request requestID: optionID selected, or cancelled when nil. A failure is
// logged and returned.
func (sess *session) answer(ctx context.Context, r *route, requestID string, optionID *string) error {
	if r == nil {
		return events.ErrAdapterExited
	}
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	_, err := rpc.Call[events.RunnerAck](cctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerPermission),
		&events.RunnerPermissionAnswer{RequestID: requestID, OptionID: optionID}, r.header())
	if err != nil {
		sess.lg.Warn("answer a permission request", events.LogKeyErr, err)
	}
	return err
}

// decidePermission applies an automatic policy to a permission request's
// params and returns the option it picks: allow_all picks allow_once, else
// allow_always; reject_all picks reject_once, else reject_always, and with
// neither on offer fails with permission_policy_unsatisfied.
func (sess *session) decidePermission(request events.JSON) (string, error) {
	opts, err := acp.PermissionOptions(json.RawMessage(request))
	if err != nil {
		return "", events.Errorf(events.CodeAdapterProtocol, "permission request: %v", err)
	}
	prefs := []string{acp.PermissionAllowOnce, acp.PermissionAllowAlways}
	if sess.opened.PermissionPolicy == events.PolicyRejectAll {
		prefs = []string{acp.PermissionRejectOnce, acp.PermissionRejectAlways}
	}
	for _, kind := range prefs {
		for _, o := range opts {
			if o.Kind == kind {
				return o.OptionID, nil
			}
		}
	}
	return "", events.Errorf(events.CodePermissionPolicyUnsatisfied, "policy %s: the agent offered no %s or %s option", sess.opened.PermissionPolicy, prefs[0], prefs[1])
}

// offered lists the options of a permission request for an error message:
// an agent may offer any number, of any length, and the message stays
// short.
func offered(options []string) string {
	const most, long = 8, 64
	shown := make([]string, 0, min(len(options), most))
	for _, o := range options[:min(len(options), most)] {
		shown = append(shown, strconv.Quote(events.Truncate(o, long)))
	}
	list := "[" + strings.Join(shown, ", ")
	if n := len(options) - len(shown); n > 0 {
		list += fmt.Sprintf(", and %d more", n)
	}
	return list + "]"
}
