package session_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/memstat"
	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
)

// BenchmarkTakeover measures how long a surviving session service replica
// takes to take over sessions=N sessions, each with a turn running (the
// test agent sleeps mid-turn), after their owner dies. Death is the
// owner's connection closing without a word, as after kill -9: its leases
// stay until they expire (owner-ttl), then the survivor claims every
// session and takes its turn over (lease, fence, the turn rebuilt from the
// log, the runner asked, ACP_IO followed again).
//
// One iteration is one death: a new survivor starts and settles (untimed:
// its start-up claims find every lease held), the current owner dies, and the clock stops when the survivor has taken over all N
// turns. takeover-s (and ns/op) therefore include waiting out the TTL;
// claim-s is the time from the survivor's first takeover to its last.
// benchWait bounds each wait of BenchmarkTakeover: its thousand sessions'
// claims take seconds on an idle machine, and many times that on a loaded
// one, where the test suite's PollTimeout is too short.
const benchWait = 5 * time.Minute

func BenchmarkTakeover(b *testing.B) {
	const ttl = time.Second
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("sessions=%d/owner-ttl=%v", n, ttl), func(b *testing.B) {
			memstat.NeedAdapters(b, n)
			ns := natstest.Run(b)
			lg := slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
			h := startBenchRunner(b, func() *nats.Conn { return natstest.Connect(b, ns) }, n, lg)
			cfg := session.Config{OwnerTTL: ttl, DrainWait: 100 * time.Millisecond}
			owner := startReplica(b, natstest.Connect(b, ns), cfg, lg)

			// Every session mid-turn. The prompts' answers would come from
			// the owner that dies: nobody waits for them.
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			sids := make(chan string)
			// A prompt that fails before the owner dies is a turn that
			// will never run: the wait below reports it at once.
			var promptErr atomic.Pointer[error]
			var wg sync.WaitGroup
			for range loadWorkers {
				wg.Go(func() {
					for sid := range sids {
						if err := h.open(b, sid, events.AcpOpenSessionRequest{}); err != nil {
							b.Errorf("open %s: %v", sid, err)
							continue
						}
						go func() {
							if _, err := h.prompt(ctx, sid, "key", "say started\nsleep 1h"); err != nil && ctx.Err() == nil {
								promptErr.CompareAndSwap(nil, &err)
							}
						}()
					}
				})
			}
			for i := range n {
				sids <- fmt.Sprintf("t%05d", i)
			}
			close(sids)
			wg.Wait()
			var dispatched float64
			if err := testutil.PollWithin(ctx, benchWait, "every turn to run", func() (bool, error) {
				if err := promptErr.Load(); err != nil {
					return false, *err
				}
				dispatched = testutil.Metric(b, owner.reg, "acp_session_prompt_dispatches_total")
				return dispatched == float64(n), nil
			}); err != nil {
				b.Fatalf("%v: %v of %d turns dispatched", err, dispatched, n)
			}

			var total, claim time.Duration
			for b.Loop() {
				b.StopTimer()
				survivor := startReplica(b, natstest.Connect(b, ns), cfg, lg)
				// Its start-up claims find every lease held by a live owner.
				var held float64
				if err := testutil.PollWithin(ctx, benchWait, "the survivor's start-up claims", func() (bool, error) {
					held = testutil.Metric(b, survivor.reg, "acp_session_owner_leases_total", "event", "held_elsewhere")
					return held == float64(n), nil
				}); err != nil {
					b.Fatalf("%v: %v of %d leases found held", err, held, n)
				}
				b.StartTimer()
				died := time.Now()
				owner.die()
				var first time.Time
				if err := testutil.PollWithin(ctx, benchWait, "the survivor to take every turn over", func() (bool, error) {
					taken := testutil.Metric(b, survivor.reg, "acp_session_takeovers_total")
					if taken > 0 && first.IsZero() {
						first = time.Now()
					}
					return taken == float64(n), nil
				}); err != nil {
					b.Fatal(err)
				}
				claim += time.Since(first)
				total += time.Since(died)
				owner = survivor
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "takeover-s")
			b.ReportMetric(claim.Seconds()/float64(b.N), "claim-s")
			b.ReportMetric(float64(n)/(claim.Seconds()/float64(b.N)), "claims/s")
		})
	}
}

// replica is a session service with its own connection and registry.
type replica struct {
	nc   *nats.Conn
	reg  *prometheus.Registry
	stop func()
}

func startReplica(tb testing.TB, nc *nats.Conn, cfg session.Config, lg *slog.Logger) *replica {
	tb.Helper()
	r := &replica{nc: nc, reg: prometheus.NewRegistry()}
	svc, err := session.New(cfg, lg, nc, r.reg)
	if err != nil {
		tb.Fatal(err)
	}
	r.stop = runStoppable(tb, "session replica", svc)
	flush(tb, nc)
	return r
}

// die cuts the replica off NATS without a word (its leases stay until they
// expire), then stops what is left of it in the background.
func (r *replica) die() {
	r.nc.Close()
	go r.stop()
}

// startBenchRunner starts a runner "r1" with room for n test agents, on a
// connection of its own, and returns a harness on another.
func startBenchRunner(b *testing.B, connect func() *nats.Conn, n int, lg *slog.Logger) *harness {
	b.Helper()
	nc := connect()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	runner, err := adapterrunner.New(adapterrunner.Config{
		ID: "r1", DataDir: testutil.TempDir(b), StopGrace: 200 * time.Millisecond, Capacity: n,
		Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent}},
	}, lg, connect(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	runStoppable(b, "runner", runner)
	return &harness{nc: nc, js: js}
}
