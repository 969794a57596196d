package eventlog

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// The per-session byte cap.
//
// JetStream bounds a subject by message count (ACP_LOG's per-subject limit
// is the event cap, and the server prunes by it), but bytes only per
// stream. So the session's single writer bounds bytes itself:
//
//   - Every public event carries HeaderEventBytes, the running total of the
//     session's event payload bytes up to and including it. What a session
//     retains is then known from two records: the newest event's total,
//     less the oldest retained one's, plus that one's own size.
//   - After an append whose total passes the cap, the writer reads the
//     oldest retained event (one direct get), and when the session does
//     hold more than the cap, finds the event where retention must start
//     (the search Backward uses, on running totals instead of event
//     numbers) and purges the events before it: one subject purge with a
//     sequence (js stream Purge, WithPurgeSubject, WithPurgeSequence).
//   - It prunes down to 15/16 of the cap, not to the cap, so that a session
//     appending at its cap purges once per 1/16 of it, not once per append.
//   - An append holding more event bytes (or events) than the caps is
//     rejected whole, before anything is written: keeping it would prune
//     part of it at once.
//
// Only public events count and are pruned: the control records of a session
// (a few per turn) are what rebuilds it, and its first one opens it.

// retention is a writer's view of Retention and of what the session holds.
type retention struct {
	Retention
	loaded bool
	// base is the running total before the oldest retained event, when
	// baseKnown: the session retains pos.EventBytes - base bytes.
	base      uint64
	baseKnown bool
	// failed receives prune errors; the next append retries.
	failed func(error)
}

// retentionTTL is how long a connection's reading of ACP_LOG's retention
// serves new writers: a replica loading many sessions at once (a takeover)
// asks the server once, not once per session.
const retentionTTL = 10 * time.Second

type cachedRetention struct {
	Retention
	read time.Time
}

// retentions caches each JetStream context's reading of the retention.
var retentions sync.Map // jetstream.JetStream -> cachedRetention

// streamRetention returns ACP_LOG's retention, read at most retentionTTL ago.
func streamRetention(ctx context.Context, js jetstream.JetStream) (Retention, error) {
	if c, ok := retentions.Load(js); ok && time.Since(c.(cachedRetention).read) < retentionTTL {
		return c.(cachedRetention).Retention, nil
	}
	str, err := js.Stream(ctx, events.StreamLog)
	if err != nil {
		return Retention{}, err
	}
	r := RetentionOf(str.CachedInfo().Config)
	now := time.Now()
	retentions.Range(func(k, v any) bool { // forget contexts no longer used
		if now.Sub(v.(cachedRetention).read) >= retentionTTL {
			retentions.Delete(k)
		}
		return true
	})
	retentions.Store(js, cachedRetention{r, now})
	return r, nil
}

// OnPruneError sets what receives an error of pruning the session's
// oldest events past the byte cap after an append. The append itself has
// succeeded; the next one tries the prune again.
func (w *Writer) OnPruneError(fn func(error)) { w.ret.failed = fn }

// prepare reads, once per writer, the stream's retention and where the
// session's running byte total stands.
func (w *Writer) prepare(ctx context.Context) error {
	if w.ret.loaded {
		return nil
	}
	ret, err := streamRetention(ctx, w.js)
	if err != nil {
		return events.Errorf(events.CodeUnavailable, "append to %s/%s: read %s: %v", w.ns, w.sid, events.StreamLog, err)
	}
	w.ret.Retention = ret
	if w.pos.LastEventNo > 0 && w.pos.EventBytes == 0 {
		// A position without a total: the newest event carries it.
		ev, err := Last(ctx, w.js, events.StreamLog, w.evSubj)
		if err != nil {
			return events.Errorf(events.CodeUnavailable, "append to %s/%s: %v", w.ns, w.sid, err)
		}
		if ev != nil && EventNo(ev) == w.pos.LastEventNo {
			w.pos.EventBytes = EventBytes(ev)
		}
	}
	w.ret.loaded = true
	return nil
}

// checkBatch rejects messages that alone hold more events or event bytes
// than the session may keep.
func (w *Writer) checkBatch(msgs []*nats.Msg) error {
	var n, size int64
	for _, m := range msgs {
		if m.Header.Get(events.HeaderEventNo) != "" {
			n++
			size += int64(len(m.Data))
		}
	}
	if n > w.ret.MaxEvents {
		return events.Errorf(events.CodePayloadTooLarge, "%d events in one append; a session keeps at most %d", n, w.ret.MaxEvents)
	}
	if size > w.ret.MaxBytes {
		return events.Errorf(events.CodePayloadTooLarge, "%d bytes of events in one append; a session keeps at most %d", size, w.ret.MaxBytes)
	}
	return nil
}

