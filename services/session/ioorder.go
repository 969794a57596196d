package session

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/tail"
	"skein.dev/services/session/internal/applier"
)

// ioPos is where an adapter message is in the session's ACP_IO
// (applier.Pos). The zero ioPos is no position: what it stamps did not
// come from ACP_IO.
type ioPos = applier.Pos

// ioApplier orders the ACP_IO records of the route's adapter process
// (internal/applier): the owner admits each record it reads, in stream
// order, and applies what the applier hands back, in number order.
type ioApplier = applier.Applier[*eventlog.Record]

// gapWait is the timer of a wait for missing records; the route's gap
// field names the current one, so that a timer stopped too late does
// nothing.
type gapWait struct {
	timer *time.Timer
}

// ingest takes the next record of the session's ACP_IO in stream order,
// and applies every record of the adapter process that is then next in
// number. The caller holds sess.mu.
func (r *route) ingest(ctx context.Context, rec *eventlog.Record) {
	sess := r.sess
	in := applier.Record[*eventlog.Record]{
		Seq: rec.Sequence, Process: rec.Header.Get(events.HeaderProcessID),
		Exit: rec.Header.Get(events.HeaderRecord) == events.RecordAgentExited, Size: len(rec.Data), Value: rec,
	}
	in.No, _ = strconv.ParseUint(rec.Header.Get(events.HeaderRecordNo), 10, 64)
	switch v, giveUp := r.io.Admit(in); v {
	case applier.Foreign:
		// Output of an adapter process this session no longer uses.
	case applier.Unnumbered:
		sess.svc.m.ioRejected.WithLabelValues("unnumbered").Inc()
		sess.lg.Warn("runner record without a record number", events.LogKeySeq, rec.Sequence, events.LogKeyProcess, r.processID)
	case applier.Duplicate:
		sess.svc.m.ioDuplicates.Inc()
	case applier.Held:
		sess.svc.m.ioHeld.Inc()
		sess.lg.Debug("holding a record until the ones before it are stored", events.LogKeyProcess, r.processID, "record_no", in.No, "applied_no", r.io.Applied())
		if giveUp != "" {
			r.giveUp(ctx, giveUp)
		} else {
			r.armGap(false)
		}
	case applier.Ready:
		r.applyReady(ctx, true)
	}
}

// applyReady applies the records next in number, while the route lasts,
// and rearms the wait for the rest (progressed: the last record applied
// ended a wait, which starts again for the next gap).
func (r *route) applyReady(ctx context.Context, progressed bool) {
	sess := r.sess
	for sess.adapter == r {
		ap, ok := r.io.Next(sess.buf.active)
		if !ok {
			break
		}
		r.applyIO(ctx, ap)
	}
	if sess.adapter == r {
		r.armGap(progressed)
	}
}

// armGap starts the wait for missing records when some are held (again,
// when restart), and ends it when none is.
func (r *route) armGap(restart bool) {
	sess := r.sess
	waiting := r.io.Waiting() > 0
	if !waiting || restart {
		r.stopGapTimer()
	}
	if !waiting || r.gap != nil {
		return
	}
	g := &gapWait{}
	g.timer = sess.svc.life.afterFunc(sess.svc.cfg.IOGapTimeout, func(ctx context.Context) { r.gapTimedOut(ctx, g) })
	r.gap = g
}

// stopGapTimer ends the wait for missing records, if one runs.
func (r *route) stopGapTimer() {
	if r.gap != nil {
		r.gap.timer.Stop()
		r.gap = nil
	}
}

// stopGap ends the wait for missing records and forgets what was held: the
// route ends.
func (r *route) stopGap() {
	r.stopGapTimer()
	r.io.Stop()
}

// gapTimedOut ends a wait that made no progress for IOGapTimeout. The
// missing records may be stored with their republish lost: the stream is
// read first.
func (r *route) gapTimedOut(ctx context.Context, g *gapWait) {
	sess := r.sess
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.adapter != r || r.gap != g {
		return
	}
	r.catchUp(ctx)
	if sess.adapter != r || r.gap != g {
		return // it progressed (or the route ended)
	}
	r.giveUp(ctx, fmt.Sprintf("none came in %v", sess.svc.cfg.IOGapTimeout))
	sess.commitOrFail(ctx)
}

// giveUp ends the wait for missing records, for the reason why: they are
// lost. The running turn fails output_lost, and the records held are
// applied in number order, past the gaps (a turn that ended drains them).
func (r *route) giveUp(ctx context.Context, why string) {
	sess := r.sess
	failure := r.lost(why)
	if sess.turn != nil {
		sess.abortTurn(ctx, ioPos{}, events.OutcomeFailed, failure)
	}
	for sess.adapter == r && r.io.SkipGap() {
		r.applyReady(ctx, true)
	}
}

