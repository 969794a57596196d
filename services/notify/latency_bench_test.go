package notify_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/webhook"
)

// BenchmarkWebhookLatency measures a webhook's delivery latency: from the
// TurnFinished record being stored in ACP_LOG (its JetStream timestamp,
// the notification's "timestamp") to the request arriving at a receiver
// on loopback, signed, through the deriver's consumer, ACP_NOTIFY and the
// webhook's consumer. Its baseline (tail-p50-ms, tail-p99-ms) is the same
// record reaching a core subscriber of the log's RePublish (acp.tail),
// what a live viewer waits. Each iteration is one turn, run to its end
// through the gateway, and its notification awaited before the next.
func BenchmarkWebhookLatency(b *testing.B) {
	r := newRig(b)
	rc := newReceiver(b, 0)
	c := r.create(rc.srv.URL, webhook.TypeTurnFinished)
	rc.mu.Lock()
	rc.secret = c.Secret
	rc.mu.Unlock()
	tail := make(chan time.Time, 16)
	sub, err := r.stack.Conn().Subscribe(events.TailSubject("default", "bench", events.LogControl), func(m *nats.Msg) {
		if m.Header.Get(events.HeaderRecord) == events.RecordTurnFinished {
			tail <- time.Now()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	r.prompt("bench", "say warm", http.StatusOK) // the adapter started, the paths warm
	rc.await("the warm-up", countType(1, webhook.TypeTurnFinished))
	<-tail

	var lat, tailLat []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r.prompt("bench", "say hi", http.StatusOK)
		ds := rc.await("the turn's notification", countType(i+2, webhook.TypeTurnFinished))
		d := ds[len(ds)-1]
		stored, err := time.Parse(time.RFC3339Nano, d.Body.Timestamp)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, d.At.Sub(stored))
		tailLat = append(tailLat, (<-tail).Sub(stored))
	}
	b.StopTimer()
	report := func(ds []time.Duration, prefix string) {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, prefix+"p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, prefix+"p99-ms")
	}
	report(lat, "")
	report(tailLat, "tail-")
}
