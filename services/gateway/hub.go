package gateway

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/sessionstate"
	"skein.dev/pkg/events/tail"
)

// The live hub: every viewer of a session on this gateway shares one feed.
//
// A feed holds the gateway's only two subscriptions for its session, to
// the stream's RePublish of every record stored for the session (public
// events and lifecycle records alike: the tail of events.LogFilter) and to
// the live deltas (events.LiveSubject). It exists while the session has
// viewers: the first viewer's join subscribes, the last one's leave
// unsubscribes. So a gateway holds two NATS subscriptions per watched
// session, however many viewers watch it (acp_gateway_live_subscriptions).
// A viewer is an event stream (sse.go), which the feed fills, or a
// long-poll watch (watch.go), which the feed only wakes.
//
// One goroutine per feed takes the messages in the order the connection
// read them (a delta is never overtaken by the durable event published
// after it), decodes each once, renders its SSE event once, and puts that
// one read-only liveItem in every viewer's bounded queue, without waiting.
// A viewer whose queue is full is cut off alone (its stream ends with an
// error it resumes from); the feed and the other viewers go on.
//
// Gaps. The feed keeps its place among the public events as a tail.Chain
// joined at the first it hears. Once it has fanned out one, a tail event
// whose predecessor (Nats-Last-Sequence) lies past that place proves that
// the feed missed some (a message lost in transit, a slow subscription).
// The feed then reads the missing records from ACP_LOG with batch direct
// gets (eventlog.ForwardPage) and fans them out, in order, before the
// event: one catch-up for all of the session's viewers, not one history
// read each. It reads every record of the session, control records too,
// so it is not the chain's CatchUp, and records read back name no
// predecessor: there the contiguous per-session event number
// (events.HeaderEventNo) tells a pruned record. A delta that follows a
// sequence above everything the feed knows triggers the same catch-up.
//
// The catch-up is an economy, not what makes a stream complete. Every item
// says which public event precedes it (prev: Nats-Last-Sequence for a tail
// message, the previous record for one read back), and each stream still
// fills from history when prev is above what it sent (sse.go, step 4).
// That covers what the feed cannot: a feed that has not seen an event yet
// has no number to compare with, and a catch-up that fails or finds
// numbers missing (pruned records) leaves the decision to each stream,
// whose history read then answers as history does. (On R3 a direct get may
// be served by a follower that lacks the newest records. A catch-up for an
// event then ends short of it, and the event's Nats-Last-Sequence sends
// each stream to history; one for a delta may vouch for a range it did not
// see, and a stream then learns of the missing event from the next one's
// predecessor.)
//
// A gap the feed learns of from a later message is the lesser problem: the
// missed record that nothing follows is the one that stalls viewers (the
// last records of a turn, republished while the gateway's connection was
// moving to another node, or lost by a leader that died). So the feed also
// reads where the session's log ends, and catches up to there, without
// waiting for a later message: once whenever the connection reconnects,
// and while a turn is open, each time the feed has been quiet for
// endCheckInterval (feedend.go).

// State events (stateevents.go). The tail carries the control records
// too, in log order with the public events, so the feed derives the
// session's state changes from the records it fans out: a durable event's
// in the event's own item, a control record's as an item of its own, once
// the feed holds every record before it. Catch-ups read all the session's
// records (events.LogFilter), so a state change the tail lost is read back
// with the events around it.

// liveItem is one message of a session's feed, decoded and rendered once
// and shared by every viewer it is fanned out to. It is never modified
// after the fan-out.
type liveItem struct {
	durable bool
	// control: a state change caused by a control record (durable is
	// set too: it has an id, and advances what a stream has sent).
	control bool
	seq     uint64 // durable: its sequence
	after   uint64 // ephemeral: its afterSequence
	// prev is, for a durable event, the sequence of the session's public
	// event before it (0: none). For a delta, when prevKnown, it is the
	// newest public event at or below after: the feed has checked that
	// none lies between. For a control record's state change, when
	// prevKnown, it is the newest public event before it, and the feed
	// has fanned out every record of the session before it.
	prev      uint64
	prevKnown bool
	// frame is the SSE event as written to clients, or nil when the
	// message has no public form (a writer bug, logged once by the feed).
	// A durable event that changes the session's state (it accepts a
	// turn, or asks a person) is preceded in it by its state event,
	// without an id: the two are one item, so no stream sends one
	// without the other.
	frame []byte
}

