package sessionstate

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// State changes (ChangeOf) are derived from one record each,
// save one fact: the status after an unload or an adapter exit outside a
// turn is failed when the session's last turn failed. A reader that has
// not seen that turn end (a live feed that started later, a history page)
// reads it back with LastTurnFailed, once.

// stateLookBack is how many public events before a record LastTurnFailed
// looks through for one of a turn. Events outside turns are rare (an
// agent's announcements between turns), so a turn ends among the last
// few; a session with more than this many such events in a row is taken
// as idle.
const stateLookBack = 16

// stateFinishWindow bounds the records read after a turn's last public
// event to find its TurnFinished: only the turn's last control records
// lie between.
const stateFinishWindow = 64

// LastTurnFailed reports whether the newest turn of the session that
// ended before the record at seq failed: it finds the newest public event
// before seq that belongs to a turn, then that turn's TurnFinished after
// it. A session with no such turn (or whose finish is not found before
// seq) is not failed.
func LastTurnFailed(ctx context.Context, js jetstream.JetStream, ns events.Namespace, sid events.SessionID, seq uint64) (bool, error) {
	recs, err := eventlog.Backward(ctx, js, events.StreamLog, events.LogSubject(ns, sid, events.LogEvents), seq, stateLookBack)
	if err != nil {
		return false, err
	}
	var (
		turnID string
		after  uint64
	)
	for i := len(recs) - 1; i >= 0; i-- {
		if id := recs[i].Header.Get(events.HeaderTurnID); id != "" {
			turnID, after = id, recs[i].Sequence
			break
		}
	}
	if turnID == "" {
		return false, nil
	}
	recs, err = eventlog.Forward(ctx, js, events.StreamLog, events.LogFilter(ns, sid), after, stateFinishWindow)
	if err != nil {
		return false, err
	}
	for _, r := range recs {
		if r.Sequence >= seq {
			break
		}
		if r.Header.Get(events.HeaderRecord) != events.RecordTurnFinished || r.Header.Get(events.HeaderTurnID) != turnID {
			continue
		}
		f, err := events.Decode[events.TurnFinished](r.Data)
		if err != nil {
			return false, err
		}
		return f.Failed(), nil
	}
	return false, nil
}
