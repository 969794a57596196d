package eventlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"skein.dev/pkg/events"
)

// MaxBatch is the most records one atomic append may hold (the server's
// limit on an atomic batch).
const MaxBatch = 1000

// Entry is one record to append.
type Entry struct {
	Kind   events.LogKind
	Value  events.Variant
	Header nats.Header // extra headers (HeaderTurnID, HeaderIOSeq); may be nil
	// Subject, when set, stores a LogControl record on another subject of
	// the session (events.KeySubject) instead of LogControl's.
	Subject string
}

// conflict is the error of an append that another writer's got ahead of.
// It says what happened and what to do, and nothing of the stream's
// sequences or the server's wording: callers outside Skein see it.
func (w *Writer) conflict() error {
	return events.Errorf(events.CodeWriteConflict, "session %s was written by another owner; retry", w.sid)
}

// Appended says where an entry landed.
type Appended struct {
	Seq     uint64 // ACP_LOG stream sequence
	EventNo uint64 // per-session event number; 0 for LogControl records
}

// Position is where a session's log ends.
type Position struct {
	LastSeq     uint64 // stream sequence of the session's newest record; 0 when it has none
	LastEventNo uint64 // event number of its newest public event
	// LastEventSeq is the stream sequence of that event; 0 when there is
	// none (a getSession's and a projection's latestSequence).
	LastEventSeq uint64
	// EventBytes is the running payload total of the newest public event
	// (HeaderEventBytes); 0 when unknown, and the writer then reads it.
	EventBytes uint64
}

// LoadPosition reads where the log of (ns, sid) ends, and returns the newest
// record too (nil for a session without records).
func LoadPosition(ctx context.Context, js jetstream.JetStream, ns events.Namespace, sid events.SessionID) (Position, *Record, error) {
	last, err := Last(ctx, js, events.StreamLog, events.LogFilter(ns, sid))
	if err != nil || last == nil {
		return Position{}, nil, err
	}
	pos := Position{LastSeq: last.Sequence}
	lastEv := last
	if last.Subject != events.LogSubject(ns, sid, events.LogEvents) {
		if lastEv, err = Last(ctx, js, events.StreamLog, events.LogSubject(ns, sid, events.LogEvents)); err != nil {
			return Position{}, nil, err
		}
	}
	if lastEv != nil {
		pos.LastEventNo = EventNo(lastEv)
		pos.LastEventSeq = lastEv.Sequence
		pos.EventBytes = EventBytes(lastEv)
	}
	return pos, last, nil
}

// Writer appends to one session's log. It is not safe for concurrent use: a
// session has one writer, and the caller serialises its appends.
type Writer struct {
	js     jetstream.JetStream
	ns     events.Namespace
	sid    events.SessionID
	filter string
	evSubj string
	ctlSub string
	prefix string // "acp.log.<ns>.<sid>."
	token  string
	pos    Position
	window int // AppendEach's window, adapted to how often predictions hold
	ret    retention
}

// NewWriter returns a writer that appends after pos. token identifies the
// writer (an owner epoch, a process ID): it goes into every Nats-Msg-Id, so
// two writers never dedupe against each other.
func NewWriter(js jetstream.JetStream, ns events.Namespace, sid events.SessionID, pos Position, token string) *Writer {
	return &Writer{
		js:     js,
		ns:     ns,
		sid:    sid,
		filter: events.LogFilter(ns, sid),
		evSubj: events.LogSubject(ns, sid, events.LogEvents),
		ctlSub: events.LogSubject(ns, sid, events.LogControl),
		prefix: strings.TrimSuffix(events.LogFilter(ns, sid), ">"),
		token:  token,
		pos:    pos,
	}
}

// Position returns where the log ends after the writer's last append.
func (w *Writer) Position() Position { return w.pos }

