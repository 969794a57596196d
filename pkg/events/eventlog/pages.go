package eventlog

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// A page is bounded by bytes as well as by count: whoever sends it on
// (the history service, in one NATS reply) must fit it below the
// transport's max_payload, and a reader must not hold a session's whole
// history in memory to cut a page from it. ForwardPage and BackwardPage
// read at most limit records whose payloads total at most maxBytes, and
// always one record at least: a record larger than a page is a page of its
// own. Each also says exactly whether the subject holds more records past
// the page in its direction, as the stream was when it was read.

// ForwardPage returns the records on subject (which may hold wildcards)
// after the sequence after, oldest first: at most limit of them, whose
// payloads total at most maxBytes, or the first alone when it is larger.
// more reports whether the subject holds records after those returned.
//
// It is one batch direct get bounded by the server with max_bytes, so that
// it reads about maxBytes whatever the records' sizes.
func ForwardPage(ctx context.Context, js jetstream.JetStream, stream, subject string, after uint64, limit, maxBytes int) (recs []*Record, more bool, err error) {
	if limit <= 0 || after == math.MaxUint64 {
		return nil, false, nil
	}
	// One record more than the page, and bytes up to the record that
	// passes maxBytes (the server counts subjects and headers too, so it
	// never stops short of what the page takes): what is read past the
	// page says there is more without another read.
	b, err := directBatchMore(ctx, js, stream, directGetRequest{Seq: after + 1, NextBySubj: subject, Batch: limit + 1, MaxBytes: max(maxBytes, 1)}, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("batch get %s after %d: %w", subject, after, err)
	}
	n := fitForward(b.recs, limit, maxBytes)
	return b.recs[:n], n < len(b.recs) || b.pending > 0, nil
}

// fitForward is how many of recs, from the first, make a page of at most
// limit records and maxBytes payload bytes: at least one, if any.
func fitForward(recs []*Record, limit, maxBytes int) int {
	total := 0
	for i, r := range recs {
		total += len(r.Data)
		if i == limit || i > 0 && total > maxBytes {
			return i
		}
	}
	return len(recs)
}

// fitBackward is how many of recs (oldest first), from the last, make a
// page of at most limit records and maxBytes payload bytes: at least one,
// if any.
func fitBackward(recs []*Record, limit, maxBytes int) int {
	total := 0
	for i := range recs {
		total += len(recs[len(recs)-1-i].Data)
		if i == limit || i > 0 && total > maxBytes {
			return i
		}
	}
	return len(recs)
}

// BackwardPage returns the records on subject (a literal subject) before
// the sequence before, oldest first: the newest limit of them whose
// payloads total at most maxBytes, or the newest alone when it is larger.
// more reports whether the subject holds records before those returned.
//
// While the subject's records up to the page total at most maxBytes (the
// running totals of HeaderEventBytes say so from two records), it is
// Backward. Past that, the page's first record is found by running total,
// as Backward finds it by event number (locate), and read in one batch;
// records without totals are stepped back over one at a time.
func BackwardPage(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64, limit, maxBytes int) (recs []*Record, more bool, err error) {
	if limit <= 0 || before <= 1 {
		return nil, false, nil
	}
	hi, err := lastBefore(ctx, js, stream, subject, before)
	if err != nil || hi == nil {
		return nil, false, err
	}
	first, err := firstOf(ctx, js, stream, subject)
	if err != nil {
		return nil, false, err
	}
	tHi, nHi := EventBytes(hi), EventNo(hi)
	if first == nil || nHi == 0 || tHi == 0 || EventBytes(first) < uint64(len(first.Data)) || first.Sequence > hi.Sequence {
		return stepBackPage(ctx, js, stream, subject, before, limit, maxBytes)
	}
	base := EventBytes(first) - uint64(len(first.Data)) // the bytes before first
	if tHi < base {
		return stepBackPage(ctx, js, stream, subject, before, limit, maxBytes)
	}
	if tHi-base <= uint64(maxBytes) {
		// Everything up to hi fits: the page is bounded by count alone.
		if recs, err = backwardFrom(ctx, js, stream, subject, before, limit+1, first, hi); err != nil {
			return nil, false, err
		}
		if len(recs) > limit {
			return recs[1:], true, nil
		}
		return recs, len(recs) > 0 && recs[0].Sequence > first.Sequence, nil
	}
	if recs, err = bytesBack(ctx, js, stream, subject, limit, maxBytes, first, hi); err != nil {
		return nil, false, err
	}
	if recs == nil {
		return stepBackPage(ctx, js, stream, subject, before, limit, maxBytes)
	}
	return recs, recs[0].Sequence > first.Sequence, nil
}

