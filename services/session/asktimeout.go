package session

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Unattended asks (issue 32 §5): with Config.AskTimeout set, a permission
// or input request nobody answered within it is answered by Skein with
// the safe answer: a permission's reject option (reject_once, else
// reject_always; cancelled when the agent offered neither), an input
// request's decline. The answer is recorded as a person's would be, with
// reason ask_timeout and principal "skein", and the request is then
// resolved: a person's answer after it is already_resolved, naming
// "skein".

// PrincipalSkein is the principal of what Skein answers by itself.
const PrincipalSkein = "skein"

// expireAsks answers the session's requests older than AskTimeout. The
// sweep calls it; the caller holds sess.mu.
func expireAsks(ctx context.Context, sess *session, now time.Time) {
	after, r := sess.svc.cfg.AskTimeout, sess.adapter
	if after <= 0 || r == nil {
		return
	}
	lists := []*waiting{&sess.late}
	if sess.turn != nil {
		lists = append(lists, &sess.turn.waiting)
	}
	answered := false
	reason := events.ReasonAskTimeout
	by := principalHeader(PrincipalSkein)
	for _, w := range lists {
		for _, p := range slices.Clone(w.perms) {
			if p.requested.IsZero() || now.Sub(p.requested) < after {
				continue
			}
			option, response := safePermission(p.request)
			if sess.answer(ctx, r, p.id, option) != nil {
				continue // the adapter is gone: its exit ends the request
			}
			if _, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogEvents, Header: by, Value: &events.AcpDurablePermissionResponse{
				RequestID: p.id, Response: events.JSON(response), Status: events.PermissionAccepted, Reason: &reason,
			}}); err != nil {
				sess.lg.Warn("record an unattended permission request's answer", events.LogKeyErr, err)
				return
			}
			sess.waited(p, permAnswered)
			w.perms = slices.DeleteFunc(w.perms, func(x *permission) bool { return x == p })
			sess.resolve(p.id, events.ReasonAlreadyResolved, PrincipalSkein)
			sess.svc.m.asksExpired.WithLabelValues("permission").Inc()
			answered = true
		}
		for _, in := range slices.Clone(w.inputs) {
			if in.requested.IsZero() || now.Sub(in.requested) < after {
				continue
			}
			response := inputResponseJSON(events.InputDecline, nil)
			if sess.answerInput(ctx, r, in.id, response) != nil {
				continue
			}
			if _, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogEvents, Header: by, Value: &events.InputResponse{
				RequestID: in.id, Response: response, Status: events.PermissionAccepted, Reason: &reason,
			}}); err != nil {
				sess.lg.Warn("record an unattended input request's answer", events.LogKeyErr, err)
				return
			}
			w.inputs = slices.DeleteFunc(w.inputs, func(x *input) bool { return x == in })
			sess.resolve(in.id, events.ReasonAlreadyResolved, PrincipalSkein)
			sess.svc.m.asksExpired.WithLabelValues("input").Inc()
			answered = true
		}
	}
	if answered {
		sess.project(ctx)
	}
}

// safePermission is the safe answer to a permission request: its reject
// option, preferring reject_once, and the ACP outcome that selects it; nil
// and cancelled when the agent offered no reject option.
func safePermission(request events.JSON) (*string, json.RawMessage) {
	opts, _ := acp.PermissionOptions(json.RawMessage(request))
	for _, kind := range []string{acp.PermissionRejectOnce, acp.PermissionRejectAlways} {
		for _, o := range opts {
			if o.Kind == kind {
				id := o.OptionID
				return &id, acp.PermissionSelected(id)
			}
		}
	}
	return nil, acp.PermissionCancelled()
}
