package gateway

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// The end check: a feed that reads where its session's log ends.
//
// A feed learns of the records it missed from the messages that follow
// them (hub.go). When none follows, its viewers would wait for the next
// turn, or until they reconnect. Two moments call for a look at the log
// instead:
//
//   - The connection reconnected. Whatever was stored while it was away
//     was republished to nobody on this gateway. Every feed checks once,
//     for all its viewers, as soon as the connection is back.
//   - A turn is open and the feed has heard nothing for endCheckInterval.
//     A turn always ends with a record, so while one is open a silent
//     feed may be one that missed its end: the feed checks at each quiet
//     tick until the log says the turn is over and the feed holds all of
//     it. An idle session costs nothing: no timer runs and nothing is read.
//
// A check is one direct get, of the newest record of the session
// (eventlog.Last on events.LogFilter). When that record is one the feed
// already accounts for, it is done. Else the feed reads forward from its
// last public event (one batch direct get, eventlog.Forward), fans out
// what it finds, and from then on knows that no public event lies up to
// that record (feed.known), so the next check costs the one get again. The
// record also tells, by the rule of eventlog.OpenTurn, whether a turn is
// open, which decides whether the checks go on.
//
// A missed record is so on every viewer's stream within about two
// intervals of the feed's last message, plus the reads. On R3 a direct get
// may be served by a follower behind the leader: a check that finds the
// newest public event missing from the read forward keeps checking, but
// one whose newest record is a lifecycle record cannot tell a follower
// that lacks a public event before it, and vouches for it (as the
// catch-up for a delta does, hub.go).

// endCheckInterval is how long a feed with an open turn stays quiet before
// it checks the log's end, and how often it checks while quiet.
const endCheckInterval = time.Second

// feedReadTimeout bounds each read a feed makes, a check of the log's end
// or a catch-up. The feed's goroutine moves every message of the session
// to its viewers, and it waits while it reads: a read that cannot finish
// soon (a replica that died with the request, every replica catching up)
// is given up, and the next quiet tick checks again, rather than holding
// the session's viewers for the request API's deadline. (Each read asks
// again after a second without an answer: eventlog's attempts.)
const feedReadTimeout = 5 * time.Second

// behindWarn is how many end checks in a row may find the feed behind the
// log's end before it logs a warning.
const behindWarn = 5

// Causes of an end check, in the feed's logs.
const (
	causeReconnect = "reconnect"
	causeQuiet     = "quiet"
)

// observe applies a record the feed received to what it knows of the
// session's turn: by the rule of eventlog.OpenTurn, a turn is open exactly
// when the newest record carries HeaderTurnID and is not a TurnFinished.
func (f *feed) observe(h nats.Header) {
	f.setTurnOpen(h.Get(events.HeaderTurnID) != "" && h.Get(events.HeaderRecord) != events.RecordTurnFinished)
}

// setTurnOpen starts or stops the quiet ticks.
func (f *feed) setTurnOpen(open bool) {
	if open == f.turnOpen {
		return
	}
	f.turnOpen = open
	if open {
		// The message that opened it was just heard: quiet counts from
		// now.
		f.heard = false
		f.endCheck.Reset(endCheckInterval)
	} else {
		f.endCheck.Stop()
	}
}