func countEvents(entries []Entry) int64 {
	var n int64
	for _, e := range entries {
		if e.Kind == events.LogEvents {
			n++
		}
	}
	return n
}

// headerBytes is the HeaderEventBytes of a message the writer built.
func headerBytes(m *nats.Msg) uint64 {
	n, _ := strconv.ParseUint(m.Header.Get(events.HeaderEventBytes), 10, 64)
	return n
}

// prune purges the session's oldest events when it retains more event
// bytes than the cap. Errors go to OnPruneError's function; the next
// append tries again.
func (w *Writer) prune(ctx context.Context) {
	if err := w.pruneBytes(ctx); err != nil && w.ret.failed != nil {
		w.ret.failed(fmt.Errorf("prune %s/%s to %d bytes: %w", w.ns, w.sid, w.ret.MaxBytes, err))
	}
}

func (w *Writer) pruneBytes(ctx context.Context) error {
	r := &w.ret
	total, limit := w.pos.EventBytes, uint64(r.MaxBytes)
	if total <= limit || r.baseKnown && total-r.base <= limit {
		return nil
	}
	first, err := directGet(ctx, w.js, events.StreamLog, directGetRequest{Seq: 1, NextBySubj: w.evSubj})
	if err != nil || first == nil {
		return err
	}
	ft := EventBytes(first)
	if ft < uint64(len(first.Data)) {
		return fmt.Errorf("event %d carries a running total of %d, below its own %d bytes", first.Sequence, ft, len(first.Data))
	}
	r.base, r.baseKnown = ft-uint64(len(first.Data)), true
	if total-r.base <= limit {
		return nil
	}
	last, err := Last(ctx, w.js, events.StreamLog, w.evSubj)
	if err != nil || last == nil {
		return err
	}
	lt := EventBytes(last)
	if lt < ft {
		return fmt.Errorf("event %d carries a running total of %d, below the oldest's %d", last.Sequence, lt, ft)
	}
	// Retention starts after the first event whose total reaches want: then
	// at most lowWater bytes remain.
	lowWater := limit - limit/16
	want := lt - min(lowWater, lt)
	cut := first
	if ft < want {
		found, above, err := locate(ctx, w.js, events.StreamLog, w.evSubj, EventBytes, anchor{first.Sequence, ft}, anchor{last.Sequence, lt}, want, limit/32)
		if err != nil {
			return err
		}
		if cut = found; cut == nil {
			cut = above
		}
		if cut == nil {
			return fmt.Errorf("no event with a running total near %d between %d and %d", want, first.Sequence, last.Sequence)
		}
	}
	keep := cut.Sequence + 1 // purge through cut
	if cut.Sequence >= last.Sequence {
		keep = last.Sequence // an event of nearly the cap alone: keep it
	}
	str, err := w.js.Stream(ctx, events.StreamLog)
	if err != nil {
		return err
	}
	if err := str.Purge(ctx, jetstream.WithPurgeSubject(w.evSubj), jetstream.WithPurgeSequence(keep)); err != nil {
		return err
	}
	r.baseKnown = false // read again when the total next passes the cap
	return nil
}

// MetaMaxBytesPerSession is the ACP_LOG metadata key of the byte cap: the
// stream carries its retention, so every writer applies the one the
// operator set.
const MetaMaxBytesPerSession = "skein.max_bytes_per_session"

// Retention is what ACP_LOG keeps of each session's public events: at most
// MaxEvents events and MaxBytes bytes of event payloads, the oldest pruned
// first. JetStream prunes by count itself (the stream's per-subject message
// limit); the session's writer prunes by bytes after an append (Writer). An
// append with more events or bytes than either is rejected whole.
type Retention struct {
	MaxEvents int64
	MaxBytes  int64
}

// RetentionOf reads the retention of an ACP_LOG configuration, with the
// defaults for what it does not say.
func RetentionOf(cfg jetstream.StreamConfig) Retention {
	r := Retention{MaxEvents: cfg.MaxMsgsPerSubject, MaxBytes: DefaultMaxBytesPerSession}
	if r.MaxEvents <= 0 {
		r.MaxEvents = DefaultMaxEventsPerSession
	}
	if n, err := strconv.ParseInt(cfg.Metadata[MetaMaxBytesPerSession], 10, 64); err == nil && n > 0 {
		r.MaxBytes = n
	}
	return r
}

// The retention of a session's history when ACP_LOG does not say.
const (
	// DefaultMaxEventsPerSession is the retention of a session's history:
	// beyond it the oldest records of the subject are pruned (and a cursor
	// into them is cursor_expired).
	DefaultMaxEventsPerSession = 1_000_000
	// DefaultMaxBytesPerSession is the other bound of a session's history:
	// the payload bytes of its public events. JetStream bounds bytes per
	// stream only, so the session's writer enforces it (Retention).
	DefaultMaxBytesPerSession = 1 << 30
)
