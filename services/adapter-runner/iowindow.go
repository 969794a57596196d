package adapterrunner

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// An adapter process's records reach ACP_IO through its ioWindow, which
// keeps each one until JetStream acknowledged it stored (invariant 11):
//
//   - The record's publisher (the connection's reader goroutine, the
//     stderr goroutine, the exit's) hands it to add, numbered. add returns
//     once the record is in the window; it blocks while the window is full
//     (Config.IOWindowRecords records or Config.IOWindowBytes bytes of
//     payload unacknowledged), so a stream that cannot store stops the
//     runner reading the adapter's stdout, and the adapter blocks on its
//     full pipe: memory stays bounded and nothing is dropped.
//   - One goroutine per window (pump) sends the records in record-number
//     order as asynchronous JetStream publishes, and follows each one's
//     acknowledgement (its PubAckFuture), oldest first. A record leaves the
//     window once stored (a duplicate acknowledgement counts: a copy is
//     stored).
//   - When the oldest record in flight fails for a reason that passes (no
//     responders while the stream elects a leader or is moved, no
//     acknowledgement within ioAckTimeout, a reconnection, stream not found
//     during an election), it and every later record not yet acknowledged
//     are sent again, in record-number order, after a back-off
//     (ioRetryMin doubling to ioRetryMax), until stored: as long as an
//     election or a node's restart lasts. Each copy carries the same
//     Nats-Msg-Id, <namespace>:<session>:<process ID>:<record number>
//     (ioMsgID), so a record whose acknowledgement was lost is stored
//     once if its copy arrives within ACP_IO's duplicate window
//     (streams.DefaultDuplicateWindow, 2 minutes); past it (the stream
//     gone that long right after storing it), the session owner still
//     ignores a record number it has applied.
//   - A refusal that would repeat (a message too large for the server or
//     the stream, a closed connection) drops that record: it is logged and
//     counted (acp_runner_io_publish_errors_total), and the owner sees the
//     gap in the numbers.
//
// Records sent again may be stored out of number order (record N lost in a
// reconnection while N+1 was stored): the owner applies them in number
// order. In the common case they are sent, and stored, in order.
//
// The window ends in one of two ways. close, once the process has ended
// and its last record (the exit) is in: the pump returns when everything is
// stored, however long the stream takes. stop, when the runner stops the
// adapter (asked to, its own shutdown): no turn waits on that adapter's
// output any more, so add stops blocking and sends what comes once without
// following it, and the pump sends what it holds once more, waits at most
// ioStopDrain for what is in flight, and returns.

// Defaults of Config.IOWindowRecords and Config.IOWindowBytes: enough to
// keep a flood flowing through a few milliseconds of acknowledgement
// latency (a burst's record holds up to maxBurstBytes), small enough that
// a runner at capacity holds little (64 adapters × 4 MiB at worst).
const (
	DefaultIOWindowRecords = 256
	DefaultIOWindowBytes   = 4 << 20
)

const (
	// ioAckTimeout is how long a record in flight waits for its
	// acknowledgement before it is sent again: a copy lost with a
	// stream leader that died is found out after it.
	ioAckTimeout = 5 * time.Second
	// ioRetryMin and ioRetryMax bound the back-off between rounds of
	// sending again: short for a blip, long enough not to flood a
	// cluster that is electing.
	ioRetryMin = 50 * time.Millisecond
	ioRetryMax = 2 * time.Second
	// ioStopDrain bounds how long a stopped window waits for the
	// acknowledgements of what it holds.
	ioStopDrain = 2 * time.Second
)

// ioWindow carries one process's records to ACP_IO; see above.
type ioWindow struct {
	js         jetstream.JetStream
	lg         *slog.Logger
	m          *metrics
	maxRecords int
	maxBytes   int

	mu    sync.Mutex
	space *sync.Cond  // signalled when records leave the window, or it stops
	recs  []*ioRecord // not yet acknowledged, by record number: those sent first, then those to send
	bytes int         // payload bytes of recs
	// closed: no record comes any more; stopped: the runner stops the
	// adapter (see above).
	closed, stopped bool
	// waiting counts the publishers waiting for room now, and freed is
	// when the last one got it (heldWithin).
	waiting int
	freed   time.Time

	wake chan struct{} // one token: something for the pump to look at
	done chan struct{} // closed when the pump returns
	// finished, when set, is told each record number the stream stored or
	// refused for good (the edge outbox removes it then, outbox.go).
	finished func(no uint64)
}

// ioRecord is one record in the window.
type ioRecord struct {
	no  uint64
	msg *nats.Msg
	// ack follows the copy in flight; nil until the record is sent, and
	// again when it is to be sent again. Only the pump touches it.
	ack jetstream.PubAckFuture
}