// size is what the item counts against a viewer's byte budget.
func (it *liveItem) size() int64 { return int64(len(it.frame)) }

// hub is the gateway's set of feeds, one per watched session.
type hub struct {
	g     *Gateway
	mu    sync.Mutex
	feeds map[string]*feed // by events.SessionKey
	// closed is set by shutdown: no feed starts after it. running counts
	// the feeds started and not yet stopped, so that shutdown can wait
	// for them; its Add happens under mu while closed is false, hence
	// before shutdown's Wait.
	closed  bool
	running sync.WaitGroup
}

// newHub returns g's hub.
func newHub(g *Gateway) *hub {
	return &hub{g: g, feeds: map[string]*feed{}}
}

// shutdown stops the hub from starting feeds and waits until every feed
// has stopped. The feeds stop with their viewers, and every event stream
// and watch ends once the gateway is stopping, within the bounds of the
// request in flight (Config.RequestTimeout, Config.StreamWriteTimeout).
func (h *hub) shutdown() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.running.Wait()
}

// viewer is one event stream's or watch's place in a feed. A stream's is
// a bounded queue the feed fills and the stream drains; a watch's is wake
// alone, which the feed signals when anything is stored for the session.
type viewer struct {
	wake chan struct{} // a watch's; nil for a stream

	queue    chan *liveItem
	queued   atomic.Int64 // frame bytes in queue
	maxBytes int64
	overflow chan struct{}
	overOnce sync.Once
	metrics  *metrics
}

// newStreamViewer returns an event stream's viewer.
func (g *Gateway) newStreamViewer() *viewer {
	return &viewer{
		queue:    make(chan *liveItem, g.cfg.StreamBuffer),
		maxBytes: g.cfg.StreamBufferBytes,
		overflow: make(chan struct{}),
		metrics:  g.metrics,
	}
}

// newWatchViewer returns a watch's viewer.
func newWatchViewer() *viewer {
	return &viewer{wake: make(chan struct{}, 1)}
}

// signal wakes a watch's viewer without blocking: one pending wake-up
// says all there is to say.
func (v *viewer) signal() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// push queues it without blocking. When the queue is full, by count or by
// bytes, the viewer overflows: it takes nothing more, and its stream ends
// with an error the client resumes from.
func (v *viewer) push(it *liveItem) {
	select {
	case <-v.overflow:
		return
	default:
	}
	size := it.size()
	if v.queued.Add(size) <= v.maxBytes {
		select {
		case v.queue <- it:
			return
		default:
		}
	}
	v.queued.Add(-size)
	v.overOnce.Do(func() {
		v.metrics.overflows.Inc()
		close(v.overflow)
	})
}

// take accounts for an item the stream took from the queue.
func (v *viewer) take(it *liveItem) { v.queued.Add(-it.size()) }

// join adds v to the session's feed, starting the feed (and its
// subscriptions) for the session's first viewer. The subscriptions may not
// be on the server yet: the caller flushes the connection before it reads
// history. Call leave when the stream or watch ends.
func (h *hub) join(ctx context.Context, ns events.Namespace, sid events.SessionID, v *viewer) (*feed, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, events.Errorf(events.CodeUnavailable, "gateway is shutting down")
	}
	key := events.SessionKey(ns, sid)
	f := h.feeds[key]
	if f == nil {
		var err error
		if f, err = h.startFeed(ctx, key, ns, sid); err != nil {
			return nil, err
		}
		h.feeds[key] = f
	}
	f.mu.Lock()
	f.viewers[v] = struct{}{}
	f.mu.Unlock()
	return f, nil
}

