package history

import (
	"context"
	"fmt"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// State changes in history (readHistory with includeState): the session's
// state changes (events.StateChangeOf) interleaved among its events, in
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

// withState reads the session's records in (lo, hi] and returns entries
// (the page's events) with the state changes of those records
// interleaved.
func (s *Service) withState(ctx context.Context, ns events.Namespace, sid events.SessionID, entries []events.AcpDurableHistoryEntry, lo, hi uint64) ([]events.AcpDurableHistoryEntry, error) {
	if hi <= lo {
		return entries, nil
	}
	evSubject := events.LogSubject(ns, sid, events.LogEvents)
	filter := events.LogFilter(ns, sid)
	tracker := &events.StateTracker{Lookup: func(seq uint64) (bool, error) {
		failed, err := eventlog.LastTurnFailed(ctx, s.js, ns, sid, seq)
		if err != nil {
			return false, unavailable(err)
		}
		return failed, nil
	}}
	out := make([]events.AcpDurableHistoryEntry, 0, len(entries)+8)
	j := 0
	cursor := lo
	for cursor < hi {
		recs, err := eventlog.Forward(ctx, s.js, events.StreamLog, filter, cursor, stateBatch)
		if err != nil {
			return nil, unavailable(err)
		}
		for _, r := range recs {
			if r.Sequence > hi {
				cursor = hi
				break
			}
			cursor = r.Sequence
			// An event of the page the read did not return (it cannot
			// be: the page's range holds them all) keeps its place.
			for j < len(entries) && entries[j].Sequence < r.Sequence {
				out = append(out, entries[j])
				j++
			}
			isEvent := r.Subject == evSubject
			if isEvent && (j == len(entries) || entries[j].Sequence != r.Sequence) {
				continue // not one of the page's events: nor is its change
			}
			c, err := tracker.Change(r.Sequence, r.Header, r.Data)
			if err != nil {
				return nil, fmt.Errorf("session %s record %d: state change: %w", sid, r.Sequence, err)
			}
			if c != nil {
				out = append(out, *events.StateEntry(sid, r.Sequence, r.Time, c))
			}
			if isEvent {
				out = append(out, entries[j])
				j++
			}
		}
		if len(recs) < stateBatch {
			break
		}
	}
	return append(out, entries[j:]...), nil
}
