package eventlog_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