func newIOWindow(js jetstream.JetStream, lg *slog.Logger, m *metrics, maxRecords, maxBytes int) *ioWindow {
	w := &ioWindow{
		js: js, lg: lg, m: m, maxRecords: maxRecords, maxBytes: maxBytes,
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	w.space = sync.NewCond(&w.mu)
	go w.pump()
	return w
}

// ioMsgID is the Nats-Msg-Id of record no of process processID of
// session sid in namespace ns: the same for every copy of the record, and
// unique in ACP_IO. The session is part of it because a process ID is the
// session service's to choose, unique within the session only as far as
// the runner can tell.
func ioMsgID(ns events.Namespace, sid events.SessionID, processID string, no uint64) string {
	return string(ns) + ":" + string(sid) + ":" + processID + ":" + strconv.FormatUint(no, 10)
}

// add puts record no in the window, waiting while the window is full. A
// record larger than the whole window goes alone.
func (w *ioWindow) add(no uint64, msg *nats.Msg) {
	size := len(msg.Data)
	w.mu.Lock()
	if w.full(size) {
		w.m.ioWindowWaits.Inc()
		w.waiting++
		for w.full(size) {
			w.space.Wait()
		}
		w.waiting--
		w.freed = time.Now()
	}
	if w.stopped {
		w.mu.Unlock()
		// Sent once, unfollowed: nothing waits for this adapter's output.
		if err := w.js.Conn().PublishMsg(msg); err == nil {
			w.m.ioUnconfirmed.Inc()
		}
		return
	}
	w.recs = append(w.recs, &ioRecord{no: no, msg: msg})
	w.bytes += size
	w.m.ioInFlight.Inc()
	w.m.ioInFlightBytes.Add(float64(size))
	w.mu.Unlock()
	w.poke()
}

// full reports whether a record of size bytes must wait for room.
func (w *ioWindow) full(size int) bool {
	return !w.stopped && len(w.recs) > 0 && (len(w.recs) >= w.maxRecords || w.bytes+size > w.maxBytes)
}

// heldWithin reports for how much longer the window counts as holding its
// publishers back, in a grace period of d: all of d while one waits for
// room, what is left of d since the last one got it, or 0. An adapter's
// output that does not end within a grace period is cut (awaitOutput),
// but not while the runner itself holds the reader back.
func (w *ioWindow) heldWithin(d time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting > 0 {
		return d
	}
	return max(d-time.Since(w.freed), 0)
}

// close says that no record comes any more: the pump returns once the
// window is empty.
func (w *ioWindow) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.poke()
}

// stop ends the window's waits and its retries (see above).
func (w *ioWindow) stop() {
	w.mu.Lock()
	w.stopped = true
	w.space.Broadcast()
	w.mu.Unlock()
	w.poke()
}

func (w *ioWindow) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pump sends the window's records and follows their acknowledgements,
// until the window is closed and empty, or stopped.
func (w *ioWindow) pump() {
	defer close(w.done)
	backoff := time.Duration(0)
	rounds := 0 // of sending again since the last record stored
	var retry *time.Timer
	var retryC <-chan time.Time // set while a round of sending again waits
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		w.mu.Lock()
		stopped, finished := w.stopped, w.closed && len(w.recs) == 0
		w.mu.Unlock()
		if stopped {
			w.drain()
			return
		}
		if finished {
			return
		}
		if retryC == nil {
			if err := w.sendPending(); err != nil {
				backoff = min(max(2*backoff, ioRetryMin), ioRetryMax)
				retry = resetTimer(retry, backoff)
				retryC = retry.C
			}
		}
		head := w.head()
		var okC <-chan *jetstream.PubAck
		var errC <-chan error
		if head != nil {
			okC, errC = head.ack.Ok(), head.ack.Err()
		}
		select {
		case <-okC:
			w.settle(head, nil)
			if backoff > 0 {
				w.lg.Info("runner records stored again", logKeyRecordNo, head.no, "rounds", rounds)
			}
			backoff, rounds = 0, 0
		case err := <-errC:
			if refusedForGood(err) {
				w.settle(head, err)
				continue
			}
			n := w.resendFrom(head)
			w.m.ioRetries.Add(float64(n))
			backoff = min(max(2*backoff, ioRetryMin), ioRetryMax)
			rounds++
			// Warned once per outage; each later round at debug level,
			// as an election may take a few rounds and an outage many.
			lvl := slog.LevelWarn
			if rounds > 1 {
				lvl = slog.LevelDebug
			}
			w.lg.Log(context.Background(), lvl, "runner record not stored yet; retrying", events.LogKeyRecord, head.msg.Header.Get(events.HeaderRecord),
				logKeyRecordNo, head.no, "records", n, "round", rounds, "retry_in", backoff, events.LogKeyErr, err)
			retry = resetTimer(retry, backoff)
			retryC = retry.C
		case <-retryC:
			retryC = nil
		case <-w.wake:
		}
	}
}

// logKeyRecordNo is a record's number (HeaderRecordNo) in the runner's logs.
const logKeyRecordNo = "record_no"

// resetTimer returns t, or a new timer, set to fire once after d.
func resetTimer(t *time.Timer, d time.Duration) *time.Timer {
	if t == nil {
		return time.NewTimer(d)
	}
	t.Reset(d)
	return t
}

// head returns the oldest record in flight, or nil if none is.
func (w *ioWindow) head() *ioRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.recs) == 0 || w.recs[0].ack == nil {
		return nil
	}
	return w.recs[0]
}

