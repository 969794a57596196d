package gateway

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/sessionstate"
)

// State events: the feed's part (sse.go has the wire format).
//
// The feed sees every record stored for its session, in log order: the
// public events and the control records alike arrive on its one tail
// subscription (the stream's RePublish of events.LogFilter), and its
// catch-ups read them all back. So the state changes come from the log,
// derived from each record by sessionstate.ChangeOf as the history service
// derives them, and a stream that resumes from history sends the same
// events, byte for byte, as one that was live.
//
// A durable event that changes the state (it accepts a turn, or asks a
// person) carries its state event in its own item, just before it. A
// control record that changes it (TurnFinished, SessionUnloaded, an
// adapter's exit) becomes an item of its own, with its sequence as id.
// Before the feed fans that item out it makes sure it holds every record
// of the session before it, as for a delta: when the record does not
// follow what the feed knows directly, it catches up to it first (one
// batch read, for all the viewers), and it says so in the item
// (prevKnown), so that no stream moves its cursor past a record it
// missed. A stream that cannot be vouched for reads history itself
// (sse.go, handle).

// newStateTracker returns the feed's state tracker. Its lookup (whether the
// session's last turn failed, for an unload or an exit outside a turn
// before the feed saw a turn end) reads the log; a read that fails leaves
// the status idle, logged, rather than holding back the state event.
func (f *feed) newStateTracker(ctx context.Context) *sessionstate.Tracker {
	return &sessionstate.Tracker{Lookup: func(seq uint64) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, feedReadTimeout)
		defer cancel()
		failed, err := sessionstate.LastTurnFailed(cctx, f.h.g.js, f.ns, f.sid, seq)
		if err != nil && ctx.Err() == nil {
			f.lg.Warn("live feed could not read the last turn's outcome", events.LogKeySeq, seq, events.LogKeyErr, err)
		}
		return failed, nil
	}}
}

// stateFrame returns the state event of the public event at seq, whose
// record has headers hdr and payload data, or nil when it changes nothing.
func (f *feed) stateFrame(seq uint64, timestamp string, hdr nats.Header, data []byte) []byte {
	c, err := f.state.Change(seq, hdr, data)
	if err != nil {
		f.lg.Warn("live feed could not derive a state change", events.LogKeySeq, seq, events.LogKeyErr, err)
		return nil
	}
	if c == nil {
		return nil
	}
	e := &events.AcpDurableHistoryEntry{SessionID: string(f.sid), Sequence: seq, Timestamp: timestamp, Event: events.Union[events.AcpDurableEvent]{V: c}}
	body, err := eventjson.Durable(e)
	if err != nil {
		f.lg.Error("state change has no public form", events.LogKeySeq, seq, events.LogKeyErr, err)
		return nil
	}
	return appendEvent(nil, "", "state", body)
}

// tailControl handles a control record received on the tail.
//
// A control record that directly follows what the feed knows (every
// sequence between the last public event and it was one the feed heard)
// extends what it knows: no public event lies up to it. That is the usual
// case on a quiet stream, and costs nothing. One that changes the state
// and does not follow so is vouched for by a read of the log forward to it
// first: one batch read, counted as a gap fill only when it found a public
// event the feed had missed.
func (f *feed) tailControl(ctx context.Context, m *nats.Msg) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		f.lg.Error("tail record without a sequence", events.LogKeySubject, m.Subject)
		return
	}
	if seq <= f.lastCtl {
		return // handled already, by a catch-up
	}
	vouched := f.events.Last() > 0 && seq-1 <= max(f.events.Last(), f.known)
	if vouched {
		f.known = max(f.known, seq)
	}
	if !sessionstate.ControlRecord(m.Header) {
		return
	}
	stored, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		f.lg.Error("tail record without a store time", events.LogKeySubject, m.Subject, events.LogKeySeq, seq)
		return
	}
	if !vouched && f.events.Last() > 0 {
		before := f.events.Last()
		vouched = f.readForward(ctx, seq)
		if f.events.Last() != before {
			f.h.g.metrics.gapFills.Inc()
			f.lg.Debug("live feed gap", logKeyReason, "control", events.LogKeySeq, seq, logKeyLastSent, before)
		}
	}
	f.control(seq, stored, m.Header, m.Data, vouched)
}

// control fans out the state change of the control record at seq, if it
// causes one. vouched: the feed has fanned out every record of the session
// before it.
func (f *feed) control(seq uint64, stored time.Time, hdr nats.Header, data []byte, vouched bool) {
	f.lastCtl = max(f.lastCtl, seq)
	if vouched {
		// No public event lies between the last one and this record.
		f.known = max(f.known, seq)
	}
	c, err := f.state.Change(seq, hdr, data)
	if err != nil {
		f.lg.Warn("live feed could not derive a state change", events.LogKeySeq, seq, events.LogKeyErr, err)
		return
	}
	if c == nil {
		return
	}
	body, err := eventjson.Durable(sessionstate.Entry(f.sid, seq, stored, c))
	if err != nil {
		f.lg.Error("state change has no public form", events.LogKeySeq, seq, events.LogKeyErr, err)
		return
	}
	f.fanOut(&liveItem{
		durable: true, control: true, seq: seq, prev: f.events.Last(), prevKnown: vouched,
		frame: appendEvent(nil, strconv.FormatUint(seq, 10), "state", body),
	})
}
