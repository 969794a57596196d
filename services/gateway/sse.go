package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/tail"
)

// The event stream, GET /v1/sessions/{id}/events (DESIGN "Live tail").
//
// # Wire format (text/event-stream)
//
// A durable event names its sequence, so that a reconnecting client's
// Last-Event-ID is always the last durable sequence it saw:
//
//	id: <sequence>
//	event: durable
//	data: <eventjson.Durable>
//
// An ephemeral delta (agent_message_chunk / agent_thought_chunk) has no id:
//
//	event: ephemeral
//	data: <eventjson.Ephemeral>
//
// A change of the session's state (a Skein addition: a turn accepted or
// finished, waiting for a person, unloaded, the adapter exited) is a state
// event, whose data is a history entry of type session_state
// (events.SessionStateChange, stateevents.go). A change caused by a
// control record (a turn's end, an unload, an exit) has the record's
// sequence as its id, so Last-Event-ID may name it:
//
//	id: <sequence>
//	event: state
//	data: {"sessionId",...,"type":"session_state","change":"turn_finished",...}
//
// A change caused by a durable event (the user message that accepts a
// turn, a permission or input request) comes just before that event, with
// its sequence and no id: the durable event after it carries the id, so a
// client that resumes between the two is sent both again, and dedupes by
// (event kind, sequence).
//
// A failure after the stream started ends it with one error event, whose
// data is the error body of every other route:
//
//	event: error
//	data: {"error":{"code":"unavailable","message":"...","requestId":"..."}}
//
// An idle stream carries a ": keepalive" comment every Config.Keepalive.
// JSON that spans lines (native ACP bytes are passed through) is split over
// several data lines, which an SSE client joins with "\n".
//
// # Algorithm
//
//  1. Join the session's feed on this gateway (hub.go): the subscriptions
//     to the stream's RePublish of the session's public events
//     (events.TailSubject) and to its live deltas (events.LiveSubject),
//     which every viewer of the session on this gateway shares. The feed
//     queues each message for the stream from now on. Flush, so the
//     server holds both subscriptions before anything is read.
//  2. Backfill from history after the cursor until hasMoreAfter is false.
//     Until the first page arrives nothing is written, so a bad session or
//     an expired cursor is an ordinary HTTP error (404, 410), not an event.
//  3. Stream what was queued meanwhile and what follows, deduplicated by
//     sequence: a durable event at or below the last sequence sent is
//     dropped. (Subscribe first, then fetch after the cursor, then dedupe:
//     a client reconnecting with Last-Event-ID follows the same protocol,
//     deduplicating by (sessionId, sequence).)
//  4. Gaps. The feed catches up on the events it missed itself, once for
//     all its viewers (by event number, from the log), including those
//     that no later message reveals: it reads where the log ends after a
//     reconnect, and while a turn is open and it hears nothing
//     (feedend.go), so a stream never waits for an event that is stored
//     already. Each queued event
//     also names the public event before it (Nats-Last-Sequence, or the
//     feed's check). When that is above the last sequence sent, something
//     was missed (a record stored between the subscription and the history
//     read, before the feed had an event to count from, or one the feed
//     could not read back), and the stream reads history after the last
//     sequence sent before it emits the message. A delta whose
//     afterSequence is above everything known sent, and whose predecessor
//     the feed could not vouch for, proves that a durable event it follows
//     may exist, so it triggers the same fill first. (afterSequence may
//     name a lifecycle record, which history never returns; the fill then
//     finds nothing and is not repeated for that sequence.)
//  5. Stale deltas. A delta whose afterSequence is below the last durable
//     sequence sent was published before that event, so in this stream it
//     would arrive out of order, and when that event is the completed
//     message it would duplicate text the client already has. It is
//     dropped: deltas are live-only, and the durable message is
//     authoritative. A delta whose afterSequence equals the last sequence
//     sent belongs to the message being streamed and is emitted.
//  6. Back-pressure. Live messages wait in the stream's queue of
//     Config.StreamBuffer messages and Config.StreamBufferBytes while the
//     client is slow. When it overflows, this stream alone ends with an
//     error event (code unavailable) instead of dropping anything
//     silently; the client resumes with Last-Event-ID and catches up from
//     history. The session's other viewers go on.
//
// The stream ends when the client goes away or the gateway stops (an error
// event, code unavailable: resume with Last-Event-ID).