// sendPending sends, in order, the records waiting to be sent. It stops at
// the first that cannot be sent for a reason that passes, and returns that
// error; one refused for good is dropped.
func (w *ioWindow) sendPending() error {
	// Those in flight come first, those to send after them.
	w.mu.Lock()
	i := len(w.recs)
	for i > 0 && w.recs[i-1].ack == nil {
		i--
	}
	todo := append([]*ioRecord(nil), w.recs[i:]...)
	w.mu.Unlock()
	for _, r := range todo {
		ack, err := w.js.PublishMsgAsync(r.msg, jetstream.WithRetryAttempts(0))
		switch {
		case err == nil:
			r.ack = ack
		case refusedForGood(err):
			w.settle(r, err)
		default:
			w.lg.Warn("runner record not sent yet; retrying", events.LogKeyRecord, r.msg.Header.Get(events.HeaderRecord),
				logKeyRecordNo, r.no, events.LogKeyErr, err)
			return err
		}
	}
	return nil
}

// resendFrom marks head, which failed, and every later record in flight to
// be sent again, except those whose copy is stored meanwhile, which leave
// the window. It returns how many records are to be sent again.
func (w *ioWindow) resendFrom(head *ioRecord) int {
	w.mu.Lock()
	var acked []*ioRecord
	n := 0
	for _, r := range w.recs {
		if r.ack == nil {
			continue
		}
		if r != head {
			select {
			case <-r.ack.Ok():
				acked = append(acked, r)
				continue
			default:
			}
		}
		// A copy still in flight may yet be stored: its successor then
		// gets a duplicate acknowledgement, which is as good.
		r.ack = nil
		n++
	}
	w.mu.Unlock()
	for _, r := range acked {
		w.settle(r, nil)
	}
	return n
}

// settle takes r out of the window: stored if err is nil, else given up.
func (w *ioWindow) settle(r *ioRecord, err error) {
	if err == nil {
		w.m.ioRecords.Inc()
	} else {
		w.m.ioPublishErrors.Inc()
		w.lg.Error("runner record not stored", events.LogKeyRecord, r.msg.Header.Get(events.HeaderRecord),
			logKeyRecordNo, r.no, events.LogKeyErr, err)
	}
	if w.finished != nil {
		w.finished(r.no)
	}
	w.remove(r)
}

// remove takes r out of the window, and wakes a publisher waiting for space.
func (w *ioWindow) remove(r *ioRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, x := range w.recs {
		if x == r {
			w.recs = slices.Delete(w.recs, i, i+1) // clears the pointer it frees
			w.bytes -= len(r.msg.Data)
			w.m.ioInFlight.Dec()
			w.m.ioInFlightBytes.Sub(float64(len(r.msg.Data)))
			break
		}
	}
	w.space.Broadcast()
}

// drain is the end of a stopped window: what it holds is sent once more
// (what is not in flight) and followed for at most ioStopDrain; what is
// still unacknowledged then is counted unconfirmed.
func (w *ioWindow) drain() {
	_ = w.sendPending() // once: a record that cannot be sent stays unconfirmed
	deadline := time.NewTimer(ioStopDrain)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		if len(w.recs) == 0 {
			w.mu.Unlock()
			return
		}
		r := w.recs[0]
		w.mu.Unlock()
		if r.ack == nil {
			w.unconfirmed(r)
			continue
		}
		select {
		case <-r.ack.Ok():
			w.settle(r, nil)
		case <-r.ack.Err():
			w.unconfirmed(r)
		case <-deadline.C:
			w.mu.Lock()
			rest := append([]*ioRecord(nil), w.recs...)
			w.mu.Unlock()
			for _, r := range rest {
				w.unconfirmed(r)
			}
			return
		}
	}
}

// unconfirmed takes r out of a stopped window without knowing whether it
// was stored.
func (w *ioWindow) unconfirmed(r *ioRecord) {
	w.m.ioUnconfirmed.Inc()
	w.remove(r)
}

// refusedForGood reports whether err means that sending the record again
// would fail again: too large for the server (max_payload) or the stream,
// a connection closed for good, or any other refusal of the stream's but
// those that pass (a 503, stream not found while a leader is elected, the
// same message ID still being stored, a full store). Timeouts, no responders and
// disconnections pass.
func refusedForGood(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubject) {
		return true
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch {
	case api.Code >= 500, api.ErrorCode == jetstream.JSErrCodeStreamNotFound, api.ErrorCode == jsErrCodeDuplicateInProcess:
		return false
	case eventlog.StorageFull(err):
		// The store is full (the account's limit answers 400): the record
		// is stored once an operator makes room. Until then the window
		// fills and the adapter blocks; the session's owner ends the turn
		// (storage_full).
		return false
	}
	return true
}

// jsErrCodeDuplicateInProcess is nats-server's "duplicate message id is in
// process": a clustered stream is still storing an earlier copy of the
// record (nats.go names no constant for it).
const jsErrCodeDuplicateInProcess jetstream.ErrorCode = 10158
