package gateway

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// The live hub: every viewer of a session on this gateway shares one feed.
//
// A feed holds the gateway's only two subscriptions for its session, to
// the stream's RePublish of the public events (events.TailSubject) and to
// the live deltas (events.LiveSubject). It exists while the session has
// viewers: the first viewer's join subscribes, the last one's leave
// unsubscribes. So a gateway holds two NATS subscriptions per watched
// session, however many viewers watch it (acp_gateway_live_subscriptions).
//
// One goroutine per feed takes the messages in the order the connection
// read them (a delta is never overtaken by the durable event published
// after it), decodes each once, renders its SSE event once, and puts that
// one read-only liveItem in every viewer's bounded queue, without waiting.
// A viewer whose queue is full is cut off alone (its stream ends with an
// error it resumes from); the feed and the other viewers go on.
//
// Gaps. Public events carry a contiguous per-session number
// (events.HeaderEventNo). Once the feed has fanned out one event, an event
// whose number is not the next one proves that the feed missed some (a
// message lost in transit, a slow subscription). The feed then reads the
// missing records from ACP_LOG with batch direct gets (eventlog.Forward)
// and fans them out, in order, before the event: one catch-up for all of
// the session's viewers, not one history read each. A delta that follows
// a sequence above everything the feed knows triggers the same catch-up.
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

// liveItem is one message of a session's feed, decoded and rendered once
// and shared by every viewer it is fanned out to. It is never modified
// after the fan-out.
type liveItem struct {
	durable bool
	seq     uint64 // durable: its sequence
	after   uint64 // ephemeral: its afterSequence
	// prev is, for a durable event, the sequence of the session's public
	// event before it (0: none). For a delta, when prevKnown, it is the
	// newest public event at or below after: the feed has checked that
	// none lies between.
	prev      uint64
	prevKnown bool
	// frame is the SSE event as written to clients, or nil when the
	// message has no public form (a writer bug, logged once by the feed).
	frame []byte
}

// size is what the item counts against a viewer's byte budget.
func (it *liveItem) size() int64 { return int64(len(it.frame)) }

// hub is the gateway's set of feeds, one per watched session.
type hub struct {
	g     *Gateway
	mu    sync.Mutex
	feeds map[string]*feed // by events.SessionKey
}

func newHub(g *Gateway) *hub {
	return &hub{g: g, feeds: map[string]*feed{}}
}

