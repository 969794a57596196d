package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
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
	// StartTime: the first record at or after it (with NextBySubj).
	StartTime *time.Time `json:"start_time,omitempty"`
	// MaxBytes ends a batch after the record that brings what it sent
	// (subjects, headers and payloads) to MaxBytes; 0 is the server's
	// max_pending (64 MiB by default).
	MaxBytes int `json:"max_bytes,omitempty"`
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

// directGet is one direct get, tried in attempts (see tryAgain).
func directGet(ctx context.Context, js jetstream.JetStream, stream string, req directGetRequest) (*Record, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return tryAgain(ctx, js.Conn(), func(ctx context.Context) (*Record, error) {
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
	})
}

// A direct get is served by any replica of the stream (allow_direct): the
// servers hand each request to one of them. A request whose replica dies
// with it, or that reaches a replica still catching up after its node's
// restart, is answered by nobody, and a caller would wait out its whole
// deadline: a gateway's live feed once waited two minutes so, its viewers
// stalled behind it, and a session's lock twenty. So every read is tried
// in attempts, the first bounded by firstAttempt and each next one twice
// as long, until the caller's context ends (or, when it has no deadline,
// the connection's request timeout): an unanswered request costs a
// second, and a slow server still gets as long as the caller gives.
const firstAttempt = time.Second

// tryAgain runs read in attempts, each with a deadline of its own, until
// one ends otherwise than by that deadline or ctx ends.
func tryAgain[T any](ctx context.Context, nc *nats.Conn, read func(context.Context) (T, error)) (T, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, nc.Opts.Timeout)
		defer cancel()
	}
	wait := firstAttempt
	for {
		actx, cancel := context.WithTimeout(ctx, wait)
		v, err := read(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return v, err
		}
		wait *= 2
	}
}