// Append stores entries as one atomic unit after the writer's position and
// returns where each landed. A conflicting append (another writer moved the
// log) is events.CodeWriteConflict and stores nothing; the writer must then
// stop writing for the session. An append that timed out or found no
// responders is retried with the same message IDs, for up to
// appendRetryFor, so it is stored at most once.
func (w *Writer) Append(ctx context.Context, entries ...Entry) ([]Appended, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	if len(entries) > MaxBatch {
		return nil, events.Errorf(events.CodePayloadTooLarge, "%d records in one append; at most %d", len(entries), MaxBatch)
	}
	if err := w.prepare(ctx); err != nil {
		return nil, err
	}
	msgs, out, err := w.build(entries)
	if err != nil {
		return nil, err
	}
	if err := w.checkBatch(msgs); err != nil {
		return nil, err
	}
	var lastErr error
	deadline := time.Now().Add(appendRetryFor)
	for attempt := 0; attempt == 0 || time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			traceOf(ctx).onAppendRetry()
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(appendRetryWait):
			}
		}
		lastSeq, err := w.publish(ctx, msgs)
		if err == nil {
			out = w.commit(msgs, out, lastSeq)
			w.prune(ctx)
			return out, nil
		}
		lastErr = err
		switch {
		case isConflict(err) || isBatchDuplicate(err):
			// On a retry, the conflict may be our own earlier attempt that
			// was stored after all: then the log ends with our last message.
			if attempt > 0 || isBatchDuplicate(err) {
				if seq, ok := w.storedAlready(ctx, msgs[len(msgs)-1]); ok {
					out = w.commit(msgs, out, seq)
					w.prune(ctx)
					return out, nil
				}
			}
			return nil, w.conflict()
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
			return nil, err
		case Transient(err):
			continue
		case StorageFull(err):
			return nil, storageFull(w.ns, w.sid, err)
		default:
			return nil, fmt.Errorf("append to %s/%s: %w", w.ns, w.sid, err)
		}
	}
	return nil, events.Errorf(events.CodeUnavailable, "append to %s/%s: %v", w.ns, w.sid, lastErr)
}

func (w *Writer) build(entries []Entry) ([]*nats.Msg, []Appended, error) {
	return w.buildAt(entries, w.pos)
}

// buildAt builds the messages of entries appended after pos: the
// compare-and-set expects pos.LastSeq, event numbers follow
// pos.LastEventNo, and message IDs name the position.
func (w *Writer) buildAt(entries []Entry, pos Position) ([]*nats.Msg, []Appended, error) {
	msgs := make([]*nats.Msg, len(entries))
	out := make([]Appended, len(entries))
	eventNo, eventBytes := pos.LastEventNo, pos.EventBytes
	base := string(w.ns) + "." + string(w.sid) + "." + strconv.FormatUint(pos.LastSeq, 10) + "." + w.token + "."
	for i, e := range entries {
		data, err := events.Marshal(e.Value)
		if err != nil {
			return nil, nil, err
		}
		hdr := nats.Header{}
		maps.Copy(hdr, e.Header)
		hdr.Set(events.HeaderRecord, e.Value.VariantName())
		hdr.Set(jetstream.MsgIDHeader, base+strconv.Itoa(i))
		subj := w.ctlSub
		switch e.Kind {
		case events.LogEvents:
			if _, ok := e.Value.(events.AcpDurableEvent); !ok {
				return nil, nil, fmt.Errorf("append: %s is not a durable event", e.Value.VariantName())
			}
			eventNo++
			out[i].EventNo = eventNo
			hdr.Set(events.HeaderEventNo, strconv.FormatUint(eventNo, 10))
			eventBytes += uint64(len(data))
			hdr.Set(events.HeaderEventBytes, strconv.FormatUint(eventBytes, 10))
			subj = w.evSubj
		case events.LogControl:
			if e.Subject != "" {
				if !strings.HasPrefix(e.Subject, w.prefix) {
					return nil, nil, fmt.Errorf("append: %s is not a subject of session %s/%s", e.Subject, w.ns, w.sid)
				}
				subj = e.Subject
			}
		default:
			return nil, nil, fmt.Errorf("append: unknown log kind %q", e.Kind)
		}
		msgs[i] = &nats.Msg{Subject: subj, Header: hdr, Data: data}
	}
	// The compare-and-set goes on the first message only: the server checks
	// it against the log as it was before the batch.
	msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(pos.LastSeq, 10))
	// The compare-and-set covers every subject of the session (a
	// wildcard), not just the one written.
	msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, w.filter)
	return msgs, out, nil
}

