package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"skein.dev/pkg/events"
)

// Record is one stored message, as a direct get returns it.
type Record = jetstream.RawStreamMsg

// directGetRequest is the JSON body of $JS.API.DIRECT.GET.<stream>.
type directGetRequest struct {
	Seq        uint64 `json:"seq,omitempty"`
	LastBySubj string `json:"last_by_subj,omitempty"`
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
	subj := "$JS.API.DIRECT.GET." + stream
	if p := js.Options().APIPrefix; p != "" && p != "$JS.API." {
		subj = p + "DIRECT.GET." + stream
	}
	msg, err := js.Conn().RequestWithContext(ctx, subj, body)
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
	it, err := jetstreamext.GetBatch(ctx, js, stream, limit,
		jetstreamext.GetBatchSeq(after+1), jetstreamext.GetBatchSubject(subject))
	if err != nil {
		return nil, fmt.Errorf("batch get %s after %d: %w", subject, after, err)
	}
	return collect(it, limit)
}

// Backward returns up to limit records on subject (a literal subject) with
// sequences less than before, oldest first. It steps back one record per
// request, so a page costs O(limit) round trips whatever the length of the
// session.
func Backward(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64, limit int) ([]*Record, error) {
	var out []*Record
	cursor := before
	for len(out) < limit && cursor > 1 {
		it, err := jetstreamext.GetLastMsgsFor(ctx, js, stream, []string{subject},
			jetstreamext.GetLastMsgsUpToSeq(cursor-1), jetstreamext.GetLastMsgsBatchSize(1))
		if err != nil {
			return nil, fmt.Errorf("step back on %s before %d: %w", subject, cursor, err)
		}
		recs, err := collect(it, 1)
		if err != nil {
			return nil, err
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

func collect(it iter.Seq2[*jetstream.RawStreamMsg, error], limit int) ([]*Record, error) {
	out := make([]*Record, 0, limit)
	for m, err := range it {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// EventNo returns the HeaderEventNo of r, or 0 when it has none.
func EventNo(r *Record) uint64 {
	n, _ := strconv.ParseUint(r.Header.Get(events.HeaderEventNo), 10, 64)
	return n
}
