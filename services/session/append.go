package session

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// stamp sets the headers every record carries: the place in ACP_IO it
// came from (at, when not zero) and the turn running when it was made.
func (sess *session) stamp(at ioPos, entries []eventlog.Entry) {
	if at == (ioPos{}) && sess.turn == nil {
		return
	}
	for i := range entries {
		if entries[i].Header == nil {
			entries[i].Header = nats.Header{}
		}
		if at != (ioPos{}) {
			entries[i].Header.Set(events.HeaderIOSeq, at.String())
			if r := sess.adapter; r != nil && at.No != 0 {
				// Where a new owner resumes, in record numbers, with where
				// to read ACP_IO from: records the owner held, or whose
				// chunks it holds, may be stored before the one at.
				entries[i].Header.Set(events.HeaderIOResume, r.resumePoint(at).String())
			}
		}
		if sess.turn != nil {
			entries[i].Header.Set(events.HeaderTurnID, sess.turn.id)
			entries[i].Header.Set(events.HeaderTurnStart, strconv.FormatUint(sess.turn.start, 10))
		}
	}
}

// append writes entries to the log, as one atomic append, after whatever
// is queued. at, when not zero, is the place in ACP_IO they came from.
func (sess *session) append(ctx context.Context, at ioPos, entries ...eventlog.Entry) ([]eventlog.Appended, error) {
	sess.stamp(at, entries)
	if err := sess.commit(ctx); err != nil {
		return nil, err
	}
	return sess.write(ctx, entries)
}

// queue holds entries for the next commit. Adapter output is queued while
// more of it is waiting to be applied, so that a burst is written in few
// appends (group commit); commit happens before anything that must observe
// the log's end (a live delta's afterSequence, a turn's end, a request's
// answer) and whenever nothing more is waiting.
func (sess *session) queue(at ioPos, entries ...eventlog.Entry) {
	sess.stamp(at, entries)
	sess.pending = append(sess.pending, entries...)
}

// commit writes the queued entries, in order. On one replica they are
// pipelined (eventlog.Writer.AppendEach: a burst costs about one round trip,
// while an atomic batch there is staged on disk); on more, a group of at
// least GroupCommitMin goes as atomic batches and a smaller one record by
// record.
func (sess *session) commit(ctx context.Context) error {
	// A turn's end the full store refused goes before anything after it.
	if err := sess.storeHeld(ctx); err != nil {
		return err
	}
	if len(sess.pending) == 0 {
		return nil
	}
	group := sess.pending
	sess.pending = nil
	if sess.svc.cfg.Replicas <= 1 {
		return sess.writeEach(ctx, group)
	}
	for len(group) > 0 {
		n := 1
		if len(group) >= sess.svc.cfg.GroupCommitMin {
			n = min(len(group), eventlog.MaxBatch)
		}
		if _, err := sess.write(ctx, group[:n]); err != nil {
			return err
		}
		group = group[n:]
	}
	return nil
}

// writeEach appends entries in order, pipelined, with write's handling of
// the outcome.
func (sess *session) writeEach(ctx context.Context, entries []eventlog.Entry) error {
	start := time.Now()
	out, err := sess.w.AppendEach(ctx, entries)
	sess.svc.m.appendSeconds.Observe(time.Since(start).Seconds())
	sess.svc.m.appendRecords.Add(float64(len(out)))
	sess.turn.stored(entries, out)
	return sess.wrote(err)
}

// write appends entries now, as one atomic append.
func (sess *session) write(ctx context.Context, entries []eventlog.Entry) ([]eventlog.Appended, error) {
	start := time.Now()
	out, err := sess.w.Append(ctx, entries...)
	sess.svc.m.appendSeconds.Observe(time.Since(start).Seconds())
	if err == nil {
		sess.svc.m.appendRecords.Add(float64(len(entries)))
	}
	sess.turn.stored(entries, out)
	return out, sess.wrote(err)
}

// stored notes where the running turn t's message landed, when it is
// among the entries stored (out, in order). t may be nil: no turn runs.
func (t *turn) stored(entries []eventlog.Entry, out []eventlog.Appended) {
	if t == nil || t.lastMessageRec == nil {
		return
	}
	for i := range out {
		if entries[i].Value == t.lastMessageRec {
			t.lastMessageSeq, t.lastMessageRec = out[i].Seq, nil
			return
		}
	}
}

// wrote accounts for an append's outcome. A write conflict means another
// replica owns the session now: this one forgets it.
func (sess *session) wrote(err error) error {
	if err != nil {
		code := events.AsError(err).Code
		sess.svc.m.appends.WithLabelValues(string(code)).Inc()
		if code == events.CodeStorageFull {
			sess.svc.store.Refused()
		}
		if code == events.CodeWriteConflict {
			sess.svc.m.appendConflicts.Inc()
			sess.lg.Warn("log moved under this replica; forgetting the session", events.LogKeyErr, err)
			sess.release(err)
		}
		return err
	}
	sess.svc.m.appends.WithLabelValues("ok").Inc()
	sess.svc.store.Stored()
	sess.updatedAt = time.Now()
	return nil
}
