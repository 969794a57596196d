package eventlog_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// BenchmarkAppend measures the single-writer append: one compare-and-set
// record at a time per session, over several sessions at once, or an
// atomic batch. Baseline raw: JetStream async publishes of the same size.
func BenchmarkAppend(b *testing.B) {
	cases := []struct{ batch, size, sessions int }{
		{1, 256, 1}, {1, 256, 16}, {1, 1024, 1}, {1, 1024, 16}, {10, 256, 1},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("batch=%d,size=%d,sessions=%d", c.batch, c.size, c.sessions), func(b *testing.B) {
			js := setup(b)
			text := strings.Repeat("x", c.size)
			entries := make([]eventlog.Entry, c.batch)
			for i := range entries {
				entries[i] = eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{
					Update: events.JSON(`{"sessionUpdate":"x","t":"` + text + `"}`),
				}}
			}
			writers := make([]*eventlog.Writer, c.sessions)
			for i := range writers {
				writers[i] = eventlog.NewWriter(js, "default", events.SessionID(fmt.Sprint("bench", i)), eventlog.Position{}, "w")
			}
			b.SetBytes(int64(c.size * c.batch * c.sessions))
			start := time.Now()
			for b.Loop() {
				var wg sync.WaitGroup
				for _, w := range writers {
					wg.Go(func() {
						if _, err := w.Append(b.Context(), entries...); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(c.batch*c.sessions*b.N)/time.Since(start).Seconds(), "records/s")
		})
	}
	for _, size := range []int{256, 1024} {
		b.Run(fmt.Sprintf("raw,size=%d", size), func(b *testing.B) {
			js := setup(b)
			// A plain stream: what JetStream does with no Skein on top.
			if _, err := js.CreateStream(b.Context(), jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, size)
			const perOp = 100
			b.SetBytes(int64(size * perOp))
			start := time.Now()
			for b.Loop() {
				for range perOp {
					if _, err := js.PublishAsync("raw.bench", payload); err != nil {
						b.Fatal(err)
					}
				}
				<-js.PublishAsyncComplete()
			}
			b.ReportMetric(float64(perOp*b.N)/time.Since(start).Seconds(), "records/s")
		})
	}
}

// BenchmarkReadPage measures one history page of page=N records of a
// session whose log holds 2,000: forward (one batch direct get) and
// backward (an event-number search, then one batch direct get).
// Baseline jetstreamext: the same requests through orbit.go's GetBatch and
// GetLastMsgsFor, which receive on a synchronous subscription with the
// connection's default pending channel.
func BenchmarkReadPage(b *testing.B) {
	js := setup(b)
	w := eventlog.NewWriter(js, "default", "read", eventlog.Position{}, "w")
	entries := make([]eventlog.Entry, 100)
	for i := range entries {
		entries[i] = update(strings.Repeat("x", 200))
	}
	for range 20 {
		if _, err := w.AppendEach(b.Context(), entries); err != nil {
			b.Fatal(err)
		}
	}
	subject := events.LogSubject("default", "read", events.LogEvents)
	last := w.Position().LastSeq
	const page = 50
	reads := map[string]func() (int, error){
		"dir=forward,path=eventlog": func() (int, error) {
			recs, err := eventlog.Forward(b.Context(), js, events.StreamLog, subject, last/2, page)
			return len(recs), err
		},
		"dir=backward,path=eventlog": func() (int, error) {
			recs, err := eventlog.Backward(b.Context(), js, events.StreamLog, subject, last, page)
			return len(recs), err
		},
		"dir=forward,path=jetstreamext": func() (int, error) {
			it, err := jetstreamext.GetBatch(b.Context(), js, events.StreamLog, page, jetstreamext.GetBatchSeq(last/2+1), jetstreamext.GetBatchSubject(subject))
			if err != nil {
				return 0, err
			}
			n := 0
			for _, err := range it {
				if err != nil {
					return n, err
				}
				n++
			}
			return n, nil
		},
		"dir=backward,path=jetstreamext": func() (int, error) {
			n, cursor := 0, last+1
			for n < page {
				it, err := jetstreamext.GetLastMsgsFor(b.Context(), js, events.StreamLog, []string{subject},
					jetstreamext.GetLastMsgsUpToSeq(cursor-1), jetstreamext.GetLastMsgsBatchSize(1))
				if err != nil {
					return n, err
				}
				for m, err := range it {
					if err != nil {
						return n, err
					}
					cursor = m.Sequence
					n++
				}
			}
			return n, nil
		},
	}
	for _, name := range []string{"dir=forward,path=eventlog", "dir=forward,path=jetstreamext", "dir=backward,path=eventlog", "dir=backward,path=jetstreamext"} {
		b.Run(fmt.Sprintf("%s,page=%d", name, page), func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if n, err := reads[name](); err != nil || n != page {
					b.Fatalf("read %d records, %v; want %d", n, err, page)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1e3/float64(b.N), "page-ms")
		})
	}
}