func (w *Writer) publish(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	if len(msgs) == 1 {
		ack, err := w.js.PublishMsg(ctx, msgs[0])
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	ack, err := jetstreamext.PublishMsgBatch(ctx, w.js, msgs)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func (w *Writer) commit(msgs []*nats.Msg, out []Appended, lastSeq uint64) []Appended {
	first := lastSeq - uint64(len(out)) + 1
	for i := range out {
		out[i].Seq = first + uint64(i)
		if out[i].EventNo != 0 {
			w.pos.LastEventNo, w.pos.LastEventSeq = out[i].EventNo, out[i].Seq
			w.pos.EventBytes = headerBytes(msgs[i])
		}
	}
	w.pos.LastSeq = lastSeq
	return out
}

// storedAlready reports whether the session's newest record is last (same
// Nats-Msg-Id), and its sequence.
func (w *Writer) storedAlready(ctx context.Context, last *nats.Msg) (uint64, bool) {
	rec, err := Last(ctx, w.js, events.StreamLog, w.filter)
	if err != nil || rec == nil {
		return 0, false
	}
	if rec.Header.Get(jetstream.MsgIDHeader) != last.Header.Get(jetstream.MsgIDHeader) {
		return 0, false
	}
	return rec.Sequence, true
}

func apiErrorCode(err error) jetstream.ErrorCode {
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok {
		return apiErr.ErrorCode
	}
	if jsErr, ok := errors.AsType[jetstream.JetStreamError](err); ok && jsErr.APIError() != nil {
		return jsErr.APIError().ErrorCode
	}
	return 0
}

// isConflict reports a compare-and-set failure. 10071 and 10164 mean the same
// thing (10164 is what a replicated stream says).
func isConflict(err error) bool {
	c := apiErrorCode(err)
	return c == jetstream.JSErrCodeStreamWrongLastSequence || c == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// JetStream's codes for a write refused for want of room: the server's
// store at its limit (max_file_store), the account's limits, the
// account's storage.
const (
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeAccountResources      jetstream.ErrorCode = 10002
	errCodeStorageResources      jetstream.ErrorCode = 10047
)

// StorageFull reports whether err is JetStream refusing a write because
// its store, or the account's share of it, is full: an append's, or a KV
// bucket's put. Nothing was stored, and nothing will be until space is
// freed or the limit raised: it is no transient fault to retry at once.
func StorageFull(err error) bool {
	switch apiErrorCode(err) {
	case errCodeInsufficientResources, errCodeAccountResources, errCodeStorageResources:
		return true
	}
	return false
}

// storageFull is the typed error of an append the store refused.
func storageFull(ns events.Namespace, sid events.SessionID, err error) error {
	return events.Errorf(events.CodeStorageFull, "append to %s/%s: the NATS store refuses writes (%v): free space, or raise JetStream's store limit", ns, sid, err)
}

// errCodeBatchDuplicate: "atomic publish batch contains duplicate message id":
// the batch was stored by an earlier attempt.
const errCodeBatchDuplicate jetstream.ErrorCode = 10201

func isBatchDuplicate(err error) bool { return apiErrorCode(err) == errCodeBatchDuplicate }

// An append that finds the stream unable to answer (no responders: a
// leader election on a replicated stream, some seconds; a timeout) is
// sent again, with the same message IDs, for up to appendRetryFor: long
// enough to ride out an election, so that a turn does not fail because
// ACP_LOG changed leaders under it.
const (
	appendRetryFor  = 20 * time.Second
	appendRetryWait = 250 * time.Millisecond
)

// Transient reports a failure that passes: the stream cannot answer now,
// or the connection lost the request with its socket (a node that died
// under it: the write fails with a broken pipe or a reset, and the
// connection moves to another node). The retry carries the same message
// IDs, so what the lost request did store is not stored twice.
func Transient(err error) bool {
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrStaleConnection) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}
