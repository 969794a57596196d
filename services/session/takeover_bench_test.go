package session_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// benchWait bounds each wait of BenchmarkTakeover: its thousand sessions'
// claims take seconds on an idle machine, and many times that on a loaded
// one, where the test suite's PollTimeout is too short.
const benchWait = 5 * time.Minute

// BenchmarkTakeover measures how long a surviving session service replica
// takes to take over sessions=N sessions, each with a turn running (the
// test agent sleeps mid-turn), after their owner dies. Death is the
// owner's connection closing without a word, as after kill -9: its leases
// stay until they expire (owner-ttl), then the survivor claims every
// session and takes its turn over (lease, fence, the turn rebuilt from the
// log, the runner asked, ACP_IO followed again).
//
// One iteration is one death: a new survivor starts and settles (untimed:
// its start-up claims find the leases held), the current owner dies, and
// the clock stops when the survivor has taken over all N turns.
// takeover-s (and ns/op) therefore include waiting out the TTL; claim-s
// is the time from the survivor's first takeover to its last. On a
// machine so loaded that the owner renews later than the TTL, the
// survivor takes some turns before the death (early-takeovers, per
// iteration; 0 on an idle machine), and the figures cover the rest.
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
			var early float64
			for b.Loop() {
				b.StopTimer()
				survivor := startReplica(b, natstest.Connect(b, ns), cfg, lg)
				// Its start-up claims find every lease held by a live
				// owner, or, on a machine loaded enough that the owner's
				// renewals come later than the one-second TTL, free: the
				// survivor then takes those turns before the owner dies,
				// and the figures cover the rest (early-takeovers says
				// how many).
				var held, acquired float64
				if err := testutil.PollWithin(ctx, benchWait, "the survivor's start-up claims", func() (bool, error) {
					held = testutil.Metric(b, survivor.reg, "acp_session_owner_leases_total", "event", "held_elsewhere")
					acquired = testutil.Metric(b, survivor.reg, "acp_session_owner_leases_total", "event", "acquired")
					return held+acquired >= float64(n), nil
				}); err != nil {
					b.Fatalf("%v: of %d leases, %v found held and %v acquired; claims skipped: %s; leases of the owner: %s; projected sessions: %d",
						err, n, held, acquired, claimsSkipped(b, survivor.reg), leaseEvents(b, owner.reg), projected(b, h.js))
				}
				taken0 := testutil.Metric(b, survivor.reg, "acp_session_takeovers_total")
				early += taken0
				b.StartTimer()
				died := time.Now()
				owner.die()
				var first time.Time
				var taken float64
				if err := testutil.PollWithin(ctx, benchWait, "the survivor to take every turn over", func() (bool, error) {
					taken = testutil.Metric(b, survivor.reg, "acp_session_takeovers_total")
					if taken > taken0 && first.IsZero() {
						first = time.Now()
					}
					return taken >= float64(n), nil
				}); err != nil {
					b.Fatalf("%v: %v of %d turns taken over (%v before the owner died)", err, taken, n, taken0)
				}
				claim += time.Since(first)
				total += time.Since(died)
				owner = survivor
			}
			b.ReportMetric(early/float64(b.N), "early-takeovers")
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

// startBenchRunner starts a runner "r1" with room for n test agents and a
// quarter more, on a connection of its own, and returns a harness on
// another. The room above n is for a loaded machine: an owner whose
// one-second lease expired under load loads its session again, and its
// placement, going by the runners' heartbeats, sees r1 full of the
// session's own earlier adapters, which a create there would replace
// (983 of 1,000 turns ran, beside a make test).
func startBenchRunner(b *testing.B, connect func() *nats.Conn, n int, lg *slog.Logger) *harness {
	b.Helper()
	nc := connect()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	runner, err := adapterrunner.New(adapterrunner.Config{
		ID: "r1", DataDir: testutil.TempDir(b), StopGrace: 200 * time.Millisecond, Capacity: n + n/4,
		Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent}},
	}, lg, connect(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	runStoppable(b, "runner", runner)
	return &harness{nc: nc, js: js}
}

// claimsSkipped lists reg's claims skipped, by reason.
func claimsSkipped(tb testing.TB, reg prometheus.Gatherer) string {
	var out []string
	for _, reason := range []string{"idle", "owned", "unreadable", "failed"} {
		out = append(out, fmt.Sprintf("%s %v", reason, testutil.Metric(tb, reg, "acp_session_claims_skipped_total", "reason", reason)))
	}
	return strings.Join(out, ", ")
}

// projected counts the sessions in the ACP_SESSIONS projection: those a
// replica's start-up claims list.
func projected(tb testing.TB, js jetstream.JetStream) int {
	kv, err := js.KeyValue(tb.Context(), events.BucketSessions)
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := kv.ListKeys(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	return n
}

// leaseEvents lists reg's owner lease events.
func leaseEvents(tb testing.TB, reg prometheus.Gatherer) string {
	var out []string
	for _, event := range []string{"acquired", "held_elsewhere", "renewed", "renew_failed", "lost", "evicted"} {
		out = append(out, fmt.Sprintf("%s %v", event, testutil.Metric(tb, reg, "acp_session_owner_leases_total", "event", event)))
	}
	return strings.Join(out, ", ")
}
