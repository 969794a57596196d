package test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
)

// Benchmarks of the whole path, each beside its baseline in the same run:
//
//	BenchmarkDurableUpdates/path=session: an agent writes N updates of a given
//	size; each goes runner → ACP_IO → session → ACP_LOG (compare-and-set
//	appends: pipelined on one replica, grouped in atomic batches on three;
//	see session/append.go). Baseline path=raw: N JetStream async publishes
//	of the same payload size to one subject of a stream configured as
//	ACP_LOG is (streams.Configs: RePublish, replicas, storage,
//	limits alike). Both on replicas=1 (one embedded server, in-process
//	connections, as skein dev runs) and replicas=3 (a three-server cluster
//	in this process, every connection to one node over loopback TCP, as
//	clients of a cluster connect), so the session-to-raw ratio at each
//	replica count is the implementation's cost, and raw at 3 beside raw at
//	1 what replication costs (loopback TCP included).
//
//	BenchmarkPromptRoundTrip/via=nats|http: one prompt the test agent answers
//	at once, through the whole stack. Baseline via=stdio: the same prompt to
//	the same agent binary over its stdio, no Skein in between. via=http,auth=on
//	is via=http with a bearer token checked on every request (skein dev's
//	setup); its baseline is via=http, where the gateway has no tokens.

// updateScript returns a test-agent script that writes n durable updates
// whose JSON is about size bytes.
func updateScript(n, size int) string {
	return fmt.Sprintf("flood %d %d", n, max(size-40, 0))
}

func promptBody(text string) string {
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	return string(b)
}

func BenchmarkDurableUpdates(b *testing.B) {
	const perPrompt = 500
	for _, replicas := range []int{1, 3} {
		for _, size := range []int{256, 1024} {
			for _, sessions := range []int{1, 4} {
				b.Run(fmt.Sprintf("path=session,replicas=%d,size=%d,sessions=%d", replicas, size, sessions), func(b *testing.B) {
					ns := benchServer(b, replicas)
					provisionBench(b, ns, replicas)
					st := startStackTB(b, ns, b.TempDir(), func(c *stackConfig) { c.Replicas = replicas })
					checkLogStream(b, ns, replicas)
					body := promptBody(updateScript(perPrompt, size))
					bases := make([]string, sessions)
					for i := range bases {
						bases[i] = fmt.Sprintf("%s/v1/sessions/bench%d", st.url, i)
						mustDo(b, http.MethodPut, bases[i], `{"agent":"test"}`)
						mustDo(b, http.MethodPost, bases[i]+"/prompt", body) // warm up
					}
					start := time.Now()
					for b.Loop() {
						var wg sync.WaitGroup
						for _, base := range bases {
							wg.Go(func() { mustDo(b, http.MethodPost, base+"/prompt", body) })
						}
						wg.Wait()
					}
					b.ReportMetric(float64(perPrompt*sessions*b.N)/time.Since(start).Seconds(), "updates/s")
					b.SetBytes(int64(size * perPrompt * sessions))
				})
			}
			b.Run(fmt.Sprintf("path=raw,replicas=%d,size=%d", replicas, size), func(b *testing.B) {
				js, err := jetstream.New(natstest.Connect(b, benchServer(b, replicas)))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := js.CreateStream(b.Context(), logStreamConfig(b, replicas)); err != nil {
					b.Fatal(err)
				}
				subject := events.LogSubject(events.DefaultNamespace, "bench", events.LogEvents)
				payload := make([]byte, size)
				start := time.Now()
				for b.Loop() {
					for range perPrompt {
						if _, err := js.PublishAsync(subject, payload); err != nil {
							b.Fatal(err)
						}
					}
					select {
					case <-js.PublishAsyncComplete():
					case <-time.After(30 * time.Second):
						b.Fatal("async publishes not acknowledged")
					}
				}
				b.ReportMetric(float64(perPrompt*b.N)/time.Since(start).Seconds(), "updates/s")
				b.SetBytes(int64(size * perPrompt))
			})
		}
	}
}

// benchServer returns the server a benchmark's clients connect to: one
// embedded server for one replica, else a node of a cluster of replicas
// servers.
func benchServer(b *testing.B, replicas int) *server.Server {
	if replicas == 1 {
		return natstest.Run(b)
	}
	return natstest.RunCluster(b, replicas)[0]
}

// provisionBench creates Skein's streams and buckets on ns at the given
// replicas, as `skein provision` does before a cluster's services start.
// The services would create them otherwise, all at once: on a fresh R3
// cluster, one of them can then read a stream another is still creating,
// before its Raft group has a leader, and fail to start (a bucket not
// found, or a stream info that times out).
func provisionBench(b *testing.B, ns *server.Server, replicas int) {
	js, err := jetstream.New(natstest.Connect(b, ns))
	if err != nil {
		b.Fatal(err)
	}
	if err := streams.Provision(b.Context(), js, streams.Options{Replicas: replicas}, true); err != nil {
		b.Fatalf("provision R%d: %v", replicas, err)
	}
}

