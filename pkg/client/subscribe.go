package client

import (
	"context"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// tailBuffer is how many republished records a subscriber holds before the
// connection drops the rest (and the subscriber reads them from history).
const tailBuffer = 4096

// flushTimeout bounds the round trip that puts a subscription in place.
const flushTimeout = 10 * time.Second

// Subscribe yields session sid's durable events after the sequence after
// (0: from the first): first what history holds, then each new one as it
// is stored, until ctx ends (the last value is then ctx's error) or a read
// fails. It subscribes to the stream's RePublish of the session's events
// before it reads history, and drops what it yielded already, so no event
// is missed or yielded twice; a gap in the republished sequence (a slow
// subscriber, a reconnect) is read from history.
func (c *Client) Subscribe(ctx context.Context, sid string, after uint64) iter.Seq2[*events.AcpDurableHistoryEntry, error] {
	return func(yield func(*events.AcpDurableHistoryEntry, error) bool) {
		t, err := c.tail(ctx, events.TailSubject(c.ns, events.SessionID(sid), events.LogEvents))
		if err != nil {
			yield(nil, err)
			return
		}
		defer t.stop()
		last := after
		if !c.catchUp(ctx, sid, &last, yield) {
			return
		}
		for {
			m, err := t.next(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			rec, err := tailRecord(m)
			if err != nil {
				continue // not a record the stream republished
			}
			if rec.seq <= last {
				continue
			}
			if rec.prev > last || t.dropped() {
				if !c.catchUp(ctx, sid, &last, yield) { // it includes this one
					return
				}
				continue
			}
			e, err := eventlog.HistoryEntry(events.SessionID(sid), rec.seq, rec.stored, m.Header, m.Data)
			if err != nil {
				yield(nil, err)
				return
			}
			last = rec.seq
			if !yield(e, nil) {
				return
			}
		}
	}
}

// Follow yields the durable events of every session of the namespace as
// they are stored, from now on, until ctx ends (the last value is then
// ctx's error). Per session, events come in order and once: a gap in a
// session's republished sequence is read from its history.
func (c *Client) Follow(ctx context.Context) iter.Seq2[*events.AcpDurableHistoryEntry, error] {
	return func(yield func(*events.AcpDurableHistoryEntry, error) bool) {
		t, err := c.tail(ctx, events.TailSubject(c.ns, "*", events.LogEvents))
		if err != nil {
			yield(nil, err)
			return
		}
		defer t.stop()
		last := map[string]uint64{} // per session, the last sequence yielded
		for {
			m, err := t.next(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			rec, err := tailRecord(m)
			if err != nil {
				continue
			}
			sid := sessionOf(m.Subject)
			seen, known := last[sid]
			if known && rec.seq <= seen {
				continue
			}
			if known && (rec.prev > seen || t.dropped()) {
				if !c.catchUp(ctx, sid, &seen, yield) {
					return
				}
				last[sid] = seen
				continue
			}
			e, err := eventlog.HistoryEntry(events.SessionID(sid), rec.seq, rec.stored, m.Header, m.Data)
			if err != nil {
				yield(nil, err)
				return
			}
			last[sid] = rec.seq
			if !yield(e, nil) {
				return
			}
		}
	}
}

// catchUp yields the session's events after *last from history, moving
// *last; it reports whether to go on.
func (c *Client) catchUp(ctx context.Context, sid string, last *uint64, yield func(*events.AcpDurableHistoryEntry, error) bool) bool {
	for e, err := range c.History(ctx, sid, *last) {
		if err != nil {
			yield(nil, err)
			return false
		}
		if e.Sequence <= *last {
			continue
		}
		*last = e.Sequence
		if !yield(e, nil) {
			return false
		}
	}
	return true
}

// tailSub is a subscription to republished records.
type tailSub struct {
	sub      *nats.Subscription
	msgs     chan *nats.Msg
	lastDrop int
}

func (c *Client) tail(ctx context.Context, subject string) (*tailSub, error) {
	t := &tailSub{msgs: make(chan *nats.Msg, tailBuffer)}
	var err error
	if t.sub, err = c.nc.ChanSubscribe(subject, t.msgs); err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "subscribe %s: %v", subject, err)
	}
	// The subscription is in place at the server once flushed: only then
	// is history read, so nothing stored in between is missed.
	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	if err := c.nc.FlushWithContext(fctx); err != nil {
		_ = t.sub.Unsubscribe()
		return nil, events.Errorf(events.CodeUnavailable, "subscribe %s: %v", subject, err)
	}
	return t, nil
}

func (t *tailSub) stop() { _ = t.sub.Unsubscribe() } // the connection may be closing: nothing to do

func (t *tailSub) next(ctx context.Context) (*nats.Msg, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-t.msgs:
		return m, nil
	}
}

// dropped reports whether the connection dropped records for this
// subscription since the last call.
func (t *tailSub) dropped() bool {
	n, err := t.sub.Dropped()
	if err != nil || n == t.lastDrop {
		return false
	}
	t.lastDrop = n
	return true
}

// republished is what RePublish's headers say of a record.
type republished struct {
	seq, prev uint64
	stored    time.Time
}

func tailRecord(m *nats.Msg) (republished, error) {
	var r republished
	var err error
	if r.seq, err = strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64); err != nil {
		return r, err
	}
	r.prev, _ = strconv.ParseUint(m.Header.Get(jetstream.LastSequenceHeader), 10, 64) // 0: the subject's first
	r.stored, _ = time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	return r, nil
}

// sessionOf returns the session ID of acp.tail.<ns>.<sid>.<kind>.
func sessionOf(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 {
		return ""
	}
	return parts[3]
}