// viewer is one event stream's place in a feed: a bounded queue the feed
// fills and the stream drains.
type viewer struct {
	queue    chan *liveItem
	queued   atomic.Int64 // frame bytes in queue
	maxBytes int64
	overflow chan struct{}
	overOnce sync.Once
	metrics  *metrics
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

// join adds a viewer to the session's feed, starting the feed (and its
// subscriptions) for the session's first viewer. The subscriptions may not
// be on the server yet: the caller flushes the connection before it reads
// history. Call leave when the stream ends.
func (h *hub) join(ctx context.Context, ns events.Namespace, sid events.SessionID) (*feed, *viewer, error) {
	v := &viewer{
		queue:    make(chan *liveItem, h.g.cfg.StreamBuffer),
		maxBytes: h.g.cfg.StreamBufferBytes,
		overflow: make(chan struct{}),
		metrics:  h.g.metrics,
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	key := events.SessionKey(ns, sid)
	f := h.feeds[key]
	if f == nil {
		var err error
		if f, err = h.startFeed(ctx, key, ns, sid); err != nil {
			return nil, nil, err
		}
		h.feeds[key] = f
	}
	f.mu.Lock()
	f.viewers[v] = struct{}{}
	f.mu.Unlock()
	return f, v, nil
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
	tailSubject string
	liveSubject string
	logSubject  string // where catch-ups read the public events

	arrivals chan *nats.Msg
	subs     []*nats.Subscription
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	viewers map[*viewer]struct{}

	// The feed goroutine's own state.
	lastSeq uint64 // the newest public event fanned out; 0 until the first
	lastNo  uint64 // its event number
	known   uint64 // no public event lies in (lastSeq, known]
	dropped int    // messages the subscriptions dropped, as last seen
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
		liveSubject: events.LiveSubject(ns, sid),
		logSubject:  events.LogSubject(ns, sid, events.LogEvents),
		// Both subscriptions feed one channel, filled by the connection's
		// read loop in arrival order (two callback subscriptions would
		// each have a goroutine of their own, and could reorder).
		arrivals: make(chan *nats.Msg, arrivalBuffer),
		done:     make(chan struct{}),
		viewers:  map[*viewer]struct{}{},
	}
	for _, subject := range []string{f.tailSubject, f.liveSubject} {
		sub, err := h.g.nc.ChanSubscribe(subject, f.arrivals)
		if err != nil {
			f.unsubscribe()
			return nil, events.Errorf(events.CodeUnavailable, "subscribe %s: %v", subject, err)
		}
		f.subs = append(f.subs, sub)
		h.g.metrics.liveSubscriptions.Inc()
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel = cancel
	go f.run(fctx)
	return f, nil
}

// arrivalBuffer is how many messages may wait between the connection's read
// loop and a feed's goroutine. Past it the subscription drops messages,
// which the feed notices and catches up on.
const arrivalBuffer = 8192

// unsubscribe removes the feed's subscriptions.
func (f *feed) unsubscribe() {
	for _, sub := range f.subs {
		_ = sub.Unsubscribe() // the connection may be closing; its subscriptions go with it
		f.h.g.metrics.liveSubscriptions.Dec()
	}
	f.subs = nil
}

// close stops the feed: no viewer is left. The goroutine ends first, since
// it reads the subscriptions' drop counts.
func (f *feed) close() {
	f.cancel()
	<-f.done
	f.unsubscribe()
}

// run moves the feed's messages to its viewers until close.
func (f *feed) run(ctx context.Context) {
	defer close(f.done)
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-f.arrivals:
			if n := f.droppedMessages(); n > f.dropped {
				// The subscription lost messages. Deltas are gone (the
				// durable message that completes them is what counts);
				// the durable events are read back at once rather than
				// when the next one shows the gap, which may be long.
				f.lg.Warn("live feed dropped messages", logKeyDropped, n-f.dropped)
				f.dropped = n
				if f.lastSeq > 0 {
					f.catchUp(ctx, "dropped", 0)
				}
			}
			f.handle(ctx, m)
		}
	}
}

// logKeyDropped counts the messages a feed's subscriptions dropped.
const logKeyDropped = "dropped"

func (f *feed) droppedMessages() int {
	total := 0
	for _, sub := range f.subs {
		if n, err := sub.Dropped(); err == nil {
			total += n
		}
	}
	return total
}

