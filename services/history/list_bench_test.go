package history_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/history"
)

// BenchmarkListSessions: a listSessions page of 100 over N sessions' projections,
// from the newest, the middle and the oldest part of the list, through the
// history service's NATS endpoint. It also reports how long a replica that
// starts takes to build its index from ACP_SESSIONS (rebuild-s).
func BenchmarkListSessions(b *testing.B) {
	const sessions, page = 100_000, 100
	h := provision(b, streams.Options{})
	js := h.js
	// The projections, written as the session service writes them, but
	// in flight together.
	for i := range sessions {
		sid := fmt.Sprintf("sess-%06d", i)
		m := events.SessionMeta{Namespace: "default", Info: events.AcpDurableSessionInfo{
			SessionID: sid, Agent: "test", Cwd: "/w", AdditionalDirectories: events.JSON("[]"),
			State:     events.JSON(`{"status":"idle"}`),
			CreatedAt: base.Format(events.TimestampFormat), UpdatedAt: base.Add(time.Duration(i) * time.Millisecond).Format(events.TimestampFormat),
		}}
		data, err := events.Marshal(&m)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync(events.KVSubject(events.BucketSessions, events.SessionKey("default", events.SessionID(sid))), data); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("projections not stored")
	}

	start := time.Now()
	serve(b, h.nc, history.Config{})
	first, err := h.list(b, "default", nil, page) // waits for the index
	if err != nil {
		b.Fatal(err)
	}
	rebuilt := time.Since(start)

	// Cursors into the middle and the end of the list.
	cursors := map[string]*string{"newest": nil}
	cursor := first.NextCursor
	for n := page; n < sessions-page; n += page {
		if n == sessions/2 {
			cursors["middle"] = cursor
		}
		resp, err := h.list(b, "default", cursor, page)
		if err != nil {
			b.Fatal(err)
		}
		cursor = resp.NextCursor
	}
	cursors["oldest"] = cursor

	for _, at := range []string{"newest", "middle", "oldest"} {
		b.Run(fmt.Sprintf("sessions=%d,page=%d,at=%s", sessions, page, at), func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				resp, err := h.list(b, "default", cursors[at], page)
				lat = append(lat, time.Since(t0))
				if err != nil || len(resp.Sessions) != page {
					b.Fatalf("page at %s: %v", at, err)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(rebuilt.Seconds(), "rebuild-s")
		})
	}
}
