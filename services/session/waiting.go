package session

import (
	"context"
	"log/slog"
	"slices"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Requests waiting for a person. An agent asks in two ways, a permission
// request (permissions.go) and an input request (inputs.go); both live by
// the same rules, kept here once:
//
//   - Open: the session's policy answers at once, or, when a person must,
//     the request becomes a durable event under the runner's correlation
//     ID and waits, with no timeout, among the waiting requests of its
//     turn, or of the session when the agent asked outside any turn (a
//     background task working on after end_turn).
//   - Answer: the first resolution wins, against cancels, exits, unloads,
//     deletion and other answers, all serialised by the session lock and
//     recorded in the log in that order; later ones are told what won.
//   - Terminate: a turn's requests end with the turn; the session's end
//     when its adapter exits, when it unloads and when it is deleted. The
//     adapter is answered cancelled (if it is still there) and each ending
//     is a terminal response event.
//   - Rebuild: a takeover reads a turn's open requests back from the log.
//
// What differs is the payload: the options a permission offers, the schema
// an input requests, and the wire types that carry them.

// waiting holds the requests waiting for a person's answer, oldest first.
type waiting struct {
	perms  []*permission
	inputs []*input
}

// empty reports whether no request waits.
func (w *waiting) empty() bool { return len(w.perms) == 0 && len(w.inputs) == 0 }

// waitingFor returns where the agent's request goes: the running turn's
// requests, or the session's own when no turn runs.
func (sess *session) waitingFor() *waiting {
	if sess.turn != nil {
		return &sess.turn.waiting
	}
	return &sess.late
}

// waitingWith returns the requests requestID waits among, the turn's or
// the session's, and its permission or its input; nil when it does not
// wait, with why not: the resolution that won, or unknown_request for an
// ID the session never had (or forgot).
func (sess *session) waitingWith(requestID string) (*waiting, *permission, *input, string) {
	lists := []*waiting{&sess.late}
	if sess.turn != nil {
		lists = append(lists, &sess.turn.waiting)
	}
	for _, w := range lists {
		if i := slices.IndexFunc(w.perms, func(p *permission) bool { return p.id == requestID }); i >= 0 {
			return w, w.perms[i], nil, ""
		}
		if i := slices.IndexFunc(w.inputs, func(in *input) bool { return in.id == requestID }); i >= 0 {
			return w, nil, w.inputs[i], ""
		}
	}
	if r, ok := sess.resolved[requestID]; ok {
		return nil, nil, nil, r.reason
	}
	return nil, nil, nil, events.ReasonUnknownRequest
}

// refuseRequest ends the agent's request that cannot wait, for failure:
// one of a turn fails the turn; one raised outside a turn has no turn to
// fail, and is logged. The adapter was answered cancelled already.
func (sess *session) refuseRequest(ctx context.Context, at ioPos, failure *events.Error) {
	if sess.turn != nil {
		sess.abortTurn(ctx, at, events.OutcomeFailed, failure)
		return
	}
	sess.lg.Warn("refused an agent's request outside a turn", events.LogKeyErr, failure)
}

// terminate ends every request of w with reason: the adapter is answered
// cancelled (if it is still there and reason is not its exit) and each
// ending is recorded as a terminal response event, all in one append.
func (sess *session) terminate(ctx context.Context, at ioPos, w *waiting, reason string) {
	if w.empty() {
		return
	}
	perms, inputs := w.perms, w.inputs
	w.perms, w.inputs = nil, nil
	if reason != events.ReasonAdapterExited && sess.adapter != nil {
		// A failure is logged; the request ends here either way.
		for _, p := range perms {
			sess.answer(ctx, sess.adapter, p.id, nil)
		}
		for _, in := range inputs {
			sess.answerInput(ctx, sess.adapter, in.id, inputResponseJSON(events.InputCancel, nil))
		}
	}
	ended := waiting{perms: perms, inputs: inputs}
	sess.resolveAll(&ended, reason)
	if _, err := sess.append(ctx, at, ended.terminals(reason)...); err != nil {
		if len(perms) > 0 {
			sess.svc.m.lostRecords.WithLabelValues("AcpDurablePermissionResponse").Add(float64(len(perms)))
		}
		if len(inputs) > 0 {
			sess.svc.m.lostRecords.WithLabelValues("InputResponse").Add(float64(len(inputs)))
		}
		sess.lg.Warn("record terminal requests", events.LogKeyErr, err)
		return
	}
	for _, p := range perms {
		sess.waited(p, permTerminal)
	}
}

// endLate ends the requests raised outside a turn, with reason: the
// adapter they were asked by is going (it exited, or the session unloads
// or is deleted).
func (sess *session) endLate(ctx context.Context, reason string) {
	if sess.late.empty() {
		return
	}
	sess.terminate(ctx, ioPos{}, &sess.late, reason)
	sess.project(ctx)
}

// adoptLate takes on, when the session is loaded, the requests raised
// outside a turn that an earlier owner left waiting, as its projection
// names them. Taking over an open turn, this owner hosts the same adapter:
// they wait on here. Otherwise it hosts none they could be answered
// through: the earlier adapter is told cancelled through its runner,
// should it still be there, and each ends recorded as session_unloaded.
// (An open turn's own requests are rebuilt or closed with the turn.)
func (sess *session) adoptLate(ctx context.Context) {
	st, err := events.ParseSessionState(sess.meta.Info.State)
	if err != nil || st.Status != events.StatusWaiting {
		return
	}
	known := func(id string) bool {
		w, _, _, _ := sess.waitingWith(id)
		_, resolved := sess.resolved[id]
		return w != nil || resolved
	}
	var orphans waiting
	for _, p := range st.Requests {
		if known(p.RequestID) {
			continue
		}
		perm, err := newPermission(p.RequestID, p.Request)
		if err != nil {
			perm = &permission{id: p.RequestID} // it can only be ended
		}
		orphans.perms = append(orphans.perms, perm)
	}
	for _, in := range st.Inputs {
		if known(in.RequestID) {
			continue
		}
		req, err := newInput(in.RequestID, in.Request)
		if err != nil {
			req = &input{id: in.RequestID}
		}
		orphans.inputs = append(orphans.inputs, req)
	}
	if orphans.empty() {
		return
	}
	if sess.adapter != nil {
		sess.late = orphans
		sess.project(ctx)
		return
	}
	if sess.meta.RunnerID != "" {
		old := &route{sess: sess, runner: events.RunnerID(sess.meta.RunnerID), processID: sess.meta.ProcessID}
		for _, p := range orphans.perms {
			sess.answer(ctx, old, p.id, nil) // a failure is logged: the adapter is gone, or never had it
		}
		for _, in := range orphans.inputs {
			sess.answerInput(ctx, old, in.id, inputResponseJSON(events.InputCancel, nil))
		}
	}
	sess.lg.Info("ending requests an earlier owner left waiting", "requests", len(orphans.perms)+len(orphans.inputs))
	sess.terminate(ctx, ioPos{}, &orphans, events.ReasonSessionUnloaded)
	sess.project(ctx)
}

// openRequests returns, oldest first, the requests among a turn's records
// that no response ended: what a takeover rebuilds and a reconcile ends.
// The log alone says it: their IDs are the runner's, which answers them to
// the adapter. A request whose options or schema cannot be read is left
// out (the runner checked it, so only a bug puts one there).
func openRequests(lg *slog.Logger, recs []*eventlog.Record) waiting {
	var open waiting
	unreadable := func(rec *eventlog.Record, err error) {
		lg.Warn("unreadable request in the log", events.LogKeySeq, rec.Sequence, events.LogKeyRecord, rec.Header.Get(events.HeaderRecord), events.LogKeyErr, err)
	}
	for _, rec := range recs {
		switch v, _ := events.Unmarshal(rec.Data); v := v.(type) {
		case *events.AcpDurablePermissionRequest:
			p, err := newPermission(v.RequestID, v.Request)
			if err != nil {
				unreadable(rec, err)
				continue
			}
			open.perms = append(open.perms, p)
		case *events.AcpDurablePermissionResponse:
			open.perms = slices.DeleteFunc(open.perms, func(p *permission) bool { return p.id == v.RequestID })
		case *events.InputRequest:
			in, err := newInput(v.RequestID, v.Request)
			if err != nil {
				unreadable(rec, err)
				continue
			}
			open.inputs = append(open.inputs, in)
		case *events.InputResponse:
			open.inputs = slices.DeleteFunc(open.inputs, func(in *input) bool { return in.id == v.RequestID })
		}
	}
	return open
}

// terminals are the response events that end every request of w with
// reason, unanswered: permissions first, then inputs.
func (w *waiting) terminals(reason string) []eventlog.Entry {
	entries := make([]eventlog.Entry, 0, len(w.perms)+len(w.inputs))
	for _, p := range w.perms {
		entries = append(entries, terminalPermission(p.id, reason))
	}
	for _, in := range w.inputs {
		entries = append(entries, terminalInput(in.id, reason))
	}
	return entries
}

// resolveAll remembers that every request of w ended with reason.
func (sess *session) resolveAll(w *waiting, reason string) {
	for _, p := range w.perms {
		sess.resolve(p.id, reason, "")
	}
	for _, in := range w.inputs {
		sess.resolve(in.id, reason, "")
	}
}