// directSubject is the direct get subject of stream, under js's API prefix.
func directSubject(js jetstream.JetStream, stream string) string {
	p := js.Options().APIPrefix
	if p == "" {
		p = jetstream.DefaultAPIPrefix
	}
	return p + "DIRECT.GET." + stream
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

// FirstSince returns the oldest record on subject (which may hold
// wildcards) stored at or after t, or nil and no error when there is none.
func FirstSince(ctx context.Context, js jetstream.JetStream, stream, subject string, t time.Time) (*Record, error) {
	t = t.UTC()
	return directGet(ctx, js, stream, directGetRequest{NextBySubj: subject, StartTime: &t})
}

// Forward returns up to limit records on subject with sequences greater than
// after, oldest first, in one batch direct get.
func Forward(ctx context.Context, js jetstream.JetStream, stream, subject string, after uint64, limit int) ([]*Record, error) {
	if limit <= 0 || after == math.MaxUint64 {
		return nil, nil // nothing is after the largest sequence; after+1 would wrap to the first
	}
	recs, err := directBatch(ctx, js, stream, directGetRequest{Seq: after + 1, NextBySubj: subject, Batch: limit}, limit)
	if err != nil {
		return nil, fmt.Errorf("batch get %s after %d: %w", subject, after, err)
	}
	return recs, nil
}

// Backward returns up to limit records on subject (a literal subject) with
// sequences less than before, oldest first.
//
// Public events carry a contiguous per-session event number (HeaderEventNo),
// which tells exactly how many events lie between two records whatever the
// interleaving with other sessions. So a backward page is found, not walked:
// the newest record before the cursor (one multi_last direct get) says which
// event numbers the page holds, and the subject's first record is a second
// anchor. The session's density between the two says where the page starts;
// one batch direct get from a little before there reads the page, an eighth
// of a page of slack allowed (seekPage). When the density misleads (the session
// was busier or quieter there), an interpolation search of single-record
// direct gets corrects it (locate). A page so costs one batch of O(limit)
// records plus two or three single reads, like a forward page, whatever
// the length of the session and its interleaving.
//
// Records without event numbers (control subjects, whose pages are short)
// are read by stepping back one direct get per record.
func Backward(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64, limit int) ([]*Record, error) {
	if limit <= 0 || before <= 1 {
		return nil, nil
	}
	hi, err := lastBefore(ctx, js, stream, subject, before)
	if err != nil || hi == nil {
		return nil, err
	}
	nHi := EventNo(hi)
	if nHi == 0 {
		return stepBack(ctx, js, stream, subject, before, limit)
	}
	if limit == 1 {
		return []*Record{hi}, nil
	}
	first, err := firstOf(ctx, js, stream, subject)
	if err != nil {
		return nil, err
	}
	return backwardFrom(ctx, js, stream, subject, before, limit, first, hi)
}

// firstOf returns the oldest record on subject, or nil.
func firstOf(ctx context.Context, js jetstream.JetStream, stream, subject string) (*Record, error) {
	first, err := directGet(ctx, js, stream, directGetRequest{Seq: 1, NextBySubj: subject})
	if err != nil {
		return nil, fmt.Errorf("first of %s: %w", subject, err)
	}
	return first, nil
}

// backwardFrom is Backward once it has read hi, the newest numbered
// record before before, and first, the subject's oldest (or nil).
func backwardFrom(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64, limit int, first, hi *Record) ([]*Record, error) {
	nHi := EventNo(hi)
	if first == nil || EventNo(first) == 0 || EventNo(first) > nHi || first.Sequence > hi.Sequence {
		// Pruned or deleted between the two reads: read the slow way.
		return fallBack(ctx, js, stream, subject, before, limit)
	}
	// The page is the events from wantNo to nHi.
	wantNo := EventNo(first)
	var recs []*Record
	var err error
	if nHi >= uint64(limit) && nHi-uint64(limit)+1 > wantNo {
		wantNo = nHi - uint64(limit) + 1
		recs, err = seekPage(ctx, js, stream, subject, anchor{first.Sequence, EventNo(first)}, anchor{hi.Sequence, nHi}, wantNo, slackFor(limit))
	} else {
		count := int(nHi - wantNo + 1)
		recs, err = directBatch(ctx, js, stream, directGetRequest{Seq: first.Sequence, NextBySubj: subject, Batch: count}, count)
	}
	if err != nil {
		return nil, fmt.Errorf("page of %s before %d: %w", subject, before, err)
	}
	// Keep the events from wantNo to nHi; they must be contiguous and end
	// with hi. Anything else means the log changed under the reads (a
	// prune, a delete): fall back to stepping, which needs no numbers.
	recs = slices.DeleteFunc(recs, func(r *Record) bool { n := EventNo(r); return n < wantNo || n > nHi })
	if len(recs) == 0 || recs[len(recs)-1].Sequence != hi.Sequence {
		return fallBack(ctx, js, stream, subject, before, limit)
	}
	for i, r := range recs {
		if EventNo(r) != wantNo+uint64(i) {
			return fallBack(ctx, js, stream, subject, before, limit)
		}
	}
	if len(recs) > limit {
		recs = recs[len(recs)-limit:]
	}
	return recs, nil
}

// seekPage reads the events from want to hi.key (and maybe a few around
// them) given the records lo and hi, lo.key < want < hi.key. It guesses
// where want lies from the session's density between lo and hi, a little
// early, and reads from there in one batch long enough for the page if the
// guess is within slack events early: the common case, one round trip.
// A guess past want is corrected with locate and one more batch for the
// events before those read; a guess too early reads on from where its batch
// ended, or searches again from there.
func seekPage(ctx context.Context, js jetstream.JetStream, stream, subject string, lo, hi anchor, want, slack uint64) ([]*Record, error) {
	from := max(want-min(slack, want), lo.key) // the earliest start that still is one batch
	count := int(hi.key - from + 1)
	guess := interpolate(lo, hi, want-min(slack/2, want-lo.key))
	recs, err := directBatch(ctx, js, stream, directGetRequest{Seq: guess, NextBySubj: subject, Batch: count}, count)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	n0, last := EventNo(recs[0]), recs[len(recs)-1]
	switch nLast := EventNo(last); {
	case n0 == 0 || nLast == 0:
		return nil, nil
	case n0 > want:
		// Past the page's start: find it, and read up to the batch.
		start, _, err := locate(ctx, js, stream, subject, EventNo, lo, anchor{recs[0].Sequence, n0}, want, slack)
		if err != nil || start == nil {
			return nil, err
		}
		n := int(n0 - EventNo(start))
		head, err := directBatch(ctx, js, stream, directGetRequest{Seq: start.Sequence, NextBySubj: subject, Batch: n}, n)
		if err != nil {
			return nil, err
		}
		return append(head, recs...), nil
	case nLast >= hi.key:
		return recs, nil
	case nLast >= want:
		// Started early but holds part of the page: read the rest.
		n := int(hi.key - nLast)
		rest, err := directBatch(ctx, js, stream, directGetRequest{Seq: last.Sequence + 1, NextBySubj: subject, Batch: n}, n)
		if err != nil {
			return nil, err
		}
		return append(recs, rest...), nil
	default:
		// Far too early: search from where the batch ended.
		start, _, err := locate(ctx, js, stream, subject, EventNo, anchor{last.Sequence, nLast}, hi, want, slack)
		if err != nil || start == nil {
			return nil, err
		}
		n := int(hi.key - EventNo(start) + 1)
		return directBatch(ctx, js, stream, directGetRequest{Seq: start.Sequence, NextBySubj: subject, Batch: n}, n)
	}
}

// interpolate returns the sequence where key lies if the subject's keys
// grow evenly from lo to hi.
func interpolate(lo, hi anchor, key uint64) uint64 {
	return lo.seq + uint64(float64(key-lo.key)*float64(hi.seq-lo.seq)/float64(hi.key-lo.key))
}

// slackFor is how many events before a page's first a located record may
// be: the page's batch then reads that many more records instead of
// searching further, and a probe is dearer than a few records.
func slackFor(limit int) uint64 { return uint64(max(limit/8, 1)) }

// lastBefore returns the newest record on subject with a sequence less than
// before, or nil.
func lastBefore(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64) (*Record, error) {
	recs, err := directBatch(ctx, js, stream, directGetRequest{MultiLastFor: []string{subject}, UpToSeq: before - 1, Batch: 1}, 1)
	if err != nil {
		return nil, fmt.Errorf("last of %s before %d: %w", subject, before, err)
	}
	if len(recs) == 0 {
		// The server answers nothing for an up_to_seq past the stream's
		// last sequence: then the subject's last record is the answer.
		last, err := Last(ctx, js, stream, subject)
		if err != nil || last == nil || last.Sequence >= before {
			return nil, err
		}
		return last, nil
	}
	return recs[0], nil
}

// anchor is a known record of a subject: its sequence and its key (an
// event number, a running byte total).
type anchor struct{ seq, key uint64 }

// maxProbes bounds locate's search. Interpolation converges in a few
// probes; every third probe bisects instead, so a skewed session still
// needs no more than about three times log2(its stream span) of them.
const maxProbes = 200

// locate searches subject for a record whose key is at most want and at
// least want-slack, given records lo and hi of the subject with
// lo.key < want < hi.key; key must grow with the sequence. It returns that
// record (found), or, when there is none, the first record whose key is
// above want (above). Both are nil when the log does not hold what the
// anchors say (it changed under the search).
//
// Each probe is a single-record direct get of the first record on subject
// at or after a guessed sequence. Between two known records the key grows
// at some rate per stream sequence, other sessions' records in between;
// the guess for want is where that rate puts it. A probe that lands past
// want moves the upper bound below the guess (the record before the one
// found is before the guess); one that lands before want but further than
// slack becomes the lower anchor.
func locate(ctx context.Context, js jetstream.JetStream, stream, subject string, key func(*Record) uint64, lo, hi anchor, want, slack uint64) (found, above *Record, err error) {
	// The record sought lies in [loSeq, hiSeq].
	loSeq, hiSeq := lo.seq, hi.seq
	for probe := range maxProbes {
		var guess uint64
		if probe%3 == 2 {
			guess = loSeq + (hiSeq-loSeq)/2
		} else {
			// Aim slack/2 early: landing a little before want ends the
			// search, landing past it costs another probe.
			guess = interpolate(lo, hi, want-min(slack/2, want-lo.key))
		}
		guess = min(max(guess, loSeq), hiSeq)
		traceOf(ctx).onProbe()
		r, err := directGet(ctx, js, stream, directGetRequest{Seq: guess, NextBySubj: subject})
		if err != nil {
			return nil, nil, fmt.Errorf("locate %d on %s: %w", want, subject, err)
		}
		if r == nil {
			return nil, nil, nil
		}
		k := key(r)
		switch {
		case k == 0:
			return nil, nil, nil
		case k <= want && want-k <= slack:
			return r, nil, nil
		case k < want:
			lo = anchor{r.Sequence, k}
			loSeq = r.Sequence + 1
		default: // past want: the record before r is before the guess
			hi = anchor{r.Sequence, k}
			above = r
			if guess == 0 || guess-1 < loSeq {
				return nil, above, nil
			}
			hiSeq = guess - 1
		}
		if loSeq > hiSeq {
			return nil, above, nil
		}
	}
	return nil, nil, nil
}

// fallBack is stepBack where the event-number search could not be trusted.
func fallBack(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64, limit int) ([]*Record, error) {
	traceOf(ctx).onStepBack()
	return stepBack(ctx, js, stream, subject, before, limit)
}

// stepBack steps back from before one record per direct get: O(limit)
// round trips. It needs no event numbers.
func stepBack(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64, limit int) ([]*Record, error) {
	var out []*Record
	cursor := before
	for len(out) < limit && cursor > 1 {
		r, err := lastBefore(ctx, js, stream, subject, cursor)
		if err != nil {
			return nil, fmt.Errorf("step back: %w", err)
		}
		if r == nil {
			break
		}
		out = append(out, r)
		cursor = r.Sequence
	}
	slices.Reverse(out)
	return out, nil
}

// directBatch sends a batch direct get and returns the records it answers
// (at most limit), up to the end-of-batch marker, tried in attempts (see
// tryAgain): an attempt that runs out of time starts the batch again. It
// subscribes with a channel sized to the batch: a synchronous subscription
// would allocate the connection's default pending channel (64k entries,
// half a megabyte) for every request.
func directBatch(ctx context.Context, js jetstream.JetStream, stream string, req directGetRequest, limit int) ([]*Record, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	b, err := tryAgain(ctx, js.Conn(), func(ctx context.Context) (batch, error) {
		return directBatchOnce(ctx, js, stream, body, limit)
	})
	return b.recs, err
}

// batch is what one batch direct get answered: its records, and, when it
// ended before its count, how many more records the subject held past them
// when the server sent its end-of-batch marker (Nats-Num-Pending).
type batch struct {
	recs    []*Record
	pending uint64
}

// headerNumPending is the end-of-batch marker's count of the records past
// the batch (nats.go names no constant for it).
const headerNumPending = "Nats-Num-Pending"

// directBatchMore is directBatch that also returns the end-of-batch
// marker's count of the records past the batch.
func directBatchMore(ctx context.Context, js jetstream.JetStream, stream string, req directGetRequest, limit int) (batch, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return batch{}, err
	}
	return tryAgain(ctx, js.Conn(), func(ctx context.Context) (batch, error) {
		return directBatchOnce(ctx, js, stream, body, limit)
	})
}

