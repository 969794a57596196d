// Package sessionstate derives a session's state from its log: the
// status a session has (Facts.Status, the one rule every reader of a session
// applies), and the state change (events.SessionStateChange) each log record
// causes.
//
// Every viewer of a session learns where each turn began and ended, and
// how, from the same log records the session service wrote; nothing is
// stored for them. A state change is derived from one log record
// (ChangeOf), the same way wherever the record was read: the
// gateway's live feed from the stream's RePublish, the history service
// from direct gets. So a live viewer and one replaying history see the
// same changes, byte for byte.
//
// The records that change a session's state, and the change each causes:
//
//   - the accepting record of a turn (HeaderTurnAccepted, a durable
//     user-message event): turn_accepted, status running;
//   - a durable permission_request or input_request event: waiting,
//     status waiting, waitingFor naming the request;
//   - TurnFinished: turn_finished, status idle (completed or cancelled,
//     with the stop reason) or failed (with the error). A cancelled or
//     failed turn's change says discardDeltas: every viewer drops the
//     ephemeral deltas it showed for the turn, which no durable message
//     completes;
//   - TurnStall: stalled (status stalled) when the turn's agent went
//     silent, resumed (status running) when it spoke again;
//   - PromptQueued: queued, PromptDequeued: dequeued (a prompt put in
//     or taken out of the queue), with the status the record names;
//   - SessionUnloaded: unloaded;
//   - an adapter's exit nobody asked for (AcpAgentExitedEvent):
//     adapter_exited.
//
// A change caused by a durable event has that event's sequence, and is
// shown just before it; one caused by a control record has the record's
// sequence, which no durable event has.
package sessionstate

import (
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
)

// ChangeOf returns the state change that the stored log record with
// headers hdr and payload data causes, or nil when it changes nothing.
//
// The status after an unload or an adapter exit outside a turn is what it
// was before: failed when the session's last turn failed, else idle.
// lastFailed answers that; it is called only then, and may read the log.
// Inside a turn (the record carries HeaderTurnID) the status is running:
// the turn's TurnFinished follows and says how it ended.
func ChangeOf(hdr nats.Header, data []byte, lastFailed func() (bool, error)) (*events.SessionStateChange, error) {
	turnID := hdr.Get(events.HeaderTurnID)
	switch kind := hdr.Get(events.HeaderRecord); kind {
	case events.AcpDurableSessionUpdate{}.VariantName():
		if hdr.Get(events.HeaderTurnAccepted) == "" {
			return nil, nil
		}
		return &events.SessionStateChange{Change: events.ChangeTurnAccepted, Status: Facts{TurnOpen: true}.Status(), TurnID: turnID}, nil
	case events.AcpDurablePermissionRequest{}.VariantName(), events.InputRequest{}.VariantName():
		v, err := events.Unmarshal(data)
		if err != nil {
			return nil, err
		}
		w := &events.WaitingFor{}
		switch r := v.(type) {
		case *events.AcpDurablePermissionRequest:
			w.Kind, w.RequestID = events.WaitingPermission, r.RequestID
		case *events.InputRequest:
			w.Kind, w.RequestID = events.WaitingInput, r.RequestID
		default:
			return nil, events.Errorf(events.CodeInvalidPayload, "record marked %s holds %s", kind, v.VariantName())
		}
		st := Facts{TurnOpen: turnID != "", Waiting: true}.Status()
		return &events.SessionStateChange{Change: events.ChangeWaiting, Status: st, TurnID: turnID, WaitingFor: w}, nil
	case events.RecordTurnFinished:
		f, err := events.Decode[events.TurnFinished](data)
		if err != nil {
			return nil, err
		}
		st := Facts{LastFailed: f.Failed()}.Status()
		c := &events.SessionStateChange{Change: events.ChangeTurnFinished, Status: st, TurnID: f.TurnID, StopReason: f.StopReason}
		switch {
		case f.Failed():
			e := f.Failure()
			c.DiscardDeltas, c.StopReason = true, ""
			c.Error = &events.StateChangeError{Code: e.Code, Message: e.Message}
		case f.Outcome == events.OutcomeCancelled:
			c.DiscardDeltas = true
		}
		return c, nil
	case events.RecordTurnStall:
		s, err := events.Decode[events.TurnStall](data)
		if err != nil {
			return nil, err
		}
		if s.Stalled {
			return &events.SessionStateChange{Change: events.ChangeStalled, Status: Facts{TurnOpen: true, Stalled: true}.Status(), TurnID: turnID}, nil
		}
		return &events.SessionStateChange{Change: events.ChangeResumed, Status: Facts{TurnOpen: true}.Status(), TurnID: turnID}, nil
	case events.RecordPromptQueued:
		q, err := events.Decode[events.PromptQueued](data)
		if err != nil {
			return nil, err
		}
		return &events.SessionStateChange{Change: events.ChangeQueued, Status: q.Status, TurnID: turnID,
			Queue: &events.QueueChange{ID: q.QueueID, Position: q.Position}}, nil
	case events.RecordPromptDequeued:
		q, err := events.Decode[events.PromptDequeued](data)
		if err != nil {
			return nil, err
		}
		c := &events.SessionStateChange{Change: events.ChangeDequeued, Status: q.Status, TurnID: q.TurnID,
			Queue: &events.QueueChange{ID: q.QueueID, Reason: q.Reason}}
		if q.Error != nil {
			c.Error = &events.StateChangeError{Code: q.Error.Code, Message: q.Error.Message}
		}
		return c, nil
	case events.RecordSessionUnloaded, events.RecordAgentExited:
		c := &events.SessionStateChange{Change: events.ChangeUnloaded, TurnID: turnID}
		if kind == events.RecordAgentExited {
			c.Change = events.ChangeAdapterExited
		}
		facts := Facts{TurnOpen: turnID != ""}
		if !facts.TurnOpen {
			failed, err := lastFailed()
			if err != nil {
				return nil, err
			}
			facts.LastFailed = failed
		}
		c.Status = facts.Status()
		return c, nil
	}
	return nil, nil
}

