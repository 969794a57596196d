package session

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/nats-io/nuid"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// permission is a session/request_permission waiting for a caller's answer
// (policy ask).
type permission struct {
	id      string          // Skein's request ID: globally unique, never the adapter's
	rpcID   json.RawMessage // the adapter's JSON-RPC id, private
	options []string        // the exact option IDs on offer
	request events.JSON     // as stored: the ACP params without the private sessionId
}

// maxResolved bounds how many resolved request IDs a session remembers, to
// answer late responses with the reason that won.
const maxResolved = 10_000

// resolve remembers why requestID is no longer pending.
func (sess *session) resolve(requestID, reason string) {
	if sess.resolved == nil {
		sess.resolved = map[string]string{}
	}
	if len(sess.resolvedOrder) >= maxResolved {
		delete(sess.resolved, sess.resolvedOrder[0])
		sess.resolvedOrder = sess.resolvedOrder[1:]
	}
	sess.resolved[requestID] = reason
	sess.resolvedOrder = append(sess.resolvedOrder, requestID)
}

// onPermissionRequest handles session/request_permission: an automatic
// policy answers at once and nothing is stored or shown; policy ask makes
// the request a durable permission_request event and waits, with no
// timeout, for respondPermission, a cancel, the adapter's exit or the
// session's deletion, whichever comes first.
func (sess *session) onPermissionRequest(ctx context.Context, ioSeq uint64, r *route, msg *acpwire.Message) {
	if sess.turn == nil || r.drain != nil {
		// No turn wants it (or its turn was cancelled): cancelled at once.
		sess.reply(ctx, r, rpcResult(msg.ID, string(acpwire.PermissionCancelled())))
		return
	}
	if sess.opened.PermissionPolicy != events.PolicyAsk {
		reply, err := sess.decidePermission(msg)
		if err != nil {
			// The policy cannot answer: the adapter is told the request was
			// cancelled, and the turn fails.
			sess.reply(ctx, r, rpcResult(msg.ID, string(acpwire.PermissionCancelled())))
			sess.abortTurn(ctx, ioSeq, events.OutcomeFailed, events.AsError(err))
			return
		}
		sess.reply(ctx, r, reply)
		return
	}
	req, err := acpwire.ParsePermissionRequest(msg.Params)
	if err != nil {
		sess.reply(ctx, r, rpcError(msg.ID, acpwire.CodeInvalidParams, err.Error()))
		return
	}
	if len(sess.turn.perms) >= sess.svc.cfg.MaxPendingPermissions {
		sess.reply(ctx, r, rpcResult(msg.ID, string(acpwire.PermissionCancelled())))
		sess.abortTurn(ctx, ioSeq, events.OutcomeFailed, events.Errorf(events.CodePayloadTooLarge, "more than %d permission requests pending", sess.svc.cfg.MaxPendingPermissions))
		return
	}
	p := &permission{id: "perm_" + nuid.Next(), rpcID: append(json.RawMessage(nil), msg.ID...), request: withoutMember(msg.Params, "sessionId")}
	for _, o := range req.Options {
		p.options = append(p.options, o.OptionID)
	}
	if _, err := sess.append(ctx, ioSeq, eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurablePermissionRequest{RequestID: p.id, Request: p.request}}); err != nil {
		sess.reply(ctx, r, rpcResult(msg.ID, string(acpwire.PermissionCancelled())))
		sess.abortTurn(ctx, ioSeq, events.OutcomeFailed, events.AsError(err))
		return
	}
	sess.turn.perms = append(sess.turn.perms, p)
	sess.project(ctx)
}