// lost accounts for the records missing before the ones held, which will
// never come (why), and returns the turn's failure that names them.
func (r *route) lost(why string) *events.Error {
	sess := r.sess
	list, n := r.io.Missing()
	sess.svc.m.ioLost.Add(float64(n))
	sess.lg.Error("adapter output lost: ACP_IO never stored records of the process",
		events.LogKeyProcess, r.processID, "records", list, "why", why)
	return events.Errorf(events.CodeOutputLost, "records %s of the agent's output never reached ACP_IO (%s); the turn's output is incomplete", list, why)
}

// rehold holds a message chunk an old owner applied and held in memory
// when it stopped, as that owner held it (ap.Rehold); anything else an old
// owner applied is in the log already.
func (r *route) rehold(ap applier.Applied[*eventlog.Record], at ioPos, update events.JSON) {
	sess := r.sess
	if !ap.Rehold(at) {
		return
	}
	upd, err := acp.ParseUpdate(json.RawMessage(update))
	if err != nil || (upd.Kind != acp.UpdateAgentMessageChunk && upd.Kind != acp.UpdateAgentThoughtChunk) {
		return
	}
	if !sess.buf.continues(upd.Kind, upd.MessageID) {
		sess.buf.reset() // cannot happen: a new message flushed the last
	}
	sess.buf.add(upd.Kind, upd.MessageID, upd.Raw, at)
	if t := sess.turn; t != nil {
		t.outputBytes += int64(len(upd.Raw))
	}
}

// resumePoint is what a record stamped at at tells a new owner
// (HeaderIOResume).
func (r *route) resumePoint(at ioPos) applier.ResumePoint {
	sess := r.sess
	var buffered ioPos
	if sess.buf.active {
		buffered = sess.buf.first
	}
	return r.io.ResumePoint(at, buffered)
}

// tailQuiet is how long a running turn's live tail may be silent before
// the sweep looks where ACP_IO ends (checkTail).
const tailQuiet = time.Second

// checkTail is the live tail's safety net while a turn runs: a record whose
// republish the owner missed (its connection was down, its server died) is
// noticed on the next record's Nats-Last-Sequence, and when none follows
// (the turn's last record, its prompt result) the turn would wait for
// ever. When nothing arrived for a while and nothing waits in the
// subscription, the owner reads the stream after the last record it has:
// nothing there costs one small reply; a record there is one it missed,
// read once. (It does not fetch the subject's last message to compare
// sequences: that message may be megabytes, and a turn whose agent is
// slow to write its next record would fetch it every sweep.) The caller
// holds sess.mu.
func (r *route) checkTail(ctx context.Context, quiet time.Duration) {
	sess := r.sess
	if time.Since(r.arrived) < quiet {
		return
	}
	if waiting, _, err := r.sub.Pending(); err == nil && waiting > 0 {
		return // the tail is alive; its callbacks wait for sess.mu
	}
	missed := false
	deliver := r.deliverIO(ctx, 0)
	err := r.ioTail.CatchUp(ctx, 0, func(rec *tail.Record) error {
		if !missed {
			missed = true
			sess.svc.m.ioTailMisses.Inc()
		}
		return deliver(rec)
	})
	if err != nil {
		r.readIO(err)
		return
	}
	if missed && sess.adapter == r {
		sess.commitOrFail(ctx)
	}
}

// catchUpAfterReconnects reads every route's ACP_IO from the stream each
// time the service's connection reconnects: what was republished while it
// was down never reaches the live tail. It chains the connection's own
// reconnect handler, restores it when ctx ends, and returns then.
func (s *Service) catchUpAfterReconnects(ctx context.Context) {
	reconnected := make(chan struct{}, 1)
	prev := s.nc.Opts.ReconnectedCB
	s.nc.SetReconnectHandler(func(nc *nats.Conn) {
		if prev != nil {
			prev(nc)
		}
		select {
		case reconnected <- struct{}{}:
		default: // a catch-up is due already
		}
	})
	defer s.nc.SetReconnectHandler(prev)
	for {
		select {
		case <-ctx.Done():
			return
		case <-reconnected:
		}
		for _, sess := range s.loaded() {
			sess.mu.Lock()
			if r := sess.adapter; r != nil {
				r.catchUp(ctx)
			}
			sess.mu.Unlock()
		}
	}
}