// ControlRecord reports whether a control record with headers hdr
// (one not on the LogEvents subject) may change the session's state: a
// cheap look, before anything is read or decoded for it.
func ControlRecord(hdr nats.Header) bool {
	switch hdr.Get(events.HeaderRecord) {
	case events.RecordTurnFinished, events.RecordSessionUnloaded, events.RecordAgentExited, events.RecordTurnStall,
		events.RecordPromptQueued, events.RecordPromptDequeued:
		return true
	}
	return false
}

// Entry returns the history entry of change c, caused by the record
// at seq stored at stored.
func Entry(sid events.SessionID, seq uint64, stored time.Time, c *events.SessionStateChange) *events.AcpDurableHistoryEntry {
	return &events.AcpDurableHistoryEntry{
		SessionID: string(sid),
		Sequence:  seq,
		Timestamp: stored.UTC().Format(events.TimestampFormat),
		Event:     events.Union[events.AcpDurableEvent]{V: c},
	}
}

// Tracker follows a session's records in log order and derives their
// state changes, remembering whether the last turn it saw failed, so that
// it asks its lookup (which reads the log) at most once, and only for an
// unload or an exit outside a turn before it has seen a turn end.
type Tracker struct {
	// Lookup reports whether the session's last turn before the record at
	// seq failed.
	Lookup func(seq uint64) (bool, error)
	known  bool
	failed bool
}

// Change is ChangeOf for the record at seq, which must follow every
// record the tracker was given before.
func (t *Tracker) Change(seq uint64, hdr nats.Header, data []byte) (*events.SessionStateChange, error) {
	c, err := ChangeOf(hdr, data, func() (bool, error) {
		if !t.known && t.Lookup != nil {
			failed, err := t.Lookup(seq)
			if err != nil {
				return false, err
			}
			t.known, t.failed = true, failed
		}
		return t.failed, nil
	})
	if err != nil || c == nil {
		return c, err
	}
	switch c.Change {
	case events.ChangeTurnAccepted:
		t.known, t.failed = true, false
	case events.ChangeTurnFinished:
		t.known, t.failed = true, c.Status == events.StatusFailed
	}
	return c, nil
}