// errClientGone marks a failure to write to the client: there is nobody
// left to tell.
var errClientGone = errors.New("event stream client gone")

// stream is one event stream. It lives in its handler's goroutine; its
// feed fills its viewer's queue from the feed's goroutine.
type stream struct {
	g   *Gateway
	lg  *slog.Logger
	r   *http.Request
	w   http.ResponseWriter
	rc  *http.ResponseController
	ns  events.Namespace
	sid events.SessionID

	// sent is the stream's place in the session's records: the highest
	// sequence sent with an id (a durable event, a control record's state
	// event), or the client's cursor. Its gaps are read back from
	// history, not the log (fill).
	sent *tail.Chain
	// known is a sequence at or below which every durable event has been
	// sent: the end of the last fill that found no more.
	known   uint64
	started bool
	buf     []byte

	v *viewer // its place in the session's feed
}

// handleEvents serves GET /v1/sessions/{id}/events.
func (g *Gateway) handleEvents(w http.ResponseWriter, r *http.Request) error {
	ns, sid, err := g.target(r)
	if err != nil {
		return err
	}
	cursor, err := parseStreamCursor(r.Header, r.URL.Query())
	if err != nil {
		return err
	}
	s := &stream{
		g:     g,
		r:     r,
		w:     w,
		rc:    http.NewResponseController(w),
		ns:    ns,
		sid:   sid,
		sent:  tail.NewChain(g.js, events.StreamLog, events.LogFilter(ns, sid), cursor),
		known: cursor,
	}
	s.lg = g.lg.With(logKeyRequestID, requestID(r), events.LogKeyNamespace, ns, events.LogKeySession, sid)
	g.metrics.streams.Inc()
	defer g.metrics.streams.Dec()
	s.lg.Debug("event stream started", events.LogKeySeq, cursor)
	reason := s.serve(r.Context())
	g.metrics.streamEnds.WithLabelValues(reason).Inc()
	s.lg.Debug("event stream ended", logKeyReason, reason, events.LogKeySeq, s.sent.Last())
	return nil // the stream reported its own errors, in it or before it began
}

// logKeyReason names why an event stream ended.
const logKeyReason = "reason"

// serve runs the stream and returns why it ended.
func (s *stream) serve(ctx context.Context) string {
	v := s.g.newStreamViewer()
	f, err := s.g.hub.join(ctx, s.ns, s.sid, v)
	if err != nil {
		return s.fail(ctx, err, endError)
	}
	defer s.g.hub.leave(f, v)
	s.v = v
	fctx, cancel := context.WithTimeout(ctx, s.g.cfg.RequestTimeout)
	err = s.g.nc.FlushWithContext(fctx)
	cancel()
	if err != nil {
		return s.fail(ctx, events.Errorf(events.CodeUnavailable, "flush subscriptions: %v", err), endError)
	}
	if f := s.g.streamSubscribed; f != nil {
		f()
	}
	// fill starts the response once the first page is in.
	if err := s.fill(ctx); err != nil {
		return s.fail(ctx, err, endError)
	}
	if err := s.flush(); err != nil { // the backfill, written page by page
		return endClientGone
	}

	keepalive := time.NewTicker(s.g.cfg.Keepalive)
	defer keepalive.Stop()
	changed := s.g.grantChanges(s.r)
	for {
		// Overflow first: past it the buffer no longer holds everything.
		select {
		case <-s.v.overflow:
			return s.fail(ctx, events.Errorf(events.CodeUnavailable,
				"client fell too far behind the live events; resume with Last-Event-ID"), endOverflow)
		default:
		}
		select {
		case <-ctx.Done():
			return endClientGone
		case <-s.g.stopping:
			return s.fail(ctx, events.Errorf(events.CodeUnavailable, "gateway is shutting down; resume with Last-Event-ID"), endShutdown)
		case <-s.v.overflow:
			// Handled at the top of the loop.
		case <-changed:
			if changed, err = s.g.recheck(s.r); err != nil {
				return s.fail(ctx, err, endRevoked)
			}
		case <-keepalive.C:
			if err := s.write([]byte(": keepalive\n\n")); err != nil || s.flush() != nil {
				return endClientGone
			}
		case it := <-s.v.queue:
			s.v.take(it)
			if err := s.handle(ctx, it); err != nil {
				return s.fail(ctx, err, endError)
			}
			// Flush once the events that arrived together are written: a
			// burst costs one flush (one write to the client), a lone
			// event is flushed at once, so no event waits for another.
			if len(s.v.queue) == 0 {
				if err := s.flush(); err != nil {
					return endClientGone
				}
			}
		}
	}
}

