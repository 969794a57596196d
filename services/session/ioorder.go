package session

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// The runner numbers the records of one adapter process (HeaderRecordNo)
// and publishes each until ACP_IO stores it, again with the same
// Nats-Msg-Id after a fault. ACP_IO may therefore store them out of number
// order (record 7 lost in an election, 8 stored, then 7's retry), and
// store a retry twice when it comes back after the duplicate window. The
// owner reads ACP_IO in stream order (onTail, catchUp) and admits each
// record here, which applies the process's records in number order:
//
//   - a record numbered recordNo+1 is applied, then every held record that
//     now follows in number;
//   - a record whose number was applied (or is held) is a duplicate, and is
//     passed over;
//   - a record after a gap is held until the gap fills. The wait is
//     bounded: by IOGapTimeout without progress, by the process's exit
//     record (nothing follows it), by the runner's disappearance (onExit),
//     and by maxHeldRecords and maxHeldBytes. When it ends, the missing
//     records are lost: the running turn fails output_lost, naming them,
//     and what was held is applied in order (a turn that ended drains it).
//
// A record without a number (a runner before numbering) is applied as it
// comes. Records of another process (one the session no longer uses) are
// passed over.

// maxHeldRecords and maxHeldBytes bound what waits behind a gap: past
// either, the wait ends at once, as at its deadline.
const (
	maxHeldRecords = 4096
	maxHeldBytes   = 64 << 20
)

// gapWait is the timer of a wait for missing records; the route's gap
// field names the current one, so that a timer stopped too late does
// nothing.
type gapWait struct {
	timer *time.Timer
}

// admit takes the next record of the session's ACP_IO in stream order.
// The caller holds sess.mu.
func (sess *session) admit(ctx context.Context, r *route, rec *eventlog.Record) {
	r.read = rec.Sequence
	if rec.Header.Get(events.HeaderProcessID) != r.processID {
		return // output of an adapter process this session no longer uses
	}
	no, err := strconv.ParseUint(rec.Header.Get(events.HeaderRecordNo), 10, 64)
	if err != nil || no == 0 {
		sess.applyIO(ctx, r, rec, 0)
		return
	}
	if !r.based {
		// Taken over from a log that did not say how far the old owner
		// got in numbers: it applied records in stream order, up to the
		// one before this.
		r.recordNo, r.based = no-1, true
	}
	if _, held := r.held[no]; held || no <= r.recordNo {
		sess.svc.m.ioDuplicates.Inc()
		return
	}
	if no > r.recordNo+1 {
		sess.hold(ctx, r, no, rec)
		return
	}
	sess.applyIO(ctx, r, rec, no)
	sess.applyHeld(ctx, r, true)
}

// hold keeps rec, numbered no, until the records before it are applied.
func (sess *session) hold(ctx context.Context, r *route, no uint64, rec *eventlog.Record) {
	if r.held == nil {
		r.held = map[uint64]*eventlog.Record{}
	}
	r.held[no] = rec
	r.heldBytes += len(rec.Data)
	sess.svc.m.ioHeld.Inc()
	sess.lg.Debug("holding a record until the ones before it are stored", events.LogKeyProcess, r.processID, "record_no", no, "applied_no", r.recordNo)
	switch {
	case rec.Header.Get(events.HeaderRecord) == events.RecordAgentExited:
		// The runner stores a process's exit after everything the process
		// wrote: what is missing now never comes.
		sess.giveUp(ctx, r, "the agent exited")
	case len(r.held) > maxHeldRecords || r.heldBytes > maxHeldBytes:
		sess.giveUp(ctx, r, fmt.Sprintf("%d records (%d bytes) waited behind them", len(r.held), r.heldBytes))
	default:
		sess.armGap(r, false)
	}
}

// applyHeld applies the held records that follow the last one applied, in
// number order, and rearms the wait for the rest (progressed: the last
// record applied ended a wait, which starts again for the next gap).
func (sess *session) applyHeld(ctx context.Context, r *route, progressed bool) {
	for sess.adapter == r {
		rec, ok := r.held[r.recordNo+1]
		if !ok {
			break
		}
		delete(r.held, r.recordNo+1)
		r.heldBytes -= len(rec.Data)
		sess.applyIO(ctx, r, rec, r.recordNo+1)
	}
	if sess.adapter == r {
		sess.armGap(r, progressed)
	}
}

// armGap starts the wait for missing records when some are held (again,
// when restart), and ends it when none is.
func (sess *session) armGap(r *route, restart bool) {
	if len(r.held) == 0 || restart {
		if r.gap != nil {
			r.gap.timer.Stop()
			r.gap = nil
		}
	}
	if len(r.held) == 0 || r.gap != nil {
		return
	}
	g := &gapWait{}
	g.timer = sess.svc.life.afterFunc(sess.svc.cfg.IOGapTimeout, func(ctx context.Context) { sess.gapTimedOut(ctx, r, g) })
	r.gap = g
}

// stopGap ends the wait for missing records and forgets what was held: the
// route ends.
func (r *route) stopGap() {
	if r.gap != nil {
		r.gap.timer.Stop()
		r.gap = nil
	}
	r.held, r.heldBytes = nil, 0
}