// respond is respondPermission: the first resolution of a request wins,
// against cancels, exits, deletion and other responses, all serialised by
// the session lock and recorded in the log in that order.
func (sess *session) respond(ctx context.Context, requestID, optionID string) (*events.AcpRespondPermissionResponse, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.load(ctx); err != nil {
		return nil, err
	}
	if sess.opened == nil {
		// A request the session's deletion ended is answered, not an error.
		if reason, ok := sess.resolved[requestID]; ok {
			return notPending(reason), nil
		}
		return nil, events.Errorf(events.CodeSessionNotFound, "session %s does not exist", sess.sid)
	}
	var p *permission
	if t := sess.turn; t != nil {
		if i := slices.IndexFunc(t.perms, func(p *permission) bool { return p.id == requestID }); i >= 0 {
			p = t.perms[i]
		}
	}
	if p == nil {
		reason, ok := sess.resolved[requestID]
		if !ok {
			reason = events.ReasonUnknownRequest
		}
		return notPending(reason), nil
	}
	if !slices.Contains(p.options, optionID) {
		valid, _ := json.Marshal(p.options)
		return nil, events.Errorf(events.CodeInvalidPermissionOption, "option %q is not one of %s", optionID, valid)
	}
	r := sess.adapter
	if err := sess.reply(ctx, r, rpcResult(p.rpcID, string(acpwire.PermissionSelected(optionID)))); err != nil {
		// Not delivered: the adapter is gone. Its exit, applied next, makes
		// the request terminal; this response lost.
		return notPending(events.ReasonAdapterExited), nil
	}
	response := acpwire.PermissionSelected(optionID)
	if _, err := sess.append(ctx, 0, eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurablePermissionResponse{
		RequestID: p.id, Response: events.JSON(response), Status: events.PermissionAccepted,
	}}); err != nil {
		return nil, err
	}
	sess.turn.perms = slices.DeleteFunc(sess.turn.perms, func(x *permission) bool { return x == p })
	sess.resolve(p.id, events.ReasonAlreadyResolved)
	sess.project(ctx)
	return &events.AcpRespondPermissionResponse{Status: events.PermissionAccepted}, nil
}

func notPending(reason string) *events.AcpRespondPermissionResponse {
	return &events.AcpRespondPermissionResponse{Status: events.PermissionNotPending, Reason: &reason}
}

// terminatePermissions ends every pending request of the running turn with
// reason: the adapter is answered cancelled (if it is still there) and each
// ending is recorded as a terminal permission_response event.
func (sess *session) terminatePermissions(ctx context.Context, ioSeq uint64, reason string) {
	t := sess.turn
	if t == nil || len(t.perms) == 0 {
		return
	}
	perms := t.perms
	t.perms = nil
	entries := make([]eventlog.Entry, 0, len(perms))
	for _, p := range perms {
		if reason != events.ReasonAdapterExited && sess.adapter != nil {
			_ = sess.reply(ctx, sess.adapter, rpcResult(p.rpcID, string(acpwire.PermissionCancelled())))
		}
		reasonCopy := reason
		entries = append(entries, eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurablePermissionResponse{
			RequestID: p.id, Response: events.JSON(acpwire.PermissionCancelled()), Status: events.PermissionTerminal, Reason: &reasonCopy,
		}})
		sess.resolve(p.id, reason)
	}
	if _, err := sess.append(ctx, ioSeq, entries...); err != nil {
		sess.lg.Warn("record terminal permission requests", events.LogKeyErr, err)
	}
}

// reply sends a complete JSON-RPC response to an agent-to-client request.
func (sess *session) reply(ctx context.Context, r *route, response []byte) error {
	if r == nil {
		return events.ErrAdapterExited
	}
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	_, err := events.Call[events.RunnerAck](cctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerReply),
		&events.AcpHostRequestCallbackResponse{Response: response}, sess.runnerHeader(r))
	if err != nil {
		sess.lg.Warn("answer agent request", events.LogKeyErr, err)
	}
	return err
}

// decidePermission applies an automatic policy: allow_all picks allow_once,
// else allow_always; reject_all picks reject_once, else reject_always, and
// with neither on offer fails with permission_policy_unsatisfied.
func (sess *session) decidePermission(msg *acpwire.Message) ([]byte, error) {
	req, err := acpwire.ParsePermissionRequest(msg.Params)
	if err != nil {
		return nil, events.Errorf(events.CodeAdapterProtocol, "permission request: %v", err)
	}
	prefs := []string{acpwire.PermissionAllowOnce, acpwire.PermissionAllowAlways}
	if sess.opened.PermissionPolicy == events.PolicyRejectAll {
		prefs = []string{acpwire.PermissionRejectOnce, acpwire.PermissionRejectAlways}
	}
	for _, kind := range prefs {
		for _, o := range req.Options {
			if o.Kind == kind {
				return rpcResult(msg.ID, string(acpwire.PermissionSelected(o.OptionID))), nil
			}
		}
	}
	return nil, events.Errorf(events.CodePermissionPolicyUnsatisfied, "policy %s: the agent offered no %s or %s option", sess.opened.PermissionPolicy, prefs[0], prefs[1])
}

// withoutMember returns the JSON object obj without its member key, every
// other member's bytes unchanged. It keeps the adapter's private session ID
// out of public events.
func withoutMember(obj json.RawMessage, key string) events.JSON {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return events.JSON(obj)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return events.JSON(obj)
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return events.JSON(obj)
		}
		if k == key {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return events.JSON(b.Bytes())
}
