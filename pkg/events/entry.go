package events

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TimestampFormat is how a history entry's timestamp is written: the time
// JetStream stored the record, in UTC.
const TimestampFormat = time.RFC3339Nano

// Entry builds the history entry of one stored LogEvents record from its
// stream sequence, store time, headers and payload. It is the one place that
// turns a log record into the protocol's AcpDurableHistoryEntry, whether the
// record came from a direct get (history) or from the stream's RePublish on
// TailSubject (live viewers).
func Entry(sid SessionID, seq uint64, stored time.Time, hdr nats.Header, data []byte) (*AcpDurableHistoryEntry, error) {
	v, err := Unmarshal(data)
	if err != nil {
		return nil, err
	}
	ev, ok := v.(AcpDurableEvent)
	if !ok {
		return nil, Errorf(CodeInvalidPayload, "record %d is %s, not a durable event", seq, v.VariantName())
	}
	eventNo, err := strconv.ParseUint(hdr.Get(HeaderEventNo), 10, 64)
	if err != nil {
		return nil, Errorf(CodeInvalidPayload, "record %d: bad %s header %q", seq, HeaderEventNo, hdr.Get(HeaderEventNo))
	}
	return &AcpDurableHistoryEntry{
		SessionID: string(sid),
		Sequence:  seq,
		Timestamp: stored.UTC().Format(TimestampFormat),
		Event:     Union[AcpDurableEvent]{V: ev},
		EventNo:   eventNo,
	}, nil
}

// TailEntry decodes a message received on TailSubject(ns, sid, LogEvents).
// It also returns the Nats-Last-Sequence header: the sequence of the
// previous record on the same subject, so a viewer that last saw a different
// sequence knows it missed something and fills the gap from history.
func TailEntry(sid SessionID, msg *nats.Msg) (entry *AcpDurableHistoryEntry, prevSeq uint64, err error) {
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, 0, Errorf(CodeInvalidPayload, "tail message without %s", jetstream.SequenceHeader)
	}
	stored, err := time.Parse(time.RFC3339Nano, msg.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, 0, Errorf(CodeInvalidPayload, "tail message %d: bad %s", seq, jetstream.TimeStampHeaer)
	}
	prevSeq, _ = strconv.ParseUint(msg.Header.Get(jetstream.LastSequenceHeader), 10, 64)
	entry, err = Entry(sid, seq, stored, msg.Header, msg.Data)
	return entry, prevSeq, err
}