// leave removes v from f and stops f when v was its last viewer.
func (h *hub) leave(f *feed, v *viewer) {
	h.mu.Lock()
	f.mu.Lock()
	delete(f.viewers, v)
	last := len(f.viewers) == 0
	f.mu.Unlock()
	if last {
		delete(h.feeds, f.key)
	}
	h.mu.Unlock()
	if last {
		f.close()
	}
}

// feed is one session's live messages on this gateway.
type feed struct {
	h           *hub
	lg          *slog.Logger
	key         string
	ns          events.Namespace
	sid         events.SessionID
	tailSubject string // the public events' tail
	tailFilter  string // every record's tail, the one subscribed to
	liveSubject string
	logSubject  string // where catch-ups read the public events
	logFilter   string // where the end check reads the log's end

	// tail holds the feed's two subscriptions, on one channel, and tells
	// of the connection's reconnects and of messages it dropped.
	tail   *tail.Sub
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	viewers map[*viewer]struct{}

	// The feed goroutine's own state.
	// events is the feed's place among the public events: the newest
	// fanned out (Last; 0 until the first), joined at the first the feed
	// hears. A tail event whose predecessor lies past it proves the feed
	// missed some.
	events *tail.Chain
	lastNo uint64 // the event number of events.Last(), for catch-ups
	known  uint64 // no public event lies in (events.Last(), known]
	// lastCtl is the newest control record the feed has handled: one at
	// or below it is not fanned out again (a catch-up read the log ahead
	// of the tail).
	lastCtl uint64
	// state derives the state changes of the records the feed handles,
	// in their order (stateevents.go).
	state *sessionstate.Tracker
	// turnOpen: the newest record the feed knows of is one of an open
	// turn, or the feed does not know where the log ends (a reconnect, a
	// failed end check). While it holds, the feed checks the log's end
	// each endCheckInterval in which it heard nothing (heard is reset by
	// each tick). endCheck ticks only then.
	turnOpen bool
	heard    bool
	endCheck *time.Ticker
	// behind counts the end checks in a row that found the log ahead of
	// the feed and could not reach its end (see checkEnd).
	behind int
}

// startFeed subscribes to the session's subjects and starts the feed's
// goroutine. The goroutine descends from ctx's values, not its
// cancellation: it outlives the viewer that started it, until close.
func (h *hub) startFeed(ctx context.Context, key string, ns events.Namespace, sid events.SessionID) (*feed, error) {
	f := &feed{
		h:           h,
		lg:          h.g.lg.With(events.LogKeyNamespace, ns, events.LogKeySession, sid),
		key:         key,
		ns:          ns,
		sid:         sid,
		tailSubject: events.TailSubject(ns, sid, events.LogEvents),
		// The tail of every subject of events.LogFilter: a turn ends on
		// the control subject, or the key subject of a keyed prompt.
		tailFilter:  events.TailSubject(ns, sid, ">"),
		liveSubject: events.LiveSubject(ns, sid),
		logSubject:  events.LogSubject(ns, sid, events.LogEvents),
		logFilter:   events.LogFilter(ns, sid),
		done:        make(chan struct{}),
		viewers:     map[*viewer]struct{}{},
	}
	f.events = tail.Joined(h.g.js, events.StreamLog, f.logSubject)
	// Both subscriptions feed one channel, filled by the connection's
	// read loop in arrival order (two callback subscriptions would each
	// have a goroutine of their own, and could reorder). The caller
	// flushes the connection before it reads history.
	sub, err := tail.Open(h.g.nc, arrivalBuffer, f.tailFilter, f.liveSubject)
	if err != nil {
		return nil, err
	}
	f.tail = sub
	h.g.metrics.liveSubscriptions.Add(2)
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel = cancel
	h.running.Add(1)
	go f.run(fctx)
	return f, nil
}

