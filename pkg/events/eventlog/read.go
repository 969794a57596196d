package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// Record is one stored message, as a direct get returns it.
type Record = jetstream.RawStreamMsg

// directGetRequest is the JSON body of $JS.API.DIRECT.GET.<stream>.
type directGetRequest struct {
	Seq          uint64   `json:"seq,omitempty"`
	LastBySubj   string   `json:"last_by_subj,omitempty"`
	NextBySubj   string   `json:"next_by_subj,omitempty"`
	Batch        int      `json:"batch,omitempty"`
	MultiLastFor []string `json:"multi_last,omitempty"`
	UpToSeq      uint64   `json:"up_to_seq,omitempty"`
}

// Last returns the newest record whose subject matches subject, which may
// hold wildcards (LogFilter). It returns nil and no error when there is none.
func Last(ctx context.Context, js jetstream.JetStream, stream, subject string) (*Record, error) {
	return directGet(ctx, js, stream, directGetRequest{LastBySubj: subject})
}

// At returns the record at seq, or nil when there is none (never written,
// deleted or pruned).
func At(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (*Record, error) {
	return directGet(ctx, js, stream, directGetRequest{Seq: seq})
}

func directGet(ctx context.Context, js jetstream.JetStream, stream string, req directGetRequest) (*Record, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := js.Conn().RequestWithContext(ctx, directSubject(js, stream), body)
	if err != nil {
		return nil, fmt.Errorf("direct get %s: %w", stream, err)
	}
	switch msg.Header.Get("Status") {
	case "":
	case "404":
		return nil, nil
	default:
		return nil, fmt.Errorf("direct get %s: status %s %s", stream, msg.Header.Get("Status"), msg.Header.Get("Description"))
	}
	return recordFromDirect(msg)
}

// directSubject is the direct get subject of stream, under js's API prefix.
func directSubject(js jetstream.JetStream, stream string) string {
	if p := js.Options().APIPrefix; p != "" && p != "$JS.API." {
		return p + "DIRECT.GET." + stream
	}
	return "$JS.API.DIRECT.GET." + stream
}

func recordFromDirect(msg *nats.Msg) (*Record, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get reply without %s", jetstream.SequenceHeader)
	}
	ts, err := time.Parse(time.RFC3339Nano, msg.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("direct get reply %d: bad %s: %w", seq, jetstream.TimeStampHeaer, err)
	}
	return &Record{
		Subject:  msg.Header.Get(jetstream.SubjectHeader),
		Sequence: seq,
		Header:   msg.Header,
		Data:     msg.Data,
		Time:     ts,
	}, nil
}

// Forward returns up to limit records on subject with sequences greater than
// after, oldest first, in one batch direct get.
func Forward(ctx context.Context, js jetstream.JetStream, stream, subject string, after uint64, limit int) ([]*Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	recs, err := directBatch(ctx, js, stream, directGetRequest{Seq: after + 1, NextBySubj: subject, Batch: limit}, limit)
	if err != nil {
		return nil, fmt.Errorf("batch get %s after %d: %w", subject, after, err)
	}
	return recs, nil
}

// Backward returns up to limit records on subject (a literal subject) with
// sequences less than before, oldest first. It steps back one record per
// request, so a page costs O(limit) round trips whatever the length of the
// session.
func Backward(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64, limit int) ([]*Record, error) {
	var out []*Record
	cursor := before
	for len(out) < limit && cursor > 1 {
		recs, err := directBatch(ctx, js, stream, directGetRequest{MultiLastFor: []string{subject}, UpToSeq: cursor - 1, Batch: 1}, 1)
		if err != nil {
			return nil, fmt.Errorf("step back on %s before %d: %w", subject, cursor, err)
		}
		if len(recs) == 0 {
			break
		}
		out = append(out, recs[0])
		cursor = recs[0].Sequence
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// directBatch sends a batch direct get and returns the records it answers
// (at most limit), up to the end-of-batch marker. It subscribes with a
// channel sized to the batch: a synchronous subscription would allocate the
// connection's default pending channel (64k entries, half a megabyte) for
// every request, and a history page steps back one request per record.
func directBatch(ctx context.Context, js jetstream.JetStream, stream string, req directGetRequest, limit int) ([]*Record, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	nc := js.Conn()
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, limit+1) // the records and the end-of-batch marker
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(directSubject(js, stream), inbox, body); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, nc.Opts.Timeout)
		defer cancel()
	}
	out := make([]*Record, 0, limit)
	for len(out) < limit {
		var msg *nats.Msg
		select {
		case msg = <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		switch status := msg.Header.Get("Status"); {
		case status == "204" && len(msg.Data) == 0: // end of batch
			return out, nil
		case status == "404": // nothing (more) to get
			return out, nil
		case status != "":
			return nil, fmt.Errorf("status %s %s", status, msg.Header.Get("Description"))
		}
		r, err := recordFromDirect(msg)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// EventNo returns the HeaderEventNo of r, or 0 when it has none.
func EventNo(r *Record) uint64 {
	n, _ := strconv.ParseUint(r.Header.Get(events.HeaderEventNo), 10, 64)
	return n
}

// OpenTurn applies the rule that tells from a session's newest record
// whether a turn is open: the record carries HeaderTurnID and is not the
// TurnFinished that closed it. It returns that turn's ID and start, the
// sequence of its accepting record (the record itself, when it accepted
// the turn; HeaderTurnStart otherwise). One direct get (Last on the
// session's LogFilter) and this answer whether a session runs, in O(1).
func OpenTurn(last *Record) (id string, start uint64, open bool, err error) {
	id = last.Header.Get(events.HeaderTurnID)
	if id == "" || last.Header.Get(events.HeaderRecord) == events.RecordTurnFinished {
		return "", 0, false, nil
	}
	if last.Header.Get(events.HeaderTurnAccepted) != "" {
		return id, last.Sequence, true, nil
	}
	start, err = strconv.ParseUint(last.Header.Get(events.HeaderTurnStart), 10, 64)
	if err != nil {
		return "", 0, false, events.Errorf(events.CodeInternal, "record %d of open turn %s has no %s", last.Sequence, id, events.HeaderTurnStart)
	}
	return id, start, true, nil
}
