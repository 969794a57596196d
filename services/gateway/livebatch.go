package gateway

import (
	"context"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// live fans out the deltas of one message on the session's live subject:
// an AcpEphemeralSessionUpdateEvent, or an EphemeralUpdates of a burst's
// deltas, each of which becomes its own SSE event, the same bytes as if
// it had come alone. All deltas of a message follow the same durable
// event, so the feed checks its place once for them all.
func (f *feed) live(ctx context.Context, m *nats.Msg) {
	v, err := events.Unmarshal(m.Data)
	if err != nil {
		f.lg.Warn("undecodable live message", events.LogKeySubject, m.Subject, events.LogKeyErr, err)
		return
	}
	var (
		sid     string
		after   uint64
		updates []events.JSON
	)
	switch d := v.(type) {
	case *events.AcpEphemeralSessionUpdateEvent:
		sid, after, updates = d.SessionID, d.AfterSequence, []events.JSON{d.Update}
	case *events.EphemeralUpdates:
		sid, after, updates = d.SessionID, d.AfterSequence, d.Updates
	default:
		return // stderr and other live traffic are not for clients
	}
	if len(updates) == 0 {
		return
	}
	// Deltas stream only while a turn runs, so one shows a turn the feed
	// may have missed the start of.
	f.setTurnOpen(true)
	var prev uint64
	prevKnown := false
	if f.events.Last() > 0 {
		ok := true
		if after > max(f.events.Last(), f.known) {
			ok = f.catchUp(ctx, "delta", after+1)
			if ok {
				f.known = max(f.known, after)
			}
		}
		// Below events.Last() the delta is stale for every stream that has the
		// feed's events; a stream decides that itself.
		if ok && after >= f.events.Last() {
			prev, prevKnown = f.events.Last(), true
		}
	}
	d := events.AcpEphemeralSessionUpdateEvent{SessionID: sid, AfterSequence: after}
	for _, u := range updates {
		d.Update = u
		data, err := eventjson.Ephemeral(&d)
		if err != nil {
			f.lg.Warn("live delta has no public form", events.LogKeySeq, after, events.LogKeyErr, err)
			continue
		}
		// The frame is the data and its few field names (more only for
		// data of several lines): sized so, it is one allocation.
		frame := appendEvent(make([]byte, 0, len(data)+32), "", "ephemeral", data)
		f.fanOut(&liveItem{after: after, prev: prev, prevKnown: prevKnown, frame: frame})
	}
}