// handle decodes one message and fans it out.
func (f *feed) handle(ctx context.Context, m *nats.Msg) {
	switch m.Subject {
	case f.tailSubject:
		entry, prev, err := events.TailEntry(f.sid, m)
		if err != nil {
			// Not fanned out: the next event names it as its predecessor,
			// and each stream reads it from history, which reports the
			// failure to its client.
			f.lg.Error("undecodable tail record", events.LogKeySubject, m.Subject,
				events.LogKeySeq, m.Header.Get("Nats-Sequence"), events.LogKeyErr, err)
			return
		}
		if entry.Sequence <= f.lastSeq {
			return // fanned out already, by a catch-up
		}
		if f.lastSeq > 0 && entry.EventNo > f.lastNo+1 {
			f.catchUp(ctx, "tail", entry.Sequence)
			if entry.Sequence <= f.lastSeq {
				return
			}
		}
		f.durable(entry, prev)
	case f.liveSubject:
		v, err := events.Unmarshal(m.Data)
		if err != nil {
			f.lg.Warn("undecodable live message", events.LogKeySubject, m.Subject, events.LogKeyErr, err)
			return
		}
		d, ok := v.(*events.AcpEphemeralSessionUpdateEvent)
		if !ok {
			return // stderr and other live traffic are not for clients
		}
		it := &liveItem{after: d.AfterSequence}
		if f.lastSeq > 0 {
			ok := true
			if d.AfterSequence > max(f.lastSeq, f.known) {
				ok = f.catchUp(ctx, "delta", d.AfterSequence+1)
				if ok {
					f.known = max(f.known, d.AfterSequence)
				}
			}
			// Below lastSeq the delta is stale for every stream that
			// has the feed's events; a stream decides that itself.
			if ok && d.AfterSequence >= f.lastSeq {
				it.prev, it.prevKnown = f.lastSeq, true
			}
		}
		data, err := events.PublicEphemeralJSON(d)
		if err != nil {
			f.lg.Warn("live delta has no public form", events.LogKeySeq, d.AfterSequence, events.LogKeyErr, err)
			return
		}
		it.frame = appendEvent(nil, "", "ephemeral", data)
		f.fanOut(it)
	}
}

// durable fans out one public event, whose predecessor is prev.
func (f *feed) durable(e *events.AcpDurableHistoryEntry, prev uint64) {
	it := &liveItem{durable: true, seq: e.Sequence, prev: prev}
	if data, err := events.PublicDurableJSON(e); err != nil {
		// Fanned out without a frame, so that streams move past it
		// rather than fill from history for it.
		f.lg.Error("durable event has no public form", events.LogKeySeq, e.Sequence, events.LogKeyErr, err)
	} else {
		it.frame = appendEvent(nil, strconv.FormatUint(e.Sequence, 10), "durable", data)
	}
	f.lastSeq, f.lastNo = e.Sequence, e.EventNo
	f.fanOut(it)
}

// fanOut puts it in every viewer's queue.
func (f *feed) fanOut(it *liveItem) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for v := range f.viewers {
		v.push(it)
	}
}

// catchUp reads the public events after the last one fanned out from the
// log, with batch direct gets, and fans them out, up to (not including)
// the sequence upTo (0: all). It reports whether the feed now holds every
// public event before upTo. It stops at the first number that does not
// follow (the records were pruned) or record that does not decode: the
// streams then decide for themselves, from history.
func (f *feed) catchUp(ctx context.Context, cause string, upTo uint64) bool {
	g := f.h.g
	g.metrics.gapFills.Inc()
	f.lg.Debug("live feed gap", logKeyReason, cause, events.LogKeySeq, upTo, logKeyLastSent, f.lastSeq)
	for {
		cctx, cancel := context.WithTimeout(ctx, g.cfg.RequestTimeout)
		recs, err := eventlog.Forward(cctx, g.js, events.StreamLog, f.logSubject, f.lastSeq, g.cfg.BackfillPage)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				f.lg.Warn("live feed catch-up failed", logKeyLastSent, f.lastSeq, events.LogKeyErr, err)
			}
			return false
		}
		for _, r := range recs {
			if upTo > 0 && r.Sequence >= upTo {
				return true
			}
			if no := eventlog.EventNo(r); no != f.lastNo+1 {
				f.lg.Warn("live feed catch-up found events missing", logKeyLastSent, f.lastSeq,
					events.LogKeySeq, r.Sequence, logKeyEventNo, no)
				return false
			}
			e, err := events.Entry(f.sid, r.Sequence, r.Time, r.Header, r.Data)
			if err != nil {
				f.lg.Warn("live feed catch-up read an undecodable record", events.LogKeySeq, r.Sequence, events.LogKeyErr, err)
				return false
			}
			f.durable(e, f.lastSeq)
		}
		if len(recs) < g.cfg.BackfillPage {
			return true
		}
	}
}

// logKeyEventNo is a public event's number.
const logKeyEventNo = "event_no"