// directBatchOnce is one attempt of directBatch, with the request's body.
func directBatchOnce(ctx context.Context, js jetstream.JetStream, stream string, body []byte, limit int) (batch, error) {
	nc := js.Conn()
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, limit+1) // the records and the end-of-batch marker
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return batch{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(directSubject(js, stream), inbox, body); err != nil {
		return batch{}, err
	}
	out := make([]*Record, 0, min(limit, 1024))
	for len(out) < limit {
		var msg *nats.Msg
		select {
		case msg = <-ch:
		case <-ctx.Done():
			return batch{}, ctx.Err()
		}
		switch status := msg.Header.Get("Status"); {
		case status == "204" && len(msg.Data) == 0: // end of batch
			pending, _ := strconv.ParseUint(msg.Header.Get(headerNumPending), 10, 64)
			return batch{out, pending}, nil
		case status == "404": // nothing (more) to get
			return batch{recs: out}, nil
		case status == "503":
			// No responders: no replica of the stream serves direct gets
			// now (an election, every node restarting). Callers retry
			// nats.ErrNoResponders as they do a timeout.
			return batch{}, fmt.Errorf("direct get from %s: %w", stream, nats.ErrNoResponders)
		case status != "":
			return batch{}, fmt.Errorf("status %s %s", status, msg.Header.Get("Description"))
		}
		r, err := recordFromDirect(msg)
		if err != nil {
			return batch{}, err
		}
		out = append(out, r)
	}
	// As many as asked for: the end-of-batch marker is not waited for,
	// and pending is unknown (callers that need it ask for one more).
	return batch{recs: out}, nil
}

