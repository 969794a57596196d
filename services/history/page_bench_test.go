package history_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/history"
)

// BenchmarkReadHistory: a page of 100 events through the history service's
// NATS endpoint, forward from the start and backward from the end, with
// and without the state changes (includeState, what every SSE backfill
// asks for). The session holds 50 turns of 20 agent messages of 256 bytes,
// each turn accepted by a user message and ended by a TurnFinished.
func BenchmarkReadHistory(b *testing.B) {
	const turns, messages, limit = 50, 20, 100
	h := provision(b, streams.Options{})
	serve(b, h.nc, history.Config{})
	w := eventlog.NewWriter(h.js, "default", "s1", eventlog.Position{}, "w")
	appendOne := func(e eventlog.Entry) {
		if _, err := w.Append(b.Context(), e); err != nil {
			b.Fatal(err)
		}
	}
	appendOne(eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test"}})
	text := fmt.Sprintf("%0256d", 0)
	for turn := range turns {
		id := fmt.Sprintf("t%d", turn)
		appendOne(eventlog.Entry{Kind: events.LogEvents, Header: nats.Header{events.HeaderTurnID: []string{id}, events.HeaderTurnAccepted: []string{"1"}},
			Value: &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"go"}}`)}})
		for range messages {
			appendOne(eventlog.Entry{Kind: events.LogEvents, Header: nats.Header{events.HeaderTurnID: []string{id}},
				Value: &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)}})
		}
		appendOne(eventlog.Entry{Kind: events.LogControl, Header: nats.Header{events.HeaderTurnID: []string{id}},
			Value: &events.TurnFinished{TurnID: id, Outcome: events.OutcomeCompleted, StopReason: "end_turn"}})
	}
	sid, n := "s1", uint32(limit)
	for _, dir := range []string{"forward", "backward"} {
		for _, state := range []bool{false, true} {
			b.Run(fmt.Sprintf("dir=%s,state=%v", dir, state), func(b *testing.B) {
				req := &events.AcpReadHistoryRequest{SessionID: &sid, Limit: &n, IncludeState: state}
				if dir == "forward" {
					req.After = new(uint64(0))
				}
				start := time.Now()
				for b.Loop() {
					p, err := rpc.Call[events.AcpHistoryPageResponse](b.Context(), h.nc, events.APISubject("default", events.OpReadHistory), req, nil)
					if err != nil {
						b.Fatal(err)
					}
					if len(p.Events) < limit {
						b.Fatalf("a page of %d entries, want at least %d", len(p.Events), limit)
					}
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/1e3/float64(b.N), "page-ms")
			})
		}
	}
}