// fail ends the stream with err and returns the end reason: reason, or
// endClientGone when err is the client's absence. Before the stream
// started, err is an ordinary HTTP error response; after, it is an error
// event.
func (s *stream) fail(ctx context.Context, err error, reason string) string {
	if errors.Is(err, errClientGone) || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		return endClientGone
	}
	if !s.started {
		s.g.writeError(s.w, s.r, err)
		return reason
	}
	_, body := s.g.publicError(s.r, err)
	data, merr := json.Marshal(body)
	if merr != nil {
		return endError
	}
	if s.event("", "error", data) == nil { // the stream ends either way
		_ = s.flush()
	}
	return reason
}

// handle processes one item of the session's feed.
func (s *stream) handle(ctx context.Context, it *liveItem) error {
	if it.control {
		return s.controlItem(ctx, it)
	}
	if it.durable {
		switch s.sent.DecideAt(it.seq, it.prev) {
		case tail.Skip:
			return nil // already sent, by the backfill or a fill
		case tail.Fill:
			if err := s.gapFill(ctx, "tail", it.prev); err != nil {
				return err
			}
			if it.seq <= s.sent.Last() {
				return nil
			}
		}
		return s.durableItem(it)
	}
	if it.prevKnown {
		// The feed vouches that no public event lies in (prev, after].
		if it.prev > s.sent.Last() {
			if err := s.gapFill(ctx, "delta", it.prev); err != nil {
				return err
			}
		}
		s.known = max(s.known, it.after)
	} else if it.after > max(s.sent.Last(), s.known) {
		if err := s.gapFill(ctx, "delta", it.after); err != nil {
			return err
		}
		s.known = max(s.known, it.after)
	}
	if it.after < s.sent.Last() {
		return nil // stale: see step 5 of the algorithm
	}
	if err := s.write(it.frame); err != nil {
		return err
	}
	s.g.metrics.ephemeralEvents.Inc()
	return nil
}

// controlItem emits a control record's state event of the feed, once the
// stream holds every record before it, and moves s.sent past it. The feed
// vouches for that (prevKnown) up to the public event prev; without it,
// the stream reads history unless it has sent everything up to the record
// already.
func (s *stream) controlItem(ctx context.Context, it *liveItem) error {
	a := s.sent.DecideAt(it.seq, it.prev)
	if a == tail.Skip {
		return nil // already sent, by the backfill or a fill
	}
	gap := a == tail.Fill
	if !it.prevKnown {
		// No predecessor to decide by: nothing may lie between what was
		// sent (or known sent) and the record.
		gap = it.seq-1 > max(s.sent.Last(), s.known)
	}
	if gap {
		if err := s.gapFill(ctx, "state", it.seq); err != nil {
			return err
		}
		if it.seq <= s.sent.Last() {
			return nil
		}
	}
	// Not counted in acp_gateway_sse_events_total, live or from history
	// (state): the counter counts the events of the log.
	if err := s.write(it.frame); err != nil {
		return err
	}
	s.sent.Delivered(it.seq)
	return nil
}

// durableItem emits a durable event of the feed and moves s.sent past it.
func (s *stream) durableItem(it *liveItem) error {
	if it.frame != nil {
		if err := s.write(it.frame); err != nil {
			return err
		}
		s.g.metrics.durableEvents.Inc()
	}
	s.sent.Delivered(it.seq)
	return nil
}

// gapFill reads history after the last sequence sent because a live
// message proved that the stream missed something up to seq.
func (s *stream) gapFill(ctx context.Context, cause string, seq uint64) error {
	s.g.metrics.gapFills.Inc()
	s.lg.Debug("event stream gap", logKeyReason, cause,
		events.LogKeySeq, seq, logKeyLastSent, s.sent.Last())
	return s.fill(ctx)
}

// logKeyLastSent is the last durable sequence an event stream sent.
const logKeyLastSent = "last_sent"

