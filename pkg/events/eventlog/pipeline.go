package eventlog

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// errCodeWrongLastMsgID: the stream's last message is not the one a
// pipelined record expected.
const errCodeWrongLastMsgID jetstream.ErrorCode = 10070

// maxWindow bounds how many records AppendEach has in flight.
const maxWindow = 256

// pipelineAckWait bounds the wait for one pipelined acknowledgement.
const pipelineAckWait = 10 * time.Second

// AppendEach stores entries in order, each as a record of its own, with up
// to a window of publishes in flight instead of one round trip each.
//
// The first record of a window carries the usual compare-and-set over the
// whole session (the writer's known end), so a stale writer's window is
// rejected at its first record. Every later record k expects the stream's
// last message ID to be record k-1's (Nats-Expected-Last-Msg-Id): it is
// stored only if k-1 was stored and nothing else reached the stream in
// between. Message IDs are unique, so unlike a predicted sequence number
// this cannot hold by coincidence. A rejected record rejects every later
// one of its window, so what is stored is always a prefix of entries, in
// order, and never a fork; the rest is sent again from the log's end with a
// smaller window (it doubles on success, halves on a miss). With other
// sessions writing at the same time, windows shrink to one record: the
// gain is for a session with a burst to itself.
//
// Use it on a single-replica stream. A replicated stream rejects a second
// compare-and-set in flight on the same subjects (10164), so there Append,
// whose atomic batches are cheap, is the fast path.
func (w *Writer) AppendEach(ctx context.Context, entries []Entry) ([]Appended, error) {
	out := make([]Appended, 0, len(entries))
	if err := w.prepare(ctx); err != nil {
		return nil, err
	}
	if n := countEvents(entries); n > w.ret.MaxEvents {
		return nil, events.Errorf(events.CodePayloadTooLarge, "%d events in one append; a session keeps at most %d", n, w.ret.MaxEvents)
	}
	defer w.prune(ctx)
	if w.window == 0 {
		w.window = 16
	}
	for len(out) < len(entries) {
		rest := entries[len(out):]
		n := min(len(rest), w.window)
		if n == 1 {
			a, err := w.Append(ctx, rest[0])
			if err != nil {
				return out, err
			}
			out = append(out, a...)
			w.window = min(w.window*2, maxWindow)
			continue
		}
		stored, err := w.sendWindow(ctx, rest[:n])
		out = append(out, stored...)
		switch {
		case err != nil:
			return out, err
		case len(stored) == n:
			w.window = min(w.window*2, maxWindow)
		default:
			w.window = max(w.window/2, 1)
		}
	}
	return out, nil
}

// sendWindow publishes entries asynchronously, each predicted to land one
// past the one before, and returns the prefix that was stored. An error
// means the writer can no longer tell where the log ends, or lost it.
func (w *Writer) sendWindow(ctx context.Context, entries []Entry) ([]Appended, error) {
	futs := make([]jetstream.PubAckFuture, 0, len(entries))
	apps := make([]Appended, 0, len(entries))
	pred := w.pos
	prevID := ""
	for _, e := range entries {
		msgs, a, err := w.buildAt([]Entry{e}, pred)
		if err != nil {
			break
		}
		m := msgs[0]
		if err := w.checkBatch(msgs); err != nil {
			if len(futs) == 0 {
				return nil, err
			}
			break // the records before it are sent; it fails as the first of the next window
		}
		if prevID != "" {
			m.Header.Del(jetstream.ExpectedLastSubjSeqHeader)
			m.Header.Del(jetstream.ExpectedLastSubjSeqSubjHeader)
			m.Header.Set(jetstream.ExpectedLastMsgIDHeader, prevID)
		}
		prevID = m.Header.Get(jetstream.MsgIDHeader)
		fut, err := w.js.PublishMsgAsync(m)
		if err != nil {
			break
		}
		futs = append(futs, fut)
		apps = append(apps, a[0])
		pred = Position{LastSeq: pred.LastSeq + 1, LastEventNo: pred.LastEventNo, EventBytes: pred.EventBytes}
		if a[0].EventNo != 0 {
			pred.LastEventNo = a[0].EventNo
			pred.EventBytes = headerBytes(m)
		}
	}
	var stored []Appended
	var uncertain, full error
	broken := false
	for i, fut := range futs {
		select {
		case ack := <-fut.Ok():
			if broken || uncertain != nil {
				// Impossible for a correct server: after a rejection the
				// chain is broken. Resynchronise rather than trust it.
				uncertain = fmt.Errorf("record %d stored after a rejected one", i)
				continue
			}
			w.pos.LastSeq = ack.Sequence
			if apps[i].EventNo != 0 {
				w.pos.LastEventNo, w.pos.LastEventSeq = apps[i].EventNo, ack.Sequence
				w.pos.EventBytes = headerBytes(fut.Msg())
			}
			apps[i].Seq = ack.Sequence
			stored = append(stored, apps[i])
		case err := <-fut.Err():
			if isConflict(err) || apiErrorCode(err) == errCodeWrongLastMsgID {
				if i == 0 && uncertain == nil {
					// The first record expected the log's known end: another
					// writer moved it.
					return nil, w.conflict()
				}
				broken = true
				continue
			}
			uncertain = err
			if StorageFull(err) {
				full = err
			}
		case <-time.After(pipelineAckWait):
			uncertain = fmt.Errorf("no acknowledgement in %v", pipelineAckWait)
		case <-ctx.Done():
			uncertain = ctx.Err()
		}
	}
	if uncertain == nil {
		return stored, nil
	}
	// Some outcome is unknown: learn from the log how far it got.
	if err := w.resync(ctx, futs); err != nil {
		return stored, err
	}
	if full != nil {
		return stored, storageFull(w.ns, w.sid, full)
	}
	return stored, events.Errorf(events.CodeUnavailable, "append to %s/%s: %v", w.ns, w.sid, uncertain)
}

// resync sets the writer's position from the log after an uncertain
// pipelined append: the log must end with one of the writer's own messages
// (or where it knew it ended), else another writer moved it.
func (w *Writer) resync(ctx context.Context, futs []jetstream.PubAckFuture) error {
	rec, err := Last(ctx, w.js, events.StreamLog, w.filter)
	if err != nil {
		return events.Errorf(events.CodeUnavailable, "read %s/%s after an uncertain append: %v", w.ns, w.sid, err)
	}
	if rec == nil || rec.Sequence == w.pos.LastSeq {
		return nil
	}
	id := rec.Header.Get(jetstream.MsgIDHeader)
	for _, f := range futs {
		if f.Msg().Header.Get(jetstream.MsgIDHeader) == id {
			w.pos.LastSeq = rec.Sequence
			if n := EventNo(rec); n != 0 {
				w.pos.LastEventNo, w.pos.LastEventSeq, w.pos.EventBytes = n, rec.Sequence, EventBytes(rec)
			} else if ev, err := Last(ctx, w.js, events.StreamLog, w.evSubj); err == nil && ev != nil {
				w.pos.LastEventNo, w.pos.LastEventSeq, w.pos.EventBytes = EventNo(ev), ev.Sequence, EventBytes(ev)
			}
			return nil
		}
	}
	return w.conflict()
}
