package eventlog

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// HistoryEntry builds the history entry of one stored LogEvents record from
// its stream sequence, store time, headers and payload. It is the one place
// that turns a log record into the protocol's AcpDurableHistoryEntry,
// whether the record came from a direct get (history) or from the stream's
// RePublish on events.TailSubject (live viewers).
func HistoryEntry(sid events.SessionID, seq uint64, stored time.Time, hdr nats.Header, data []byte) (*events.AcpDurableHistoryEntry, error) {
	v, err := events.Unmarshal(data)
	if err != nil {
		return nil, err
	}
	ev, ok := v.(events.AcpDurableEvent)
	if !ok {
		return nil, events.Errorf(events.CodeInvalidPayload, "record %d is %s, not a durable event", seq, v.VariantName())
	}
	eventNo, err := strconv.ParseUint(hdr.Get(events.HeaderEventNo), 10, 64)
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidPayload, "record %d: bad %s header %q", seq, events.HeaderEventNo, hdr.Get(events.HeaderEventNo))
	}
	return &events.AcpDurableHistoryEntry{
		SessionID: string(sid),
		Sequence:  seq,
		Timestamp: stored.UTC().Format(events.TimestampFormat),
		Event:     events.Union[events.AcpDurableEvent]{V: ev},
		EventNo:   eventNo,
		Principal: hdr.Get(events.HeaderPrincipal),
	}, nil
}

// TailEntry decodes a message received on the tail of a session's events
// (events.TailSubject with events.LogEvents). It also returns the
// Nats-Last-Sequence header: the sequence of the previous record on the
// same subject, so a viewer that last saw a different sequence knows it
// missed something and fills the gap from history.
func TailEntry(sid events.SessionID, msg *nats.Msg) (entry *events.AcpDurableHistoryEntry, prevSeq uint64, err error) {
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, 0, events.Errorf(events.CodeInvalidPayload, "tail message without %s", jetstream.SequenceHeader)
	}
	stored, err := time.Parse(time.RFC3339Nano, msg.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, 0, events.Errorf(events.CodeInvalidPayload, "tail message %d: bad %s", seq, jetstream.TimeStampHeaer)
	}
	prevSeq, _ = strconv.ParseUint(msg.Header.Get(jetstream.LastSequenceHeader), 10, 64)
	entry, err = HistoryEntry(sid, seq, stored, msg.Header, msg.Data)
	return entry, prevSeq, err
}
