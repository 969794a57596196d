package eventlog_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// ForwardPage and BackwardPage bound a page by count and by payload
// bytes, a record larger than the bound alone in its page, and say
// exactly whether more lies past it; paging through a subject either way
// reads each record once. Public events (numbered, with running totals)
// and control records (neither: stepped back over) alike, interleaved
// with another session's.
func TestPagesBoundedByBytes(t *testing.T) {
	js := setup(t)
	ctx := t.Context()
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w1")
	other := eventlog.NewWriter(js, "default", "s2", eventlog.Position{}, "w2")
	sizes := []int{10, 3000, 10, 10, 9000, 500, 10, 2500, 10, 10, 10, 4000}
	for i, n := range sizes {
		text := strings.Repeat("x", n)
		if _, err := w.Append(ctx, update(text), eventlog.Entry{Kind: events.LogControl,
			Value: &events.TurnFinished{TurnID: fmt.Sprintf("t%d-%s", i, text), Outcome: events.OutcomeCompleted}}); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Append(ctx, update("other")); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []events.LogKind{events.LogEvents, events.LogControl} {
		subject := events.LogSubject("default", "s1", kind)
		all, err := eventlog.Forward(ctx, js, events.StreamLog, subject, 0, 1000)
		if err != nil || len(all) != len(sizes) {
			t.Fatalf("%s: Forward = %d records, %v", kind, len(all), err)
		}
		for _, limit := range []int{1, 2, 5, 100} {
			for _, maxBytes := range []int{1, 3500, 6000, 1 << 20} {
				name := fmt.Sprintf("%s limit=%d maxBytes=%d", kind, limit, maxBytes)
				var fwd []uint64
				after := uint64(0)
				for more := true; more; {
					var recs []*eventlog.Record
					if recs, more, err = eventlog.ForwardPage(ctx, js, events.StreamLog, subject, after, limit, maxBytes); err != nil {
						t.Fatal(err)
					}
					checkPage(t, name+" forward", recs, limit, maxBytes)
					for _, r := range recs {
						fwd = append(fwd, r.Sequence)
					}
					if more != (len(fwd) < len(all)) {
						t.Fatalf("%s: more = %v after %d of %d records", name, more, len(fwd), len(all))
					}
					if len(recs) > 0 {
						after = recs[len(recs)-1].Sequence
					}
				}
				var back []uint64
				before := all[len(all)-1].Sequence + 1
				for more := true; more; {
					var recs []*eventlog.Record
					if recs, more, err = eventlog.BackwardPage(ctx, js, events.StreamLog, subject, before, limit, maxBytes); err != nil {
						t.Fatal(err)
					}
					checkPage(t, name+" backward", recs, limit, maxBytes)
					seqs := make([]uint64, 0, len(recs))
					for _, r := range recs {
						seqs = append(seqs, r.Sequence)
					}
					back = append(seqs, back...)
					if more != (len(back) < len(all)) {
						t.Fatalf("%s: more before = %v after %d of %d records", name, more, len(back), len(all))
					}
					if len(recs) > 0 {
						before = recs[0].Sequence
					}
				}
				want := make([]uint64, 0, len(all))
				for _, r := range all {
					want = append(want, r.Sequence)
				}
				if !slices.Equal(fwd, want) || !slices.Equal(back, want) {
					t.Errorf("%s: forward %v, backward %v, want %v", name, fwd, back, want)
				}
			}
		}
	}
}

// checkPage fails unless recs is a page of at most limit records whose
// payloads total at most maxBytes, or one record alone.
func checkPage(t *testing.T, name string, recs []*eventlog.Record, limit, maxBytes int) {
	t.Helper()
	total := 0
	for _, r := range recs {
		total += len(r.Data)
	}
	if len(recs) == 0 || len(recs) > limit || len(recs) > 1 && total > maxBytes {
		t.Fatalf("%s: a page of %d records, %d bytes", name, len(recs), total)
	}
}
