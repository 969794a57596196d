package session

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// takeover continues a turn an earlier owner left open, when its adapter is
// still alive: the runner says the process runs and the prompt's call was
// written to it (answered or not, the answer is in ACP_IO). Everything
// the adapter said is safe in ACP_IO, so the new owner rebuilds the turn
// from the log (its key, hash, pending permission requests, last message),
// follows ACP_IO again from the last record the old owner applied, and the
// turn completes normally: nothing is lost, nothing appended twice (every
// applied record's ACP_IO sequence is on what it produced). It reports
// whether it took the turn over; if not, the caller closes the turn.
func (sess *session) takeover(ctx context.Context, turnID string, start uint64, recs []*eventlog.Record) bool {
	m := sess.meta
	if m.RunnerID == "" || m.ProcessID == "" || m.AcpSessionID == "" {
		return false
	}
	runner := events.RunnerID(m.RunnerID)
	r := &route{runner: runner, processID: m.ProcessID, acpSessionID: m.AcpSessionID, attachedAt: time.Now()}
	hdr := sess.runnerHeader(r)
	hdr.Set(events.HeaderCallID, turnID)
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	st, err := events.Call[events.AdapterStatus](cctx, sess.svc.nc, events.RunnerSubject(runner, events.RunnerStatus),
		&events.AcpGetSessionStateRequest{SessionID: m.AcpSessionID}, hdr)
	if err != nil || !st.Alive || !st.CallWritten {
		return false
	}

	accept := recs[0]
	t := &turn{id: turnID, callID: turnID, start: start, hash: accept.Header.Get(events.HeaderContentHash), done: make(chan struct{})}
	if key := accept.Header.Get(events.HeaderIdempotencyKey); key != "" {
		t.key = &key
	}
	resume, _ := strconv.ParseUint(accept.Header.Get(events.HeaderIOApplied), 10, 64)
	pending := map[string]*permission{}
	var order []string
	for _, rec := range recs {
		if io, err := strconv.ParseUint(rec.Header.Get(events.HeaderIOSeq), 10, 64); err == nil && io > resume {
			resume = io
		}
		switch v, _ := events.Unmarshal(rec.Data); v := v.(type) {
		case *events.AcpDurableSessionUpdate:
			if kind, _ := events.PublicJSONType(v.Update); kind == acpwire.UpdateAgentMessageChunk {
				t.lastMessage = v.Update
			}
			t.outputBytes += int64(len(v.Update))
		case *events.AcpDurablePermissionRequest:
			if p := sess.pendingFromIO(ctx, v, rec.Header); p != nil {
				pending[p.id] = p
				order = append(order, p.id)
			}
		case *events.AcpDurablePermissionResponse:
			delete(pending, v.RequestID)
		}
	}
	for _, id := range order {
		if p, ok := pending[id]; ok {
			t.perms = append(t.perms, p)
		}
	}

	r.applied = resume
	if r.sub, err = sess.svc.nc.Subscribe(events.IOTailSubject(sess.ns, sess.sid), func(msg *nats.Msg) { sess.onTail(r, msg) }); err != nil {
		return false
	}
	_ = r.sub.SetPendingLimits(-1, -1)
	sess.adapter = r
	sess.turn = t
	sess.lg.Info("took over the open turn", events.LogKeyTurn, turnID, events.LogKeyProcess, r.processID, events.LogKeySeq, resume)
	sess.svc.m.takeovers.Inc()
	sess.catchUp(r, 0)
	sess.project(ctx)
	return true
}

// pendingFromIO rebuilds a pending permission request from the ACP_IO
// record that asked it: the adapter's JSON-RPC id is needed to answer it,
// and only ACP_IO has it.
func (sess *session) pendingFromIO(ctx context.Context, req *events.AcpDurablePermissionRequest, hdr nats.Header) *permission {
	io, err := strconv.ParseUint(hdr.Get(events.HeaderIOSeq), 10, 64)
	if err != nil {
		return nil
	}
	rec, err := eventlog.At(ctx, sess.svc.js, events.StreamIO, io)
	if err != nil || rec == nil {
		return nil
	}
	cb, err := events.Decode[events.AcpHostRequestCallback](rec.Data)
	if err != nil {
		return nil
	}
	msg, err := acpwire.Parse(cb.Request)
	if err != nil || msg.ID == nil {
		return nil
	}
	parsed, err := acpwire.ParsePermissionRequest(msg.Params)
	if err != nil {
		return nil
	}
	p := &permission{id: req.RequestID, rpcID: json.RawMessage(append([]byte(nil), msg.ID...)), request: req.Request}
	for _, o := range parsed.Options {
		p.options = append(p.options, o.OptionID)
	}
	return p
}
