package client

import (
	"context"
	"iter"
	"strings"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/tail"
)

// tailBuffer is how many republished records a subscriber holds before the
// connection drops the rest (and the subscriber reads them from history).
const tailBuffer = 4096

// Subscribe yields session sid's durable events after the sequence after
// (0: from the first): first what history holds, then each new one as it
// is stored, until ctx ends (the last value is then ctx's error) or a read
// fails. It subscribes to the stream's RePublish of the session's events
// before it reads history, and drops what it yielded already, so no event
// is missed or yielded twice; a gap in the republished sequence (a slow
// subscriber, a reconnect) is read from history (package tail).
func (c *Client) Subscribe(ctx context.Context, sid string, after uint64) iter.Seq2[*events.AcpDurableHistoryEntry, error] {
	return func(yield func(*events.AcpDurableHistoryEntry, error) bool) {
		sub, err := tail.Subscribe(ctx, c.nc, events.TailSubject(c.ns, events.SessionID(sid), events.LogEvents), tailBuffer)
		if err != nil {
			yield(nil, err)
			return
		}
		defer sub.Stop()
		chain := tail.NewChain(c.js, events.StreamLog, events.LogSubject(c.ns, events.SessionID(sid), events.LogEvents), after)
		if !c.catchUp(ctx, sid, chain, yield) {
			return
		}
		for {
			m, resync, err := sub.Next(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			if resync {
				if !c.catchUp(ctx, sid, chain, yield) {
					return
				}
				continue
			}
			if !c.offer(ctx, sid, chain, m, yield) {
				return
			}
		}
	}
}

// Follow yields the durable events of every session of the namespace as
// they are stored, from now on, until ctx ends (the last value is then
// ctx's error). Per session, events come in order and once: a gap in a
// session's republished sequence is read from its history, and so is
// what a reconnect may have lost of each session seen so far.
func (c *Client) Follow(ctx context.Context) iter.Seq2[*events.AcpDurableHistoryEntry, error] {
	return func(yield func(*events.AcpDurableHistoryEntry, error) bool) {
		sub, err := tail.Subscribe(ctx, c.nc, events.TailSubject(c.ns, "*", events.LogEvents), tailBuffer)
		if err != nil {
			yield(nil, err)
			return
		}
		defer sub.Stop()
		chains := map[string]*tail.Chain{} // per session seen, its place
		for {
			m, resync, err := sub.Next(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			if resync {
				for sid, chain := range chains {
					if !c.catchUp(ctx, sid, chain, yield) {
						return
					}
				}
				continue
			}
			sid := sessionOf(m.Subject)
			chain := chains[sid]
			if chain == nil {
				// Joined at its first record: nothing before it is read.
				chain = tail.Joined(c.js, events.StreamLog, events.LogSubject(c.ns, events.SessionID(sid), events.LogEvents))
				chains[sid] = chain
			}
			if !c.offer(ctx, sid, chain, m, yield) {
				return
			}
		}
	}
}

// offer yields what one republished message of the session makes known:
// the message's event, or, after a gap, the session's history from its
// place (the event included); it reports whether to go on.
func (c *Client) offer(ctx context.Context, sid string, chain *tail.Chain, m *nats.Msg, yield func(*events.AcpDurableHistoryEntry, error) bool) bool {
	seq, a := chain.Decide(m)
	switch a {
	case tail.Skip:
		return true
	case tail.Fill:
		return c.catchUp(ctx, sid, chain, yield)
	}
	_, _, stored, _ := tail.Republished(m)
	e, err := eventlog.HistoryEntry(events.SessionID(sid), seq, stored, m.Header, m.Data)
	if err != nil {
		yield(nil, err)
		return false
	}
	chain.Delivered(seq)
	return yield(e, nil)
}

// catchUp yields the session's events after its place from history,
// moving the place; it reports whether to go on.
func (c *Client) catchUp(ctx context.Context, sid string, chain *tail.Chain, yield func(*events.AcpDurableHistoryEntry, error) bool) bool {
	for e, err := range c.History(ctx, sid, chain.Last()) {
		if err != nil {
			yield(nil, err)
			return false
		}
		if e.Sequence <= chain.Last() {
			continue
		}
		chain.Delivered(e.Sequence)
		if !yield(e, nil) {
			return false
		}
	}
	return true
}

// sessionOf returns the session ID of acp.tail.<ns>.<sid>.<kind>.
func sessionOf(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 {
		return ""
	}
	return parts[3]
}