// fill emits every durable event after s.sent that history holds.
func (s *stream) fill(ctx context.Context) error {
	limit := uint32(s.g.cfg.BackfillPage)
	for {
		after := s.sent.Last()
		req := &events.AcpReadHistoryRequest{SessionID: new(string(s.sid)), After: &after, Limit: &limit, IncludeState: true}
		cctx, cancel := context.WithTimeout(ctx, s.g.cfg.RequestTimeout)
		page, err := s.g.readHistory(cctx, s.ns, req)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %w", errClientGone, ctx.Err())
			}
			return fmt.Errorf("read history after %d: %w", after, err)
		}
		if !s.started {
			if err := s.start(); err != nil {
				return err
			}
		}
		for i := range page.Events {
			if page.Events[i].Sequence <= s.sent.Last() {
				continue
			}
			if err := s.durable(&page.Events[i]); err != nil {
				return err
			}
		}
		if !page.HasMoreAfter {
			s.known = max(s.known, s.sent.Last())
			return nil
		}
		if s.sent.Last() == after {
			return events.Errorf(events.CodeInternal, "history after %d has more but returned no newer event", after)
		}
	}
}

// durable emits one durable event or state event of history and moves
// s.sent past it. An event that has no public form (a writer bug) is
// logged and skipped rather than ending every stream of the session on it
// forever.
func (s *stream) durable(e *events.AcpDurableHistoryEntry) error {
	if c, ok := e.Event.V.(*events.SessionStateChange); ok {
		return s.state(e, c)
	}
	data, err := eventjson.Durable(e)
	if err != nil {
		s.lg.Error("durable event has no public form", events.LogKeySeq, e.Sequence, events.LogKeyErr, err)
		s.sent.Delivered(e.Sequence)
		return nil
	}
	if err := s.event(strconv.FormatUint(e.Sequence, 10), "durable", data); err != nil {
		return err
	}
	s.sent.Delivered(e.Sequence)
	s.g.metrics.durableEvents.Inc()
	return nil
}

// state emits one state event of history. One caused by a durable event
// has no id and leaves s.sent alone: the event follows it.
func (s *stream) state(e *events.AcpDurableHistoryEntry, c *events.SessionStateChange) error {
	data, err := eventjson.Durable(e)
	if err != nil {
		return events.Errorf(events.CodeInternal, "render state change %d: %v", e.Sequence, err)
	}
	id := ""
	if !c.CausedByEvent() {
		id = strconv.FormatUint(e.Sequence, 10)
	}
	if err := s.event(id, "state", data); err != nil {
		return err
	}
	if id != "" {
		s.sent.Delivered(e.Sequence)
	}
	return nil
}

// start writes the response headers.
func (s *stream) start() error {
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	s.w.WriteHeader(http.StatusOK)
	return s.flush()
}

// event writes one SSE event. data is split at line ends, each part its own
// data line, since a raw line break would end the field.
func (s *stream) event(id, name string, data []byte) error {
	b := appendEvent(s.buf[:0], id, name, data)
	err := s.write(b)
	if cap(b) <= maxKeptBuffer {
		s.buf = b[:0]
	}
	return err
}

// appendEvent appends one SSE event to b.
func appendEvent(b []byte, id, name string, data []byte) []byte {
	if id != "" {
		b = append(b, "id: "...)
		b = append(b, id...)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, '\n')
	b = appendData(b, data)
	return append(b, '\n')
}

// maxKeptBuffer bounds the scratch buffer a stream keeps between events, so
// one huge event does not pin its memory for the stream's lifetime.
const maxKeptBuffer = 64 << 10

// appendData appends data as "data: " lines, splitting at CR, LF and CRLF.
func appendData(b, data []byte) []byte {
	for {
		b = append(b, "data: "...)
		i := 0
		for i < len(data) && data[i] != '\n' && data[i] != '\r' {
			i++
		}
		b = append(b, data[:i]...)
		b = append(b, '\n')
		if i == len(data) {
			return b
		}
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
}

// write sends b, within Config.StreamWriteTimeout. It does not flush: the
// stream flushes once it has nothing more to write at once (see serve).
func (s *stream) write(b []byte) error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.g.cfg.StreamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("%w: %w", errClientGone, err)
	}
	if _, err := s.w.Write(b); err != nil {
		return fmt.Errorf("%w: %w", errClientGone, err)
	}
	return nil
}

func (s *stream) flush() error {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("%w: %w", errClientGone, err)
	}
	return nil
}
