package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Latency benchmarks of one update's way from the adapter to a reader. The
// test agent stamps each update with the time just before it writes the
// line (_meta.skein.sentAt); a reader subtracts it from the time it got the
// update. Baseline path=stdio: the same updates read straight from the
// agent's stdout, no Skein in between.
//
//	BenchmarkUpdateLatency/path=live,kind=chunk: delta → acp.live subscriber
//	BenchmarkUpdateLatency/path=durable,kind=update: update → acp.tail subscriber (stored)
//	BenchmarkUpdateLatency/path=core,kind=chunk and path=jetstream,kind=update:
//	  the same pace of core publishes, and of JetStream publishes to ACP_LOG's
//	  configuration read on its RePublish: the NATS floor under the two above
//	BenchmarkTurnEnd/updates=1000: the agent's final response → TurnFinished stored and seen

// sentAt extracts _meta.skein.sentAt from an update or response object.
func sentAt(raw []byte) (time.Time, bool) {
	var v struct {
		Meta struct {
			Skein struct {
				SentAt int64 `json:"sentAt"`
			} `json:"skein"`
		} `json:"_meta"`
	}
	if json.Unmarshal(raw, &v) != nil || v.Meta.Skein.SentAt == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, v.Meta.Skein.SentAt), true
}

// samples collects latencies from subscriber goroutines.
type samples struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.lat = append(s.lat, d)
	s.mu.Unlock()
}

// reset forgets the samples so far (a warm-up's).
func (s *samples) reset() {
	s.mu.Lock()
	s.lat = nil
	s.mu.Unlock()
}

