// Package tail reads a live tail: the records a JetStream stream
// republishes as it stores them (RePublish), delivered in stream order and
// once each, with whatever the tail missed read back from the log.
//
// RePublish is at-most-once. A record is lost in transit when the
// subscriber's connection is away (a reconnect, a server's restart), when
// the client library drops messages for a slow subscriber, or when the
// stream's leader dies between storing and republishing. Every reader of a
// tail must therefore do the same four things, and this package does them
// once:
//
//  1. Subscribe first, then read the log after its cursor, then follow
//     the tail (Subscribe flushes, so the server holds the subscription
//     before anything is read): nothing stored in between is missed.
//  2. Dedupe by sequence: a record at or below the cursor, read back
//     already or republished twice, is dropped (Chain.Offer).
//  3. Fill gaps: each republished record names its subject's previous
//     record (Nats-Last-Sequence); one above the cursor proves records
//     were missed, and they are read back from the log before it.
//  4. Look for the end when nothing follows a loss: after a reconnect, or
//     messages the library dropped, Sub.Next says so (resync), and the
//     reader reads the log to its end (Chain.CatchUp) rather than wait for
//     a record that came and went.
//
// Reads back are direct gets in pages bounded by count and by bytes
// (eventlog.ForwardPage), each tried in attempts: a direct get that its
// replica never answers (a stalled get, a replica catching up) costs an
// attempt, not the reader's whole deadline.
//
// A Chain follows one subject, whose records link to each other by
// Nats-Last-Sequence; a reader of many subjects (every session of a
// namespace) keeps a Chain per subject. Neither type starts a goroutine:
// the reader drives them from its own.
//
// Its readers: the gateway's event streams and live feed, pkg/client's
// Subscribe and Follow, turnwait's wait for a turn, and the session
// owner's read of its adapter's ACP_IO (a callback subscription that
// offers each message to its Chain).
package tail

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Record is one stored record, republished or read back.
type Record = eventlog.Record

// Bounds of one read back: PageRecords records, PageBytes of payloads.
const (
	PageRecords = 1000
	PageBytes   = 8 << 20
)

// Chain is a reader's place in one subject of a stream: the newest record
// it delivered. It is not safe for concurrent use.
type Chain struct {
	js      jetstream.JetStream
	stream  string
	subject string // the stored subject, where records are read back
	last    uint64
	known   bool
}

// NewChain returns the place after the sequence after (0: before the
// first record) on subject, a literal subject of stream.
func NewChain(js jetstream.JetStream, stream, subject string, after uint64) *Chain {
	return &Chain{js: js, stream: stream, subject: subject, last: after, known: true}
}

// Joined returns a place on subject that is known only from the first
// record offered: a reader that starts from now (Follow) delivers that
// record and reads back nothing before it.
func Joined(js jetstream.JetStream, stream, subject string) *Chain {
	return &Chain{js: js, stream: stream, subject: subject}
}

// Last is the newest sequence delivered, or the starting cursor.
func (c *Chain) Last() uint64 { return c.last }

// Republished is what RePublish's headers say of a message: the record's
// sequence, its subject's previous record's (0: none), and when it was
// stored. ok is false for a message that is not a republished record.
func Republished(m *nats.Msg) (seq, prev uint64, stored time.Time, ok bool) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil || seq == 0 {
		return 0, 0, time.Time{}, false
	}
	prev, _ = strconv.ParseUint(m.Header.Get(jetstream.LastSequenceHeader), 10, 64)
	stored, _ = time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	return seq, prev, stored, true
}

// Action is what a reader does with a republished message (Decide).
type Action int

// The actions of Decide.
const (
	// Skip: not a republished record, or one delivered already.
	Skip Action = iota
	// Deliver the record, then call Delivered.
	Deliver
	// Fill: records before it were missed. Read them back (and it with
	// them, or deliver it after), calling Delivered for each.
	Fill
)

// Decide says what to do with one message of the chain's tail, for a
// reader that reads back from elsewhere than the log (the history
// service's pages); Offer does it all for one that reads the log. seq is
// the message's record's sequence.
func (c *Chain) Decide(m *nats.Msg) (seq uint64, a Action) {
	seq, prev, _, ok := Republished(m)
	if !ok {
		return seq, Skip
	}
	return seq, c.DecideAt(seq, prev)
}

// DecideAt is Decide for a record known by its sequence seq and its
// predecessor's prev (0: none), for a reader that has them from elsewhere
// than the message (a fan-out's decoded item): at or below Last it is
// Skip, with its predecessor past Last it is Fill, else Deliver. A chain
// that starts from its first record (Joined) delivers that one as it is.
func (c *Chain) DecideAt(seq, prev uint64) Action {
	switch {
	case c.known && seq <= c.last:
		return Skip
	case c.known && prev > c.last:
		return Fill
	}
	return Deliver
}

// Delivered moves the chain past seq, a record the reader delivered
// itself (Decide); a seq at or below Last leaves it.
func (c *Chain) Delivered(seq uint64) {
	if !c.known || seq > c.last {
		c.last, c.known = seq, true
	}
}

