package session_test

import (
	"slices"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// BenchmarkQueueDispatch measures the gap between one turn's end and the
// next turn's acceptance, each the server's timestamp of its record in the
// log: path=queue, the next prompt waiting in the queue (the session
// service starts it); path=client, beside it, a client that awaits the
// first turn's end and then sends the next prompt, as it must without a
// queue. Each iteration is two turns; the first pauses until the second is
// sent (queued, or ready to go).
func BenchmarkQueueDispatch(b *testing.B) {
	for _, path := range []string{"queue", "client"} {
		b.Run("path="+path, func(b *testing.B) {
			h := startRig(b, session.Config{})
			ctx := b.Context()
			sid := "qbench"
			if err := h.open(b, sid, events.AcpOpenSessionRequest{}); err != nil {
				b.Fatal(err)
			}
			var gaps []time.Duration
			turns := 0
			for b.Loop() {
				turns += 2
				first, err := h.accept(ctx, sid, "", "pause "+sid+"\nsay first")
				if err != nil {
					b.Fatal(err)
				}
				if err := testagent.WaitPaused(ctx, h.control, sid); err != nil {
					b.Fatal(err)
				}
				if path == "queue" {
					if _, err := h.queue(ctx, sid, "", "say second"); err != nil {
						b.Fatal(err)
					}
					if err := testagent.Release(ctx, h.control, sid); err != nil {
						b.Fatal(err)
					}
				} else {
					if err := testagent.Release(ctx, h.control, sid); err != nil {
						b.Fatal(err)
					}
					if _, err := turnwait.Await(ctx, h.js, "default", events.SessionID(sid), first); err != nil {
						b.Fatal(err)
					}
					if _, err := h.accept(ctx, sid, "", "say second"); err != nil {
						b.Fatal(err)
					}
				}
				var log *eventlogtest.Log
				if err := testutil.Poll(ctx, "the second turn's end", func() (bool, error) {
					log, err = eventlogtest.Read(ctx, h.js, "default", events.SessionID(sid))
					if err != nil {
						return false, err
					}
					n := len(log.Turns)
					return n >= turns && log.Turns[turns-1].Finish != nil, nil
				}); err != nil {
					b.Fatal(err)
				}
				end, next := log.Turns[turns-2], log.Turns[turns-1]
				var ended, accepted time.Time
				for _, r := range end.Records {
					if r.Sequence == end.Finished {
						ended = r.Time
					}
				}
				for _, r := range next.Records {
					if r.Sequence == next.Accepted {
						accepted = r.Time
					}
				}
				gaps = append(gaps, accepted.Sub(ended))
			}
			slices.Sort(gaps)
			b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