// EventNo returns the HeaderEventNo of r, or 0 when it has none.
func EventNo(r *Record) uint64 {
	n, _ := strconv.ParseUint(r.Header.Get(events.HeaderEventNo), 10, 64)
	return n
}

// EventBytes returns the HeaderEventBytes of r (the running total of its
// session's event payload bytes), or 0 when it has none.
func EventBytes(r *Record) uint64 {
	n, _ := strconv.ParseUint(r.Header.Get(events.HeaderEventBytes), 10, 64)
	return n
}

// OpenTurn applies the rule that tells from a session's newest record
// whether a turn is open: the record carries HeaderTurnID and is not the
// TurnFinished that closed it. It returns that turn's ID and start, the
// sequence of its accepting record (the record itself, when it accepted
// the turn; for another block of the accepting append, the sequence less
// HeaderTurnBlock; HeaderTurnStart otherwise). One direct get (Last on the
// session's LogFilter) and this answer whether a session runs, in O(1).
func OpenTurn(last *Record) (id string, start uint64, open bool, err error) {
	id = last.Header.Get(events.HeaderTurnID)
	if id == "" || last.Header.Get(events.HeaderRecord) == events.RecordTurnFinished {
		return "", 0, false, nil
	}
	if last.Header.Get(events.HeaderTurnAccepted) != "" {
		return id, last.Sequence, true, nil
	}
	if b := last.Header.Get(events.HeaderTurnBlock); b != "" {
		// Another block of the accepting append, stored right after it.
		i, err := strconv.ParseUint(b, 10, 64)
		if err != nil || i == 0 || i >= last.Sequence {
			return "", 0, false, events.Errorf(events.CodeInternal, "record %d of open turn %s has a bad %s %q", last.Sequence, id, events.HeaderTurnBlock, b)
		}
		return id, last.Sequence - i, true, nil
	}
	start, err = strconv.ParseUint(last.Header.Get(events.HeaderTurnStart), 10, 64)
	if err != nil {
		return "", 0, false, events.Errorf(events.CodeInternal, "record %d of open turn %s has no %s", last.Sequence, id, events.HeaderTurnStart)
	}
	return id, start, true, nil
}