// checkLogStream fails b unless the ACP_LOG the stack provisioned on ns has
// the replicas and RePublish of the raw baseline's stream.
func checkLogStream(b *testing.B, ns *server.Server, replicas int) {
	js, err := jetstream.New(natstest.Connect(b, ns))
	if err != nil {
		b.Fatal(err)
	}
	s, err := js.Stream(b.Context(), events.StreamLog)
	if err != nil {
		b.Fatal(err)
	}
	got, want := s.CachedInfo().Config, logStreamConfig(b, replicas)
	if got.Replicas != want.Replicas || got.Storage != want.Storage || got.RePublish == nil || *got.RePublish != *want.RePublish {
		b.Fatalf("%s: replicas %d, storage %v, republish %+v; want %d, %v, %+v", events.StreamLog, got.Replicas, got.Storage, got.RePublish, want.Replicas, want.Storage, want.RePublish)
	}
}

// logStreamConfig returns ACP_LOG's configuration at the given replicas,
// as the session service provisions it.
func logStreamConfig(b *testing.B, replicas int) jetstream.StreamConfig {
	for _, cfg := range streams.Configs(streams.Options{Replicas: replicas}) {
		if cfg.Name == events.StreamLog {
			return cfg
		}
	}
	b.Fatalf("streams.Configs has no %s", events.StreamLog)
	return jetstream.StreamConfig{}
}

func BenchmarkPromptRoundTrip(b *testing.B) {
	const script = "say hi"
	b.Run("via=http", func(b *testing.B) {
		st := startStackTB(b, natstest.Run(b), b.TempDir(), unlimited)
		base := st.url + "/v1/sessions/rt"
		mustDo(b, http.MethodPut, base, `{"agent":"test"}`)
		body := promptBody(script)
		measure(b, func() { mustDo(b, http.MethodPost, base+"/prompt", body) })
	})
	b.Run("via=http,auth=on", func(b *testing.B) {
		const token = "bench-token"
		st := startStackTB(b, natstest.Run(b), b.TempDir(), unlimited, func(c *stackConfig) { c.Gateway.Auth.Tokens = devTokens(token) })
		base := st.url + "/v1/sessions/rt"
		mustDoToken(b, token, http.MethodPut, base, `{"agent":"test"}`)
		body := promptBody(script)
		measure(b, func() { mustDoToken(b, token, http.MethodPost, base+"/prompt", body) })
	})
	b.Run("via=nats", func(b *testing.B) {
		ns := natstest.Run(b)
		st := startStackTB(b, ns, b.TempDir())
		mustDo(b, http.MethodPut, st.url+"/v1/sessions/rt", `{"agent":"test"}`)
		nc := natstest.Connect(b, ns)
		sid := "rt"
		req := &events.AcpPromptRequest{SessionID: &sid, Content: events.JSON(`[{"type":"text","text":"` + script + `"}]`)}
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		// The Go caller's way: accepted, then the turn's end read from the
		// log (turnwait.Prompt).
		measure(b, func() {
			if _, err := turnwait.Prompt(b.Context(), js, events.DefaultNamespace, req); err != nil {
				b.Fatal(err)
			}
		})
	})
	// The floor under via=nats: one core NATS request and its reply, the
	// same prompt request's bytes each way, through the same embedded
	// server and a responder that answers at once.
	b.Run("via=core-request", func(b *testing.B) {
		ns := natstest.Run(b)
		sid := "rt"
		body, err := events.Marshal(&events.AcpPromptRequest{SessionID: &sid, Content: events.JSON(`[{"type":"text","text":"` + script + `"}]`)})
		if err != nil {
			b.Fatal(err)
		}
		subject := events.APISubject(events.DefaultNamespace, events.OpPrompt)
		sub, err := natstest.Connect(b, ns).Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(m.Data) })
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Unsubscribe()
		nc := natstest.Connect(b, ns)
		measure(b, func() {
			if _, err := nc.Request(subject, body, 10*time.Second); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("via=stdio", func(b *testing.B) {
		conn := startAgent(b, nil)
		ctx := b.Context()
		sess, err := conn.NewSession(ctx, acpwire.NewSessionParams{Cwd: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		prompt := json.RawMessage(`[{"type":"text","text":"` + script + `"}]`)
		measure(b, func() {
			if _, err := conn.Prompt(ctx, sess.SessionID, prompt); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// measure runs op in b.Loop and reports the p50 and p99 latency.
func measure(b *testing.B, op func()) {
	op() // warm up
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		op()
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// unlimited lifts the gateway's rate limit: a benchmark measures a
// request's latency, and makes more of them a second than a client may.
func unlimited(c *stackConfig) {
	c.Gateway.RateLimit, c.Gateway.RateBurst = math.MaxFloat64, math.MaxInt32
}

// mustDoToken is mustDo with a bearer token.
func mustDoToken(tb testing.TB, token, method, url, body string) {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("%s %s = %d %s", method, url, resp.StatusCode, out)
	}
}

func mustDo(tb testing.TB, method, url, body string) {
	tb.Helper()
	if err := httpDo(tb.Context(), http.DefaultClient, method, url, body); err != nil {
		tb.Fatal(err)
	}
}
