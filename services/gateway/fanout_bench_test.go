package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/services/gateway"
)

// fanoutRate is how many turns a second BenchmarkLiveFanout runs in its
// session, each storing one agent message.
const fanoutRate = 50

// BenchmarkLiveFanout: one session, N SSE viewers on one gateway (served
// by Run on a loopback port, in front of the real services), and turns
// at a steady rate, each storing one agent message. It reports the
// delivery latency from the message's storage (its timestamp) to each
// viewer reading it, p50 and p99 over every (viewer, event), and the
// NATS subscriptions the gateway's connection holds (the live feed's two,
// and the request API's reply subscription). viewers=1 is the baseline.
func BenchmarkLiveFanout(b *testing.B) {
	for _, viewers := range []int{1, 1000} {
		b.Run(fmt.Sprintf("viewers=%d,rate=%d", viewers, fanoutRate), func(b *testing.B) {
			benchFanout(b, viewers)
		})
	}
}

func benchFanout(b *testing.B, n int) {
	srv := natstest.Run(b)
	backend := startStack(b, srv)
	backend.Open("s1", "demo")
	gnc := natstest.Connect(b, srv) // the gateway's alone, so its subscriptions can be counted
	cfg := gateway.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.MaxStreams, cfg.RateBurst = 2*n, 4*n // every viewer is one principal's
	cfg.MaxConnsPerAddr = 0                  // every viewer dials from loopback, as no real crowd does
	reg := prometheus.NewRegistry()
	gw, err := gateway.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), gnc, reg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, stopGateway := context.WithCancel(context.WithoutCancel(b.Context()))
	ran := make(chan error, 1)
	go func() { ran <- gw.Run(ctx) }()
	defer func() {
		stopGateway()
		if err := <-ran; err != nil {
			b.Errorf("Run = %v", err)
		}
	}()
	<-gw.Ready()
	url := "http://" + gw.Addr() + "/v1/sessions/s1/events"

	// The viewers, each on a connection of its own.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	vctx, stopViewers := context.WithCancel(b.Context())
	viewers := make([]*fanoutViewer, n)
	var wg sync.WaitGroup
	defer func() {
		stopViewers()
		wg.Wait()
	}()
	for i := range viewers {
		req, err := http.NewRequestWithContext(vctx, http.MethodGet, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := client.Do(req) // returns once the stream has joined and backfilled
		if err != nil {
			b.Fatalf("viewer %d: %v", i, err)
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("viewer %d: status %d", i, resp.StatusCode)
		}
		v := &fanoutViewer{}
		viewers[i] = v
		wg.Go(func() { v.read(resp.Body) })
	}
	subs := gnc.NumSubscriptions()
	liveSubs := testutil.Metric(b, reg, "acp_gateway_live_subscriptions")

	tick := time.NewTicker(time.Second / fanoutRate)
	defer tick.Stop()
	var appended int64
	for b.Loop() {
		<-tick.C
		backend.Turn("s1", "say "+strconv.Itoa(int(appended)))
		appended++
	}
	testutil.Eventually(b, "every viewer to read every event", func() bool {
		// A viewer cut off for falling behind never will: say so now.
		if n := testutil.Metric(b, reg, "acp_gateway_sse_overflows_total"); n != 0 {
			b.Fatalf("%v viewers were cut off for falling behind", n)
		}
		for _, v := range viewers {
			if v.received.Load() < appended {
				return false
			}
		}
		return true
	})
	stopViewers()
	wg.Wait()

	var all []time.Duration
	for _, v := range viewers {
		all = append(all, v.latencies...)
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(subs), "nats-subs")
	b.ReportMetric(liveSubs, "live-subs")
}

// fanoutViewer reads one event stream and times each event it carries.
type fanoutViewer struct {
	received  atomic.Int64
	latencies []time.Duration // read by the benchmark once read returned
}

var (
	durableMessage = []byte(`"durability":"durable","type":"agent_message_chunk"`)
	timestampField = []byte(`"timestamp":"`)
)

// read reads events until the stream ends, and times each durable agent
// message from its timestamp, the time it was stored.
func (v *fanoutViewer) read(body io.ReadCloser) {
	defer body.Close()
	br := bufio.NewReader(body)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		if !bytes.HasPrefix(line, []byte("data: ")) || !bytes.Contains(line, durableMessage) {
			continue
		}
		now := time.Now()
		_, after, ok := bytes.Cut(line, timestampField)
		if !ok {
			continue
		}
		stamp, _, ok := bytes.Cut(after, []byte{'"'})
		if !ok {
			continue
		}
		stored, err := time.Parse(time.RFC3339Nano, string(stamp))
		if err != nil {
			continue
		}
		v.latencies = append(v.latencies, now.Sub(stored))
		v.received.Add(1)
	}
}