// checkEnd reads where the session's log ends and catches the feed up to
// there. Until a check succeeds and finds the feed complete and the turn
// over, the feed goes on checking at each quiet tick.
func (f *feed) checkEnd(ctx context.Context, cause string) {
	g := f.h.g
	f.setTurnOpen(true) // until this check proves otherwise
	cctx, cancel := context.WithTimeout(ctx, feedReadTimeout)
	last, err := eventlog.Last(cctx, g.js, events.StreamLog, f.logFilter)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			f.lg.Warn("live feed could not read the log's end", logKeyReason, cause, events.LogKeyErr, err)
		}
		return
	}
	if last == nil {
		f.setTurnOpen(false) // nothing stored (a deleted session)
		return
	}
	_, _, open, err := eventlog.OpenTurn(last)
	if err != nil {
		// A writer bug, logged; the checks would find it again forever.
		f.lg.Warn("live feed read a bad newest record", events.LogKeySeq, last.Sequence, events.LogKeyErr, err)
		open = false
	}
	complete := true
	if last.Sequence > max(f.events.Last(), f.known) {
		f.lg.Debug("live feed behind the log's end", logKeyReason, cause,
			events.LogKeySeq, last.Sequence, logKeyLastSent, f.events.Last())
		complete = f.reach(ctx, last)
		// The session's state may have changed (a turn's end that the
		// feed missed): watches answer with it.
		f.wakeWatches()
	}
	if complete {
		f.behind = 0
	} else if f.behind++; f.behind == behindWarn {
		// A feed that keeps finding the log ahead and cannot get there
		// leaves its viewers waiting: say so, once, with what it knows.
		f.lg.Warn("live feed cannot reach the log's end", logKeyReason, cause, "checks", f.behind,
			events.LogKeySeq, last.Sequence, events.LogKeySubject, last.Subject,
			logKeyLastSent, f.events.Last(), logKeyEventNo, f.lastNo, "known", f.known)
	}
	f.setTurnOpen(open || !complete)
}

// reach fans out the public events up to last, the log's newest record,
// and reports whether the feed now holds all of them.
func (f *feed) reach(ctx context.Context, last *eventlog.Record) bool {
	if f.events.Last() == 0 {
		return f.seed(ctx, last)
	}
	before := f.events.Last()
	if !f.readForward(ctx, 0) {
		return false
	}
	if f.events.Last() != before {
		f.h.g.metrics.gapFills.Inc()
	}
	if last.Subject == f.logSubject && f.events.Last() < last.Sequence {
		return false // read from a follower behind the one that answered Last
	}
	f.known = max(f.known, last.Sequence)
	return true
}

// seed is reach for a feed that has fanned out no public event yet, so has
// no number to read forward from, and must not read the whole session.
// Every stream read history itself when it joined: what a stream may lack
// is the session's newest public event and those before it, back to its
// backfill. The feed fans out the newest one only, naming as its
// predecessor the sequence just before it. That is true of whatever
// precedes it, and a stream whose last event is further back fills from
// history (sse.go, step 4), which brings the rest. (A stream that has it
// drops it, as it does any event at or below the last it sent.)
func (f *feed) seed(ctx context.Context, last *eventlog.Record) bool {
	ev := last
	if last.Subject != f.logSubject {
		var err error
		cctx, cancel := context.WithTimeout(ctx, feedReadTimeout)
		ev, err = eventlog.Last(cctx, f.h.g.js, events.StreamLog, f.logSubject)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				f.lg.Warn("live feed could not read the newest public event", events.LogKeyErr, err)
			}
			return false
		}
		if ev == nil {
			if last.Sequence > f.lastCtl {
				f.control(last.Sequence, last.Time, last.Header, last.Data, false)
			}
			f.known = max(f.known, last.Sequence) // no public event at all
			return true
		}
	}
	e, err := eventlog.HistoryEntry(f.sid, ev.Sequence, ev.Time, ev.Header, ev.Data)
	if err != nil {
		// Left to the streams, which learn of it from the next event's
		// predecessor, and read it from history, which reports it.
		f.lg.Warn("live feed read an undecodable newest event", events.LogKeySeq, ev.Sequence, events.LogKeyErr, err)
		f.known = max(f.known, last.Sequence)
		return true
	}
	f.h.g.metrics.gapFills.Inc()
	f.durable(e, ev.Sequence-1, ev.Header, ev.Data)
	if last != ev && last.Sequence > f.lastCtl {
		// The log ends with a control record: its state change, if any,
		// which no stream can have had from the feed. The feed cannot
		// vouch for what lies before it: a stream behind it reads
		// history.
		f.control(last.Sequence, last.Time, last.Header, last.Data, false)
	}
	f.known = max(f.known, last.Sequence)
	return true
}
