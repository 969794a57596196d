package eventlog_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// interleaved is a log with one long session among many others.
type interleaved struct {
	js      jetstream.JetStream
	subject string   // the long session's events
	seqs    []uint64 // seqs[i] is the stream sequence of its event i+1
}

// writeInterleaved stores events events of session "long" with, between
// two of them, a random number (0 to 2*mix, mix on average) of events of
// others other sessions, each with contiguous event numbers as the writer
// stamps them. It publishes directly, as many writers at once would: a
// fixture of half a million records through compare-and-set appends would
// take minutes.
func writeInterleaved(tb testing.TB, js jetstream.JetStream, rng *rand.Rand, events_, others, mix int) *interleaved {
	tb.Helper()
	lv := &interleaved{js: js, subject: events.LogSubject("default", "long", events.LogEvents)}
	otherNo := make([]uint64, others)
	payload := []byte(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a chunk of an agent's answer, about as long as one"}}`)
	data, err := events.Marshal(&events.AcpDurableSessionUpdate{Update: events.JSON(payload)})
	if err != nil {
		tb.Fatal(err)
	}
	var futs []jetstream.PubAckFuture
	published := 0
	publish := func(subject string, no uint64) {
		m := nats.NewMsg(subject)
		m.Header.Set(events.HeaderRecord, events.AcpDurableSessionUpdate{}.VariantName())
		m.Header.Set(events.HeaderEventNo, strconv.FormatUint(no, 10))
		m.Data = data
		// Wait for the acknowledgements every few hundred publishes: more
		// outstanding stalls the client on a loaded machine.
		if published++; published%500 == 0 {
			<-js.PublishAsyncComplete()
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			tb.Fatal(err)
		}
		if subject == lv.subject {
			futs = append(futs, f)
		}
	}
	for i := range events_ {
		publish(lv.subject, uint64(i+1))
		for range rng.IntN(2*mix + 1) {
			o := rng.IntN(others)
			otherNo[o]++
			publish(events.LogSubject("default", events.SessionID(fmt.Sprint("other", o)), events.LogEvents), otherNo[o])
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		tb.Fatal("fixture: publishes not acknowledged in a minute")
	}
	lv.seqs = make([]uint64, len(futs))
	for i, f := range futs {
		select {
		case ack := <-f.Ok():
			lv.seqs[i] = ack.Sequence
		case err := <-f.Err():
			tb.Fatal(err)
		}
	}
	return lv
}

// BenchmarkHistoryDepth reads a page of 100 events from the newest, the
// middle and the oldest part of a 100,000-event session whose events are
// interleaved with 100 other sessions' (4 of theirs between two of its on
// average: half a million records). Forward reads the page after the event
// before it (one batch direct get); backward reads the same page before the
// event after it (event-number search, then one batch); stepback, the
// baseline, steps back one direct get per record, as Backward did. It reports each
// page's p50 and p99. A full replay of the session (the records per second
// of eventlog.Replay) is set beside a bare ordered consumer on the same
// subject and a loop of batch direct gets of 1,000.
func BenchmarkHistoryDepth(b *testing.B) {
	const total, others, mix, page = 100_000, 100, 4, 100
	js := setup(b)
	lv := writeInterleaved(b, js, rand.New(rand.NewPCG(1, 2)), total, others, mix)
	for _, at := range []struct {
		name  string
		first int // event number of the page's first event
	}{{"newest", total - page + 1}, {"middle", total/2 + 1}, {"oldest", 1}} {
		for _, dir := range []string{"forward", "backward", "stepback"} {
			b.Run(fmt.Sprintf("events=%d,others=%d,page=%d,at=%s,dir=%s", total, others, page, at.name, dir), func(b *testing.B) {
				want := lv.seqs[at.first-1 : at.first-1+page]
				var ms []float64
				var probes atomic.Int64
				ctx := eventlog.CountReads(b.Context(), nil, &probes)
				for b.Loop() {
					start := time.Now()
					var recs []*eventlog.Record
					var err error
					if dir == "forward" {
						after := uint64(0)
						if at.first > 1 {
							after = lv.seqs[at.first-2]
						}
						recs, err = eventlog.Forward(b.Context(), js, events.StreamLog, lv.subject, after, page)
					} else {
						before := lv.seqs[len(lv.seqs)-1] + 1
						if at.first-1+page < total {
							before = lv.seqs[at.first-1+page]
						}
						back := eventlog.Backward
						if dir == "stepback" {
							back = eventlog.StepBack
						}
						recs, err = back(ctx, js, events.StreamLog, lv.subject, before, page)
					}
					ms = append(ms, float64(time.Since(start).Microseconds())/1e3)
					if err != nil || len(recs) != page || recs[0].Sequence != want[0] || recs[page-1].Sequence != want[page-1] {
						b.Fatalf("page at %s: %d records, %v; want %d from %d", at.name, len(recs), err, page, want[0])
					}
				}
				slices.Sort(ms)
				b.ReportMetric(ms[len(ms)/2], "p50-ms")
				b.ReportMetric(ms[len(ms)*99/100], "p99-ms")
				if dir == "backward" {
					b.ReportMetric(float64(probes.Load())/float64(b.N), "probes/op")
				}
			})
		}
	}
	replays := map[string]func() (int, error){
		"eventlog": func() (int, error) {
			n := 0
			for _, err := range eventlog.Replay(b.Context(), js, events.StreamLog, lv.subject, 0) {
				if err != nil {
					return n, err
				}
				n++
			}
			return n, nil
		},
		"batch": func() (int, error) {
			n, after := 0, uint64(0)
			for {
				recs, err := eventlog.Forward(b.Context(), js, events.StreamLog, lv.subject, after, 1000)
				if err != nil || len(recs) == 0 {
					return n, err
				}
				n += len(recs)
				after = recs[len(recs)-1].Sequence
			}
		},
		"raw": func() (int, error) {
			cons, err := js.OrderedConsumer(b.Context(), events.StreamLog, jetstream.OrderedConsumerConfig{FilterSubjects: []string{lv.subject}})
			if err != nil {
				return 0, err
			}
			it, err := cons.Messages(jetstream.PullMaxMessages(1000))
			if err != nil {
				return 0, err
			}
			defer it.Stop()
			n := 0
			for n < total {
				if _, err := it.Next(jetstream.NextContext(b.Context())); err != nil {
					return n, err
				}
				n++
			}
			return n, nil
		},
	}
	for _, path := range []string{"eventlog", "raw", "batch"} {
		b.Run(fmt.Sprintf("events=%d,others=%d,replay=%s", total, others, path), func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if n, err := replays[path](); err != nil || n != total {
					b.Fatalf("replayed %d records, %v; want %d", n, err, total)
				}
			}
			b.ReportMetric(float64(total*b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}
