package session

import (
	"context"
	"encoding/json"
	"iter"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
)

// takeover continues a turn an earlier owner left open, when its adapter is
// still alive: the runner says the process runs and the prompt's call was
// written to it (answered or not, the answer is in ACP_IO). Everything
// the adapter said is safe in ACP_IO, so the new owner rebuilds the turn
// from the log (its key, hash, pending permission requests, last message),
// follows ACP_IO again from where the old owner's newest stamp says
// (HeaderIOResume: a sequence at or before every record it had not
// applied, and the last record number it applied), and the turn completes
// normally: nothing is lost, nothing appended twice (every applied
// record's ACP_IO position is on what it produced). It reports
// whether it took the turn over; if not, the caller closes the turn.
func (sess *session) takeover(ctx context.Context, turnID string, start uint64, recs []*eventlog.Record) bool {
	m := sess.meta
	if m.RunnerID == "" || m.ProcessID == "" || m.AcpSessionID == "" {
		return false
	}
	runner := events.RunnerID(m.RunnerID)
	r := &route{runner: runner, processID: m.ProcessID, acpSessionID: m.AcpSessionID, attachedAt: time.Now()}
	hdr := sess.runnerHeader(r)
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
	// ACP_IO: the last carrying a position, or the acceptance.
	stamp := accept
	for _, rec := range recs {
		if rec.Header.Get(events.HeaderIOSeq) != "" {
			stamp = rec
		}
		switch v, _ := events.Unmarshal(rec.Data); v := v.(type) {
		case *events.AcpDurableSessionUpdate:
			if kind, _ := eventjson.Type(v.Update); kind == acp.UpdateAgentMessageChunk {
				t.lastMessage, t.lastMessageSeq = v.Update, rec.Sequence
			}
			t.outputBytes += int64(len(v.Update))
		}
	}
	// The requests nobody answered wait on: the runner answers them to the
	// adapter by their IDs, so the log alone rebuilds them.
	t.waiting = openRequests(sess.lg, recs)

	resume := "an old log's"
	if point, ok := parseResumePoint(stamp.Header.Get(events.HeaderIOResume)); ok {
		resume = point.String()
		r.resumeAt(point)
	} else if !sess.resumeOld(ctx, r, stamp, t) {
		return false
	}
	if r.sub, err = sess.svc.nc.Subscribe(events.IOTailSubject(sess.ns, sess.sid), func(msg *nats.Msg) { sess.onTail(r, msg) }); err != nil {
		return false
	}
	_ = r.sub.SetPendingLimits(-1, -1)
	sess.adapter = r
	sess.turn = t
	sess.lg.Info("took over the open turn", events.LogKeyTurn, turnID, events.LogKeyProcess, r.processID, "resume", resume)
	sess.svc.m.takeovers.Inc()
	sess.catchUp(ctx, r, 0)
	sess.project(ctx)
	return true
}

// resumeAt sets r to continue from point, an old owner's stamp: read
// ACP_IO from point.from, where every record it had not applied lies; the
// records up to point.applied are read again only to hold the chunks from
// point.held on in memory (the message in progress, in the old owner's
// memory only: shown live already, and not republished), and what
// follows is applied as usual, in number order.
func (r *route) resumeAt(point resumePoint) {
	r.read, r.based = point.from-1, true
	r.recordNo = point.applied.no
	if point.held.no != 0 || point.applied.n != 0 {
		first := point.held
		if first.no == 0 {
			first = point.applied // within a burst: its record is read again
		}
		r.recordNo = first.no - 1
		r.replay, r.replayHeld = point.applied, point.held
	}
}

// resumeOld sets r to continue from stamp, a record of an owner that
// applied ACP_IO in stream order and stamped stream positions only
// (HeaderIOSeq, HeaderIOHeld; on an acceptance, HeaderIOApplied):
// everything up to the position was applied. The process's record
// numbers were not stamped: the first one read after it sets them. It
// reports whether ACP_IO could be read.
func (sess *session) resumeOld(ctx context.Context, r *route, stamp *eventlog.Record, t *turn) bool {
	var resume ioPos
	resume.seq, _ = strconv.ParseUint(stamp.Header.Get(events.HeaderIOApplied), 10, 64)
	if at, ok := parseIOPos(stamp.Header.Get(events.HeaderIOSeq)); ok {
		resume = at
	}
	held, _ := parseIOPos(stamp.Header.Get(events.HeaderIOHeld))
	// The message in progress was in the old owner's memory only: hold its
	// chunks again (they were shown live already; nothing is republished).
	if held != (ioPos{}) && !sess.holdAgain(ctx, held, resume, t) {
		return false
	}
	r.read = resume.seq
	if resume.n != 0 {
		// Within a burst: its record is read again, and its updates after
		// resume applied.
		r.read, r.skip = resume.seq-1, resume
	}
	return true
}

// holdAgain reads the session's ACP_IO from first to last (both included)
// and holds their message chunks in the coalescer, as the old owner held
// them when it wrote its last record: the chunks of the message in
// progress. Records of other kinds in that span were applied by the old
// owner; they are skipped. It reports whether the records could be read.
func (sess *session) holdAgain(ctx context.Context, first, last ioPos, t *turn) bool {
	sess.buf.reset()
	for after := first.seq - 1; after < last.seq; {
		recs, err := eventlog.Forward(ctx, sess.svc.js, events.StreamIO, events.IOSubject(sess.ns, sess.sid), after, 256)
		if err != nil || len(recs) == 0 {
			sess.lg.Warn("read the held chunks of an open turn", events.LogKeySeq, after, events.LogKeyErr, err)
			return false
		}
		for _, rec := range recs {
			if rec.Sequence > last.seq {
				return true
			}
			after = rec.Sequence
			for at, update := range updatesOf(rec) {
				if first.after(at) || at.after(last) {
					continue
				}
				upd, err := acp.ParseUpdate(json.RawMessage(update))
				if err != nil || (upd.Kind != acp.UpdateAgentMessageChunk && upd.Kind != acp.UpdateAgentThoughtChunk) {
					continue
				}
				if !sess.buf.continues(upd.Kind, upd.MessageID) {
					sess.buf.reset() // cannot happen: a new message flushes the last
				}
				sess.buf.add(upd.Kind, upd.MessageID, upd.Raw, at)
				t.outputBytes += int64(len(upd.Raw))
			}
		}
	}
	return true
}

// updatesOf yields the updates an ACP_IO record carries, each with its
// place: none when it is not an AdapterUpdate or AdapterUpdates.
func updatesOf(rec *eventlog.Record) iter.Seq2[ioPos, events.JSON] {
	return func(yield func(ioPos, events.JSON) bool) {
		v, _ := events.Unmarshal(rec.Data)
		_, burst := v.(*events.AdapterUpdates)
		for i, u := range events.UpdatesOf(v) {
			at := ioPos{seq: rec.Sequence}
			if burst {
				at.n = i + 1
			}
			if !yield(at, u) {
				return
			}
		}
	}
}