// arrivalBuffer is how many messages may wait between the connection's read
// loop and a feed's goroutine. Past it the subscription drops messages,
// which the feed notices and catches up on.
const arrivalBuffer = 8192

// unsubscribe removes the feed's subscriptions.
func (f *feed) unsubscribe() {
	f.tail.Stop()
	f.h.g.metrics.liveSubscriptions.Sub(2)
}

// close stops the feed: no viewer is left. The goroutine ends first, since
// it reads the subscriptions' drop counts.
func (f *feed) close() {
	f.cancel()
	<-f.done
	f.unsubscribe()
	f.h.running.Done()
}

// run moves the feed's messages to its viewers until close, and checks
// the log's end on a reconnect and while a turn is open and the feed is
// quiet (feedend.go).
func (f *feed) run(ctx context.Context) {
	defer close(f.done)
	f.state = f.newStateTracker(ctx)
	// The ticker runs only while a turn is open (setTurnOpen).
	f.endCheck = time.NewTicker(endCheckInterval)
	f.endCheck.Stop()
	defer f.endCheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.tail.Reconnected():
			f.checkEnd(ctx, causeReconnect)
		case <-f.endCheck.C:
			if !f.heard {
				f.checkEnd(ctx, causeQuiet)
			}
			f.heard = false
		case m := <-f.tail.Messages():
			f.heard = true
			if n := f.tail.Lost(); n > 0 {
				// The subscription lost messages. Deltas are gone (the
				// durable message that completes them is what counts);
				// the durable events are read back at once rather than
				// when the next one shows the gap, which may be long.
				f.lg.Warn("live feed dropped messages", logKeyDropped, n)
				if f.events.Last() > 0 {
					f.catchUp(ctx, "dropped", 0)
				}
			}
			f.handle(ctx, m)
		}
	}
}

// logKeyDropped counts the messages a feed's subscriptions dropped.
const logKeyDropped = "dropped"

// handle decodes one message and fans it out.
func (f *feed) handle(ctx context.Context, m *nats.Msg) {
	switch m.Subject {
	case f.tailSubject:
		// A turn accepted while the feed holds the last one open: the
		// feed missed that turn's end, a control record, which no event
		// number counts. It is read back before the new turn starts.
		missedEnd := f.turnOpen && m.Header.Get(events.HeaderTurnAccepted) != ""
		f.observe(m.Header)
		entry, prev, err := eventlog.TailEntry(f.sid, m)
		if err != nil {
			// Not fanned out: the next event names it as its predecessor,
			// and each stream reads it from history, which reports the
			// failure to its client.
			f.lg.Error("undecodable tail record", events.LogKeySubject, m.Subject,
				events.LogKeySeq, m.Header.Get(jetstream.SequenceHeader), events.LogKeyErr, err)
			return
		}
		switch f.events.DecideAt(entry.Sequence, prev) {
		case tail.Skip:
			return // fanned out already, by a catch-up
		case tail.Fill:
			f.catchUp(ctx, "tail", entry.Sequence)
		default:
			if missedEnd && f.events.Last() > 0 && entry.Sequence-1 > max(f.events.Last(), f.known) {
				f.catchUp(ctx, "turn end", entry.Sequence)
			}
		}
		if entry.Sequence <= f.events.Last() {
			return
		}
		f.durable(entry, prev, m.Header, m.Data)
	case f.liveSubject:
		f.live(ctx, m)
	default:
		// A lifecycle record (a turn's end, ...): a state event for the
		// streams when it changes the session's state
		// (stateevents.go), and a watch answers with the session's
		// state, which it may have changed.
		f.observe(m.Header)
		f.tailControl(ctx, m)
		f.wakeWatches()
	}
}