// Offer takes one message of the chain's tail and delivers, in order, the
// records it makes known: none for a record at or below Last (a
// duplicate) or a message that is not a republished record; the records
// missed before it, read back from the log, when its predecessor is above
// Last; then the record itself. A deliver error stops the delivery and is
// returned; Last is the last record delivered.
func (c *Chain) Offer(ctx context.Context, m *nats.Msg, deliver func(*Record) error) error {
	seq, a := c.Decide(m)
	switch a {
	case Skip:
		return nil
	case Fill:
		if err := c.CatchUp(ctx, seq, deliver); err != nil {
			return err
		}
		if seq <= c.last {
			return nil // read back with the gap
		}
	}
	_, _, stored, _ := Republished(m)
	r := &Record{Subject: m.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: m.Header, Data: m.Data, Time: stored}
	if r.Subject == "" {
		r.Subject = c.subject
	}
	if err := deliver(r); err != nil {
		return err
	}
	c.last, c.known = seq, true
	return nil
}

// CatchUp reads the chain's records after Last from the log, up to and
// including upTo (0: up to the log's end), and delivers them in order. A
// failed read is CodeUnavailable and wraps the read's error; a deliver
// error is returned as it is.
func (c *Chain) CatchUp(ctx context.Context, upTo uint64, deliver func(*Record) error) error {
	for {
		recs, more, err := eventlog.ForwardPage(ctx, c.js, c.stream, c.subject, c.last, PageRecords, PageBytes)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			// Unavailable, with the read's own failure beneath it, so a
			// reader can tell one worth trying again (eventlog.Transient).
			return fmt.Errorf("%w: %w", events.Errorf(events.CodeUnavailable, "read %s after %d", c.subject, c.last), err)
		}
		for _, r := range recs {
			if upTo != 0 && r.Sequence > upTo {
				return nil
			}
			if err := deliver(r); err != nil {
				return err
			}
			c.last, c.known = r.Sequence, true
		}
		if !more || len(recs) == 0 {
			return nil
		}
	}
}

// Sub is a subscription to tail subjects that also reports what a
// subscription does not show: messages the client library dropped, and
// the connection's reconnects, after either of which a record may be
// missing with nothing after it to say so. Its subjects' messages come on
// one channel, in the order the connection read them.
type Sub struct {
	nc       *nats.Conn
	subs     []*nats.Subscription
	msgs     chan *nats.Msg
	status   chan nats.Status
	lastDrop int
	held     *nats.Msg // a message Next returns before any other
}

// flushTimeout bounds the round trip that puts a subscription in place.
const flushTimeout = 10 * time.Second

// Subscribe subscribes to subject, holding up to buffer messages between
// the connection and Next (past that the library drops them, and Next
// says so), and returns once the server holds the subscription: records
// stored from then on reach it.
func Subscribe(ctx context.Context, nc *nats.Conn, subject string, buffer int) (*Sub, error) {
	s, err := Open(nc, buffer, subject)
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		s.Stop()
		return nil, events.Errorf(events.CodeUnavailable, "subscribe %s: %v", subject, err)
	}
	return s, nil
}

// Open is Subscribe to one or more subjects without the flush: the server
// holds the subscriptions once the caller has flushed the connection,
// which it must do before it reads back (a reader that opens many at once
// flushes once).
func Open(nc *nats.Conn, buffer int, subjects ...string) (*Sub, error) {
	s := &Sub{nc: nc, msgs: make(chan *nats.Msg, buffer), status: nc.StatusChanged(nats.CONNECTED)}
	for _, subject := range subjects {
		sub, err := nc.ChanSubscribe(subject, s.msgs)
		if err != nil {
			s.Stop()
			return nil, events.Errorf(events.CodeUnavailable, "subscribe %s: %v", subject, err)
		}
		s.subs = append(s.subs, sub)
	}
	return s, nil
}

// Stop ends the subscriptions.
func (s *Sub) Stop() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe() // the connection may be closing: its subscriptions go with it
	}
	s.nc.RemoveStatusListener(s.status)
}

// Messages is the subscriptions' channel, for a reader that selects on
// more than the tail. Such a reader calls Lost on each message, and
// catches up on each value of Reconnected.
func (s *Sub) Messages() <-chan *nats.Msg { return s.msgs }

// Reconnected receives a value each time the connection reconnects.
func (s *Sub) Reconnected() <-chan nats.Status { return s.status }

// Lost returns how many messages the library dropped for the
// subscriptions since the last call (of Lost or Next).
func (s *Sub) Lost() int {
	total := 0
	for _, sub := range s.subs {
		if n, err := sub.Dropped(); err == nil {
			total += n
		}
	}
	n := total - s.lastDrop
	s.lastDrop = total
	return max(n, 0)
}

// Next returns the next message, or, with resync set and no message, that
// the tail may have lost records since the last call: the connection
// reconnected, or the library dropped messages. The reader then reads
// its chains to the log's end (Chain.CatchUp with 0). It ends with ctx's
// error.
func (s *Sub) Next(ctx context.Context) (m *nats.Msg, resync bool, err error) {
	if s.Lost() > 0 {
		return nil, true, nil
	}
	if s.held != nil {
		m, s.held = s.held, nil
		return m, false, nil
	}
	select {
	case <-ctx.Done():
		return nil, false, context.Cause(ctx)
	case <-s.status:
		return nil, true, nil
	case m = <-s.msgs:
		if s.Lost() > 0 {
			// What was lost came before m: the reader reads it back
			// first, and m is offered next.
			s.held = m
			return nil, true, nil
		}
		return m, false, nil
	}
}