func (s *samples) report(b *testing.B) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lat) == 0 {
		b.Fatal("no samples")
	}
	slices.Sort(s.lat)
	b.ReportMetric(float64(s.lat[len(s.lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(s.lat[len(s.lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(s.lat))/float64(b.N), "samples/op")
}

const stampsPerPrompt = 50

func BenchmarkUpdateLatency(b *testing.B) {
	for _, kind := range []string{"chunk", "update"} {
		path := map[string]string{"chunk": "live", "update": "durable"}[kind]
		script := fmt.Sprintf("stamp %d %s 2ms", stampsPerPrompt, kind)
		b.Run(fmt.Sprintf("path=%s,kind=%s", path, kind), func(b *testing.B) {
			ns := natstest.Run(b)
			st := startStackTB(b, ns, b.TempDir())
			base := st.url + "/v1/sessions/lat"
			mustDo(b, http.MethodPut, base, `{"agent":"test"}`)
			nc := natstest.Connect(b, ns)
			var s samples
			subject := events.LiveSubject("default", "lat")
			if kind == "update" {
				subject = events.TailSubject("default", "lat", events.LogEvents)
			}
			sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
				got := time.Now()
				var update []byte
				if kind == "chunk" {
					ev, err := events.Decode[events.AcpEphemeralSessionUpdateEvent](m.Data)
					if err != nil {
						return
					}
					update = ev.Update
				} else {
					e, _, err := eventlog.TailEntry("lat", m)
					if err != nil {
						return
					}
					u, ok := e.Event.V.(*events.AcpDurableSessionUpdate)
					if !ok {
						return
					}
					update = u.Update
				}
				if at, ok := sentAt(update); ok {
					s.add(got.Sub(at))
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe()
			body := promptBody(script)
			mustDo(b, http.MethodPost, base+"/prompt", body) // warm up
			s = samples{}
			for b.Loop() {
				mustDo(b, http.MethodPost, base+"/prompt", body)
			}
			if err := nc.Flush(); err != nil {
				b.Fatal(err)
			}
			s.report(b)
		})
		b.Run(fmt.Sprintf("path=%s,kind=%s", map[string]string{"chunk": "core", "update": "jetstream"}[kind], kind), func(b *testing.B) {
			rawLatency(b, kind)
		})
		b.Run(fmt.Sprintf("path=stdio,kind=%s", kind), func(b *testing.B) {
			var s samples
			conn := startAgent(b, func(m *acpwire.Message) {
				got := time.Now()
				if u, err := acpwire.ParseSessionUpdate(m.Params); err == nil {
					if at, ok := sentAt(u.Update); ok {
						s.add(got.Sub(at))
					}
				}
			})
			sess, err := conn.NewSession(b.Context(), acpwire.NewSessionParams{Cwd: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			prompt := json.RawMessage(promptBody(script))
			var content struct{ Content json.RawMessage }
			_ = json.Unmarshal(prompt, &content)
			for b.Loop() {
				if _, err := conn.Prompt(b.Context(), sess.SessionID, content.Content); err != nil {
					b.Fatal(err)
				}
			}
			s.report(b)
		})
	}
}

// rawLatency is the NATS floor under path=live and path=durable, paced as
// the agent's stamp script is (stampsPerPrompt updates 2 ms apart, 256 B):
// for kind chunk, a core publish to acp.live and a core subscriber; for kind
// update, an async JetStream publish to a stream configured as ACP_LOG is
// (streams.Configs: RePublish included) and a core subscriber of its
// RePublish subject on acp.tail, as a log follower reads it. Each message
// carries its send time in a header.
func rawLatency(b *testing.B, kind string) {
	const sentHeader = "Bench-Sent-At"
	ns := natstest.Run(b)
	nc := natstest.Connect(b, ns)
	pub, sub := events.LiveSubject(events.DefaultNamespace, "lat"), events.LiveSubject(events.DefaultNamespace, "lat")
	var js jetstream.JetStream
	if kind == "update" {
		var err error
		if js, err = jetstream.New(natstest.Connect(b, ns)); err != nil {
			b.Fatal(err)
		}
		if _, err := js.CreateStream(b.Context(), logStreamConfig(b, 1)); err != nil {
			b.Fatal(err)
		}
		pub = events.LogSubject(events.DefaultNamespace, "lat", events.LogEvents)
		sub = events.TailSubject(events.DefaultNamespace, "lat", events.LogEvents)
	}
	var s samples
	received := make(chan struct{}, stampsPerPrompt)
	subscription, err := nc.Subscribe(sub, func(m *nats.Msg) {
		got := time.Now()
		if sent, err := strconv.ParseInt(m.Header.Get(sentHeader), 10, 64); err == nil {
			s.add(got.Sub(time.Unix(0, sent)))
		}
		received <- struct{}{}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer subscription.Unsubscribe()
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for b.Loop() {
		for range stampsPerPrompt {
			<-tick.C
			m := &nats.Msg{Subject: pub, Data: payload, Header: nats.Header{sentHeader: []string{strconv.FormatInt(time.Now().UnixNano(), 10)}}}
			if js != nil {
				if _, err := js.PublishMsgAsync(m); err != nil {
					b.Fatal(err)
				}
			} else if err := nc.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
		}
		for range stampsPerPrompt {
			select {
			case <-received:
			case <-time.After(10 * time.Second):
				b.Fatal("published messages not received")
			}
		}
	}
	s.report(b)
}

// startAgent runs the test agent on stdio and initializes it: this test
// binary, as the in-process stacks run it, so that the baselines measure
// the same agent.
func startAgent(b *testing.B, onNotification func(*acpwire.Message)) *acpwire.Conn {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.CommandContext(b.Context(), exe, testAgentCommand)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	conn := acpwire.NewConn(stdout, stdin, acpwire.Options{OnNotification: onNotification})
	if _, err := conn.Initialize(b.Context(), acpwire.InitializeParams{}); err != nil {
		b.Fatal(err)
	}
	return conn
}

func BenchmarkTurnEnd(b *testing.B) {
	const updates = 1000
	script := fmt.Sprintf("flood %d 200\nstampend", updates)
	b.Run(fmt.Sprintf("path=session,updates=%d", updates), func(b *testing.B) {
		ns := natstest.Run(b)
		st := startStackTB(b, ns, b.TempDir())
		base := st.url + "/v1/sessions/end"
		mustDo(b, http.MethodPut, base, `{"agent":"test"}`)
		nc := natstest.Connect(b, ns)
		// The agent's response reaches the session through ACP_IO; its
		// stamp says when the agent wrote it. Both subjects feed one
		// channel, read by this goroutine in the order they arrived: a
		// turn's response comes before its TurnFinished.
		arrivals := make(chan *nats.Msg, 16384)
		for _, subject := range []string{events.IOTailSubject("default", "end"), events.TailSubject("default", "end", events.LogControl)} {
			sub, err := nc.ChanSubscribe(subject, arrivals)
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe()
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		var responseAt time.Time
		// finished waits for the TurnFinished of the turn just run and
		// returns how long after the agent's response it arrived.
		finished := func() time.Duration {
			timeout := time.NewTimer(30 * time.Second)
			defer timeout.Stop()
			for {
				select {
				case m := <-arrivals:
					got := time.Now()
					if m.Subject != events.TailSubject("default", "end", events.LogControl) {
						if r, err := events.Decode[events.AdapterPromptResult](m.Data); err == nil {
							if at, ok := sentAt(json.RawMessage(r.Result)); ok {
								responseAt = at
							}
						}
						continue
					}
					if m.Header.Get(events.HeaderRecord) == events.RecordTurnFinished && !responseAt.IsZero() {
						d := got.Sub(responseAt)
						responseAt = time.Time{}
						return d
					}
				case <-timeout.C:
					b.Fatal("no TurnFinished after the agent's response within 30 s")
				}
			}
		}
		body := promptBody(script)
		mustDo(b, http.MethodPost, base+"/prompt", body)
		finished()
		var s samples
		for b.Loop() {
			mustDo(b, http.MethodPost, base+"/prompt", body)
			s.add(finished())
		}
		s.report(b)
	})
	b.Run(fmt.Sprintf("path=stdio,updates=%d", updates), func(b *testing.B) {
		conn := startAgent(b, nil)
		sess, err := conn.NewSession(b.Context(), acpwire.NewSessionParams{Cwd: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		var content struct{ Content json.RawMessage }
		_ = json.Unmarshal([]byte(promptBody(script)), &content)
		var s samples
		for b.Loop() {
			res, err := conn.Prompt(b.Context(), sess.SessionID, content.Content)
			if err != nil {
				b.Fatal(err)
			}
			if at, ok := sentAt(res.Raw); ok {
				s.add(time.Since(at))
			}
		}
		s.report(b)
	})
}