// durable fans out one public event, whose predecessor is prev, with the
// state event it causes, if any; hdr and data are its record's.
func (f *feed) durable(e *events.AcpDurableHistoryEntry, prev uint64, hdr nats.Header, data []byte) {
	it := &liveItem{durable: true, seq: e.Sequence, prev: prev}
	it.frame = f.stateFrame(e.Sequence, e.Timestamp, hdr, data)
	if data, err := eventjson.Durable(e); err != nil {
		// Fanned out without its frame, so that streams move past it
		// rather than fill from history for it.
		f.lg.Error("durable event has no public form", events.LogKeySeq, e.Sequence, events.LogKeyErr, err)
	} else {
		it.frame = appendEvent(it.frame, strconv.FormatUint(e.Sequence, 10), "durable", data)
	}
	f.events.Delivered(e.Sequence)
	f.lastNo = e.EventNo
	f.fanOut(it)
}

// fanOut puts it in every stream's queue, and wakes every watch for a
// durable event.
func (f *feed) fanOut(it *liveItem) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for v := range f.viewers {
		switch {
		case v.wake == nil:
			v.push(it)
		case it.durable:
			v.signal()
		}
	}
}

// wakeWatches wakes every watch: something was stored for the session.
func (f *feed) wakeWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for v := range f.viewers {
		if v.wake != nil {
			v.signal()
		}
	}
}

// catchUp reads the records after the last public event fanned out from
// the log, with batch direct gets, and fans out the public events and the
// control records' state changes, up to (not including) the sequence upTo
// (0: all). It reports whether the feed now holds every record before
// upTo. It stops at the first number that does not follow (the records
// were pruned) or record that does not decode: the streams then decide
// for themselves, from history.
func (f *feed) catchUp(ctx context.Context, cause string, upTo uint64) bool {
	f.h.g.metrics.gapFills.Inc()
	f.lg.Debug("live feed gap", logKeyReason, cause, events.LogKeySeq, upTo, logKeyLastSent, f.events.Last())
	return f.readForward(ctx, upTo)
}

// readForward is catchUp without its accounting: the end check reads
// forward without knowing whether anything was missed.
func (f *feed) readForward(ctx context.Context, upTo uint64) bool {
	g := f.h.g
	// Every record of the session, control records too: a state change
	// the tail lost is read back with the events around it.
	after := f.events.Last()
	for {
		// Bounded by bytes as well as by count, so that a session of
		// large messages is read a page at a time, and more says
		// exactly whether the page was the end.
		cctx, cancel := context.WithTimeout(ctx, feedReadTimeout)
		recs, more, err := eventlog.ForwardPage(cctx, g.js, events.StreamLog, f.logFilter, after, g.cfg.BackfillPage, catchUpBytes)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				f.lg.Warn("live feed catch-up failed", logKeyLastSent, f.events.Last(), events.LogKeyErr, err)
			}
			return false
		}
		for _, r := range recs {
			if upTo > 0 && r.Sequence >= upTo {
				return true
			}
			after = r.Sequence
			if r.Subject != f.logSubject {
				if r.Sequence > f.lastCtl {
					f.control(r.Sequence, r.Time, r.Header, r.Data, true)
				}
				continue
			}
			if no := eventlog.EventNo(r); no != f.lastNo+1 {
				f.lg.Warn("live feed catch-up found events missing", logKeyLastSent, f.events.Last(),
					events.LogKeySeq, r.Sequence, logKeyEventNo, no)
				return false
			}
			e, err := eventlog.HistoryEntry(f.sid, r.Sequence, r.Time, r.Header, r.Data)
			if err != nil {
				f.lg.Warn("live feed catch-up read an undecodable record", events.LogKeySeq, r.Sequence, events.LogKeyErr, err)
				return false
			}
			f.durable(e, f.events.Last(), r.Header, r.Data)
		}
		if !more {
			return true
		}
	}
}

// catchUpBytes bounds the payloads of one read of a feed's catch-up.
const catchUpBytes = 8 << 20

// logKeyEventNo is a public event's number.
const logKeyEventNo = "event_no"
