package adapterrunner_test

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// BenchmarkOutputStored measures the runner's ACP_IO path with every record
// acknowledged: an adapter floods updates=N updates of bytes=B padding each
// (the test agent's flood), the runner gathers them into records, hands
// them to its window and follows each one's acknowledgement, and a loop
// ends when ACP_IO stored the turn's answer, the record after them all.
// The default window applies, on one embedded server with file storage.
//
//   - updates/s: the agent's updates stored per second.
//   - records/op: the ACP_IO records a turn became (a burst is one).
//   - retries/op: records sent again; 0 unless the server is overloaded
//     past the acknowledgement timeout.
func BenchmarkOutputStored(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(fmt.Sprintf("updates=1000/bytes=%d", size), func(b *testing.B) {
			const updates = 1000
			ns := natstest.Run(b)
			reg := prometheus.NewRegistry()
			r, err := adapterrunner.New(adapterrunner.Config{
				ID: "r1", DataDir: testutil.TempDir(b), Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent}},
				StopGrace: 200 * time.Millisecond,
			}, slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), natstest.Connect(b, ns), reg)
			if err != nil {
				b.Fatal(err)
			}
			runRunner(b, r)
			nc := natstest.Connect(b, ns)
			answered := make(chan string, 1)
			sub, err := nc.Subscribe(events.IOTailAll, func(m *nats.Msg) {
				if m.Header.Get(events.HeaderRecord) != events.RecordAdapterPromptResult {
					return
				}
				if res, err := events.Decode[events.AdapterPromptResult](m.Data); err == nil {
					answered <- res.TurnID
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sub.Unsubscribe() })
			if _, err := rpc.Call[events.AcpSessionCreatedResponse](b.Context(), nc, events.RunnerSubject("r1", events.RunnerCreate),
				&events.AcpCreateSessionRequest{AgentType: "test", ProtocolVersion: 1, McpServers: events.JSON("[]")}, header("s1", "p1")); err != nil {
				b.Fatal(err)
			}
			counter := func(name string) float64 { return testutil.Metric(b, reg, name) }

			var turn atomic.Int64
			script := events.JSON(fmt.Sprintf(`[{"type":"text","text":"flood %d %d"}]`, updates, size))
			records, retries := counter("acp_runner_io_records_total"), counter("acp_runner_io_retries_total")
			b.SetBytes(updates * int64(size))
			for b.Loop() {
				turnID := fmt.Sprint("t", turn.Add(1))
				if _, err := rpc.Call[events.RunnerAck](b.Context(), nc, events.RunnerSubject("r1", events.RunnerPrompt),
					&events.RunnerPromptRequest{TurnID: turnID, Prompt: script}, header("s1", "p1")); err != nil {
					b.Fatal(err)
				}
				select {
				case got := <-answered:
					if got != turnID {
						b.Fatalf("answer to turn %s, want %s", got, turnID)
					}
				case <-time.After(time.Minute):
					b.Fatalf("turn %s: no answer stored in a minute", turnID)
				}
			}
			b.ReportMetric(float64(updates*b.N)/b.Elapsed().Seconds(), "updates/s")
			b.ReportMetric((counter("acp_runner_io_records_total")-records)/float64(b.N), "records/op")
			b.ReportMetric((counter("acp_runner_io_retries_total")-retries)/float64(b.N), "retries/op")
		})
	}
}