// bytesBack reads the page that ends with hi when the records from first
// to hi total more than maxBytes. The page starts after the first record p
// whose running total is at least hi's less maxBytes: the records after p
// total at most maxBytes, and p with them more. It returns nil when the
// log does not hold what the totals say (it changed under the reads).
func bytesBack(ctx context.Context, js jetstream.JetStream, stream, subject string, limit, maxBytes int, first, hi *Record) ([]*Record, error) {
	tHi, tFirst := EventBytes(hi), EventBytes(first)
	want := tHi - uint64(maxBytes) // the least total p may have
	slack := uint64(maxBytes) / 16
	p := first
	if tFirst < want {
		// Search for a total in [want, want+slack]: the page it starts
		// is then at most slack smaller than the largest that fits.
		found, above, err := locate(ctx, js, stream, subject, EventBytes, anchor{first.Sequence, tFirst}, anchor{hi.Sequence, tHi}, min(want+slack, tHi-1), slack)
		if err != nil {
			return nil, err
		}
		if p = found; p == nil {
			p = above
		}
		if p == nil || EventBytes(p) < want {
			return nil, nil
		}
	}
	nP, nHi := EventNo(p), EventNo(hi)
	if p.Sequence >= hi.Sequence || nP == 0 || nP >= nHi {
		return []*Record{hi}, nil // hi alone is larger than a page
	}
	count := int(nHi - nP)
	var recs []*Record
	var err error
	if count > limit {
		// Bounded by count within the bytes: the newest limit of them.
		recs, err = seekPage(ctx, js, stream, subject, anchor{p.Sequence, nP}, anchor{hi.Sequence, nHi}, nHi-uint64(limit)+1, slackFor(limit))
	} else {
		recs, err = directBatch(ctx, js, stream, directGetRequest{Seq: p.Sequence + 1, NextBySubj: subject, Batch: count}, count)
	}
	if err != nil {
		return nil, fmt.Errorf("page of %s before %d: %w", subject, hi.Sequence+1, err)
	}
	wantNo := nHi - uint64(min(count, limit)) + 1
	recs = slices.DeleteFunc(recs, func(r *Record) bool { n := EventNo(r); return n < wantNo || n > nHi })
	if len(recs) == 0 || recs[len(recs)-1].Sequence != hi.Sequence {
		return nil, nil
	}
	for i, r := range recs {
		if EventNo(r) != wantNo+uint64(i) {
			return nil, nil
		}
	}
	return recs[len(recs)-fitBackward(recs, limit, maxBytes):], nil
}

// stepBackPage is BackwardPage by stepping back one record per direct get,
// which needs neither event numbers nor running totals: it stops at limit
// records, or before the record that would take the page past maxBytes.
func stepBackPage(ctx context.Context, js jetstream.JetStream, stream, subject string, before uint64, limit, maxBytes int) ([]*Record, bool, error) {
	traceOf(ctx).onStepBack()
	var out []*Record
	total := 0
	cursor := before
	for cursor > 1 {
		r, err := lastBefore(ctx, js, stream, subject, cursor)
		if err != nil {
			return nil, false, fmt.Errorf("step back: %w", err)
		}
		if r == nil {
			break
		}
		total += len(r.Data)
		if len(out) == limit || len(out) > 0 && total > maxBytes {
			slices.Reverse(out)
			return out, true, nil
		}
		out = append(out, r)
		cursor = r.Sequence
	}
	slices.Reverse(out)
	return out, false, nil
}
