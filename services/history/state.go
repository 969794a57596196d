package history

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/sessionstate"
)

// State changes in history (readHistory with includeState): the session's
// state changes (sessionstate.ChangeOf) interleaved among its events, in
// sequence order, a change caused by an event just before it.
//
// A page's cursors and paging are those of the page without them: limit
// counts events, and hasMoreBefore and hasMoreAfter are unchanged. The
// changes a page holds are those whose sequence lies in the range of the
// log the page covers, so that consecutive pages, in either direction,
// hold each change once:
//
//   - a page after a cursor covers the sequences after it, up to its
//     newest event when more follow, else up to the log's end (the
//     changes after the last event, such as the turn's end, are in the
//     last page);
//   - a page before a cursor (or the newest page) covers the sequences
//     from its oldest event when more precede it, else from the log's
//     start, up to the cursor (or the log's end).
//
// A change caused by a control record has that record's sequence: a
// client paging forward may pass it as the next page's after, which
// holds what follows it.

// stateBatch is how many records each read of a page's range asks for.
const stateBatch = 512

// withState returns entries (the page's events, read from recs) with the
// state changes of the records in (lo, hi] interleaved. A change comes
// from one of the page's events (a turn accepted, a request that waits)
// or from a lifecycle record: a TurnFinished on the control subject or on
// a prompt key's, an unload, an exit. So only those two subjects are read
// here, not the range's events again: a page costs the reads of its
// events and of the few lifecycle records among them.
func (s *Service) withState(ctx context.Context, ns events.Namespace, sid events.SessionID, recs []*eventlog.Record, entries []events.AcpDurableHistoryEntry, lo, hi uint64) ([]events.AcpDurableHistoryEntry, error) {
	if hi <= lo {
		return entries, nil
	}
	var lifecycle []*eventlog.Record
	for _, subject := range []string{events.LogSubject(ns, sid, events.LogControl), events.KeySubjects(ns, sid)} {
		got, err := s.between(ctx, subject, lo, hi)
		if err != nil {
			return nil, err
		}
		lifecycle = append(lifecycle, got...)
	}
	slices.SortFunc(lifecycle, func(a, b *eventlog.Record) int { return cmp.Compare(a.Sequence, b.Sequence) })
	tracker := &sessionstate.Tracker{Lookup: func(seq uint64) (bool, error) {
		failed, err := sessionstate.LastTurnFailed(ctx, s.js, ns, sid, seq)
		if err != nil {
			return false, unavailable(err)
		}
		return failed, nil
	}}
	out := make([]events.AcpDurableHistoryEntry, 0, len(entries)+len(lifecycle))
	change := func(r *eventlog.Record) error {
		c, err := tracker.Change(r.Sequence, r.Header, r.Data)
		if err != nil {
			return fmt.Errorf("session %s record %d: state change: %w", sid, r.Sequence, err)
		}
		if c != nil {
			out = append(out, *sessionstate.Entry(sid, r.Sequence, r.Time, c))
		}
		return nil
	}
	j := 0
	for i, r := range recs {
		for ; j < len(lifecycle) && lifecycle[j].Sequence < r.Sequence; j++ {
			if err := change(lifecycle[j]); err != nil {
				return nil, err
			}
		}
		if r.Sequence > lo && r.Sequence <= hi {
			if err := change(r); err != nil {
				return nil, err
			}
		}
		out = append(out, entries[i])
	}
	for ; j < len(lifecycle); j++ {
		if err := change(lifecycle[j]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// between returns the records on subject with sequences in (lo, hi], in
// order.
func (s *Service) between(ctx context.Context, subject string, lo, hi uint64) ([]*eventlog.Record, error) {
	var out []*eventlog.Record
	for cursor := lo; cursor < hi; {
		recs, err := eventlog.Forward(ctx, s.js, events.StreamLog, subject, cursor, stateBatch)
		if err != nil {
			return nil, unavailable(err)
		}
		for _, r := range recs {
			if r.Sequence > hi {
				return out, nil
			}
			out = append(out, r)
			cursor = r.Sequence
		}
		if len(recs) < stateBatch {
			break
		}
	}
	return out, nil
}