// gapTimedOut ends a wait that made no progress for IOGapTimeout. The
// missing records may be stored with their republish lost: the stream is
// read first.
func (sess *session) gapTimedOut(ctx context.Context, r *route, g *gapWait) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.adapter != r || r.gap != g {
		return
	}
	sess.catchUp(ctx, r, 0)
	if sess.adapter != r || r.gap != g {
		return // it progressed (or the route ended)
	}
	sess.giveUp(ctx, r, fmt.Sprintf("none came in %v", sess.svc.cfg.IOGapTimeout))
	sess.commitOrFail(ctx)
}

// giveUp ends the wait for missing records, for the reason why: they are
// lost. The running turn fails output_lost, and the records held are
// applied in number order, past the gaps (a turn that ended drains them).
func (sess *session) giveUp(ctx context.Context, r *route, why string) {
	failure := sess.lost(r, why)
	if sess.turn != nil {
		sess.abortTurn(ctx, ioPos{}, events.OutcomeFailed, failure)
	}
	for sess.adapter == r && len(r.held) > 0 {
		r.recordNo = slices.Min(slices.Collect(maps.Keys(r.held))) - 1
		sess.applyHeld(ctx, r, true)
	}
}

// lost accounts for the records missing before the ones held, which will
// never come (why), and returns the turn's failure that names them.
func (sess *session) lost(r *route, why string) *events.Error {
	var missing []string
	var n uint64
	held := slices.Sorted(maps.Keys(r.held))
	next := r.recordNo + 1
	for _, no := range held {
		if no > next {
			n += no - next
			if no-1 == next {
				missing = append(missing, strconv.FormatUint(next, 10))
			} else {
				missing = append(missing, strconv.FormatUint(next, 10)+"-"+strconv.FormatUint(no-1, 10))
			}
		}
		next = no + 1
	}
	list := strings.Join(missing, ", ")
	sess.svc.m.ioLost.Add(float64(n))
	sess.lg.Error("adapter output lost: ACP_IO never stored records of the process",
		events.LogKeyProcess, r.processID, "records", list, "why", why)
	return events.Errorf(events.CodeOutputLost, "records %s of the agent's output never reached ACP_IO (%s); the turn's output is incomplete", list, why)
}

// rehold holds a message chunk an old owner applied and held in memory
// when it stopped (at or after the route's replayHeld), as that owner
// held it; anything else an old owner applied is in the log already.
func (sess *session) rehold(r *route, at ioPos, update events.JSON) {
	if r.replayHeld.no == 0 || r.replayHeld.after(at) {
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

// resumeFrom is an ACP_IO sequence at or before every record of the route's
// process not yet applied: those held, those not read yet, and those
// whose chunks are held in memory (the floor).
func (r *route) resumeFrom() uint64 {
	from := r.read + 1
	if r.floor != 0 {
		from = min(from, r.floor)
	}
	for _, rec := range r.held {
		from = min(from, rec.Sequence)
	}
	return from
}

// resumePoint is what a record stamped at at tells a new owner
// (HeaderIOResume).
func (sess *session) resumePoint(r *route, at ioPos) resumePoint {
	p := resumePoint{from: r.resumeFrom(), applied: ioPos{no: at.no, n: at.n}}
	if sess.buf.active && sess.buf.first.no != 0 {
		p.held = ioPos{no: sess.buf.first.no, n: sess.buf.first.n}
	}
	return p
}

// acceptancePoint is what a turn's acceptance tells a new owner: the last
// record of the process applied (the old owner's own replay, if it has
// not finished it), and nothing held (the acceptance drops the chunks).
// ok is false when the route's numbers are not known.
func (r *route) acceptancePoint() (resumePoint, bool) {
	if !r.based {
		return resumePoint{}, false
	}
	p := resumePoint{from: r.resumeFrom(), applied: ioPos{no: r.recordNo}}
	if r.replay.no > r.recordNo {
		p.applied = ioPos{no: r.replay.no, n: r.replay.n}
	}
	return p, true
}

// tailQuiet is how long a running turn's live tail may be silent before
// the sweep looks where ACP_IO ends (checkTail).
const tailQuiet = time.Second

// checkTail is the live tail's safety net while a turn runs: a record whose
// republish the owner missed (its connection was down, its server died) is
// noticed on the next record's Nats-Last-Sequence, and when none follows
// (the turn's last record, its prompt result) the turn would wait for
// ever. When nothing arrived for a while, one direct get of the subject's
// last message says whether the stream is ahead; if it is, the owner reads
// the rest from there. The caller holds sess.mu.
func (sess *session) checkTail(ctx context.Context, r *route, quiet time.Duration) {
	if time.Since(r.arrived) < quiet {
		return
	}
	last, err := eventlog.Last(ctx, sess.svc.js, events.StreamIO, events.IOSubject(sess.ns, sess.sid))
	if err != nil {
		sess.lg.Warn("look up the end of the session's io", events.LogKeyErr, err)
		return
	}
	if last == nil || last.Sequence <= r.read {
		return
	}
	sess.svc.m.ioTailMisses.Inc()
	sess.catchUp(ctx, r, 0)
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
				sess.catchUp(ctx, r, 0)
			}
			sess.mu.Unlock()
		}
	}
}
