package session

import (
	"context"
	"time"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session/internal/applier"
)

// takeover continues a turn an earlier owner left open, when its adapter is
// still alive: the runner says the process runs and the prompt's call was
// written to it (answered or not, the answer is in ACP_IO). Everything
// the adapter said is safe in ACP_IO, so the new owner rebuilds the turn
// from the log (its key, hash, pending permission requests, last message),
// follows ACP_IO again from where the old owner's newest stamp says
// (HeaderIOResume: a sequence at or before every record it had not
// applied, and the last record number it applied; applier.Resume), and
// the turn completes
// normally: nothing is lost, nothing appended twice (every applied
// record's ACP_IO position is on what it produced). It reports
// whether it took the turn over; if not, the caller closes the turn.
func (sess *session) takeover(ctx context.Context, turnID string, start uint64, recs []*eventlog.Record) bool {
	m := sess.meta
	if m.RunnerID == "" || m.ProcessID == "" || m.AcpSessionID == "" {
		return false
	}
	runner := events.RunnerID(m.RunnerID)
	r := &route{sess: sess, runner: runner, processID: m.ProcessID, acpSessionID: m.AcpSessionID, attachedAt: time.Now()}
	hdr := r.header()
	hdr.Set(events.HeaderTurnID, turnID)
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	st, err := rpc.Call[events.AdapterStatus](cctx, sess.svc.nc, events.RunnerSubject(runner, events.RunnerStatus),
		&events.AcpGetSessionStateRequest{SessionID: m.AcpSessionID}, hdr)
	if err != nil {
		sess.lg.Info("the open turn's runner does not answer; closing the turn", events.LogKeyTurn, turnID, events.LogKeyRunner, m.RunnerID, events.LogKeyErr, err)
		return false
	}
	if !st.Alive || !st.PromptWritten {
		return false
	}

	accept := recs[0]
	// Its timings started on another replica: they are not observed here.
	t := &turn{id: turnID, start: start, hash: accept.Header.Get(events.HeaderContentHash), replied: true}
	if key := accept.Header.Get(events.HeaderIdempotencyKey); key != "" {
		t.key = &key
	}
	// stamp is the old owner's newest record that says where it was in
	// ACP_IO: the last carrying a resume point, or the acceptance.
	stamp := accept
	stalled := false
	for _, rec := range recs {
		if rec.Header.Get(events.HeaderIOResume) != "" {
			stamp = rec
		}
		switch v, _ := events.Unmarshal(rec.Data); v := v.(type) {
		case *events.AcpDurableSessionUpdate:
			if kind, _ := eventjson.Type(v.Update); kind == acp.UpdateAgentMessageChunk {
				t.lastMessage, t.lastMessageSeq = v.Update, rec.Sequence
			}
			t.outputBytes += int64(len(v.Update))
		case *events.TurnStall:
			stalled = v.Stalled // the last one says
		}
	}
	// The requests nobody answered wait on: the runner answers them to the
	// adapter by their IDs, so the log alone rebuilds them.
	t.waiting = openRequests(sess.lg, recs)

	point, ok := applier.ParseResumePoint(stamp.Header.Get(events.HeaderIOResume))
	if !ok {
		sess.lg.Warn("the open turn says not where its owner was in ACP_IO; closing the turn", events.LogKeyTurn, turnID, events.LogKeySeq, stamp.Sequence)
		return false
	}
	r.io = applier.Resume[*eventlog.Record](r.processID, point)
	if err := r.follow(point.From - 1); err != nil {
		return false
	}
	sess.adapter = r
	sess.turn = t
	t.setStalled(sess.svc.m, stalled)
	sess.lg.Info("took over the open turn", events.LogKeyTurn, turnID, events.LogKeyProcess, r.processID, "resume", point.String())
	sess.svc.m.takeovers.Inc()
	r.catchUp(ctx)
	sess.project(ctx)
	return true
}
