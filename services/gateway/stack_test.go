package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/history"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// The gateway is tested in front of the real services: the session
// service, the history service and an adapter-runner whose agents are the
// test agent (testagent), each on its own connection to one embedded NATS
// server, as in production. The gateway module imports them in its tests
// only; TestServicesMeetOnlyOnNATS keeps its production code free of them.

// testAgent is the test agent's binary, built once by TestMain.
var testAgent string

// stack is the services behind a gateway.
type stack struct {
	t       testing.TB
	srv     *server.Server
	nc      *nats.Conn // the test's own connection
	js      jetstream.JetStream
	control string // the test agent's pause and release files
	// workspace is the runner's workspace root, where sessions may work.
	workspace string
	obs       *observer

	stopHistory func()
	stops       []func() // every service's, in the order they started
}

type stackOptions struct {
	// maxEvents bounds the records ACP_LOG keeps per subject (0: the
	// default).
	maxEvents int64
	// agentArgs are extra flags of the agent "demo".
	agentArgs []string
}

// The agents every runner of a stack offers. "demo" is the test agent with
// config options, resume and load; "plain" is it with none of them.
func (s *stack) agents(o stackOptions, stateDir string) []adapterrunner.Agent {
	env := map[string]string{testagent.EnvControlDir: s.control}
	demo := append([]string{"--config-options=mode,model", "--resume", "--load-session", "--close", "--state-dir", stateDir}, o.agentArgs...)
	// Out of order: list_agents sorts them.
	return []adapterrunner.Agent{
		{ID: "plain", Command: testAgent, Env: env},
		{ID: "demo", Command: testAgent, Args: demo, Env: env, AllowEnv: []string{"A", "B"}},
	}
}

// startStack runs the services on srv, or on a fresh server when srv is
// nil, until the test ends.
func startStack(t testing.TB, srv *server.Server, o stackOptions) *stack {
	t.Helper()
	if srv == nil {
		srv = natstest.Run(t)
	}
	s := &stack{t: t, srv: srv, nc: natstest.Connect(t, srv, nats.Timeout(connectTimeout)), control: t.TempDir()}
	var err error
	if s.js, err = jetstream.New(s.nc); err != nil {
		t.Fatal(err)
	}
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The observer subscribes before any service serves, so that it sees
	// every request.
	s.obs = observe(t, s.nc)

	dataDir := t.TempDir()
	s.workspace = filepath.Join(dataDir, "workspaces")
	runner, err := adapterrunner.New(adapterrunner.Config{
		ID: "r1", DataDir: dataDir, StopGrace: 200 * time.Millisecond,
		Builtin: s.agents(o, t.TempDir()),
	}, lg, s.connect(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s.stops = append(s.stops, runService(t, "runner", runner))
	svc, err := session.New(session.Config{
		// A test that ends with a turn still open must not wait 5 s.
		DrainWait:           200 * time.Millisecond,
		MaxEventsPerSession: o.maxEvents,
	}, lg, s.connect(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s.stops = append(s.stops, runService(t, "session", svc))
	hist, err := history.New(history.Config{}, lg, s.connect(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s.stopHistory = runService(t, "history", hist)
	s.stops = append(s.stops, s.stopHistory)
	return s
}

// stop stops every service, the last started first. A test that replaces
// the NATS server registers it as a cleanup after the new server's, so
// that the services stop while they can still reach NATS.
func (s *stack) stop() {
	for _, stop := range slices.Backward(s.stops) {
		stop()
	}
}

// connectTimeout bounds a connection's handshake, in-process included:
// the default 2 s is not enough on a loaded machine that runs the race
// detector and five connections per test.
const connectTimeout = 20 * time.Second

// connect opens a service's connection, which reconnects at once and for
// ever (a test may restart the server).
func (s *stack) connect() *nats.Conn {
	return natstest.Connect(s.t, s.srv, nats.Timeout(connectTimeout), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
}

// runService runs svc until the test ends or the returned stop is called.
func runService(t testing.TB, name string, svc interface {
	Run(context.Context) error
	Ready() <-chan struct{}
}) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-svc.Ready():
	case err := <-done:
		t.Fatalf("%s stopped before ready: %v", name, err)
	}
	return stop
}

// stopRunner stops the runner: its agents go with its heartbeat.
func (s *stack) stopRunner() { s.stops[0]() }

// StopHistory stops the history service: its ops then find no responder.
// The observer stops listening first, for its interest would turn "no
// responder" into a timeout.
func (s *stack) StopHistory() {
	s.obs.stop()
	s.stopHistory()
}

// open, startTurn, awaitTurn, turn, say and eventsFrom are openIn, ...,
// in the default namespace.
func (s *stack) open(sid events.SessionID, agent string) { s.t.Helper(); s.openIn(ns, sid, agent) }
func (s *stack) startTurn(sid events.SessionID, key *string, script string) *events.PromptAccepted {
	s.t.Helper()
	return s.startTurnIn(ns, sid, key, script)
}
func (s *stack) awaitTurn(sid events.SessionID, acc *events.PromptAccepted) *events.TurnFinished {
	s.t.Helper()
	return s.awaitTurnIn(ns, sid, acc)
}
func (s *stack) turn(sid events.SessionID, script string) []uint64 {
	s.t.Helper()
	return s.turnIn(ns, sid, script)
}
func (s *stack) say(sid events.SessionID, texts ...string) []uint64 {
	s.t.Helper()
	return s.sayIn(ns, sid, texts...)
}
func (s *stack) eventsFrom(sid events.SessionID, seq uint64) []uint64 {
	s.t.Helper()
	return s.eventsFromIn(ns, sid, seq)
}

// openIn opens sid of namespace n with agent through open_session.
func (s *stack) openIn(n events.Namespace, sid events.SessionID, agent string) {
	s.t.Helper()
	id := string(sid)
	if _, err := events.Call[events.AcpOpenSessionResponse](s.t.Context(), s.nc, events.APISubject(n, events.OpOpenSession),
		&events.AcpOpenSessionRequest{SessionID: &id, Agent: agent}, nil); err != nil {
		s.t.Fatalf("open %s: %v", sid, err)
	}
}

// startTurn sends script as a prompt and returns its acceptance.
func (s *stack) startTurnIn(n events.Namespace, sid events.SessionID, key *string, script string) *events.PromptAccepted {
	s.t.Helper()
	id := string(sid)
	acc, err := events.Call[events.PromptAccepted](s.t.Context(), s.nc, events.APISubject(n, events.OpPrompt),
		&events.AcpPromptRequest{SessionID: &id, IdempotencyKey: key, Content: textContent(script)}, nil)
	if err != nil {
		s.t.Fatalf("prompt %s: %v", sid, err)
	}
	return acc
}

// awaitTurn waits for the turn's TurnFinished.
func (s *stack) awaitTurnIn(n events.Namespace, sid events.SessionID, acc *events.PromptAccepted) *events.TurnFinished {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), time.Minute)
	defer cancel()
	f, err := eventlog.AwaitTurn(ctx, s.js, n, sid, acc)
	if err != nil {
		s.t.Fatalf("await turn %s: %v", acc.TurnID, err)
	}
	return f
}

// turn runs script as one turn to its end and returns the sequences of
// the public events it stored, its accepting user message first.
func (s *stack) turnIn(n events.Namespace, sid events.SessionID, script string) []uint64 {
	s.t.Helper()
	acc := s.startTurnIn(n, sid, nil, script)
	s.awaitTurnIn(n, sid, acc)
	return s.eventsFromIn(n, sid, acc.Sequence)
}

// say runs a turn that stores one agent message per text and returns the
// sequences of its public events: the user message that started it, then
// the messages.
func (s *stack) sayIn(n events.Namespace, sid events.SessionID, texts ...string) []uint64 {
	s.t.Helper()
	lines := make([]string, 0, 2*len(texts))
	for _, text := range texts {
		lines = append(lines, "message", "say "+strconv.Quote(text))
	}
	seqs := s.turnIn(n, sid, strings.Join(lines, "\n"))
	if len(seqs) != 1+len(texts) {
		s.t.Fatalf("turn %q stored events %v, want the user message and %d messages", texts, seqs, len(texts))
	}
	return seqs
}

// eventsFrom returns the sequences of sid's public events from seq on.
func (s *stack) eventsFromIn(n events.Namespace, sid events.SessionID, seq uint64) []uint64 {
	s.t.Helper()
	var seqs []uint64
	for rec, err := range eventlog.Replay(s.t.Context(), s.js, events.StreamLog, events.LogSubject(n, sid, events.LogEvents), seq-1) {
		if err != nil {
			s.t.Fatalf("read the log of %s: %v", sid, err)
		}
		seqs = append(seqs, rec.Sequence)
	}
	return seqs
}

// last returns the sequence of sid's newest record of any kind.
func (s *stack) last(sid events.SessionID) uint64 {
	s.t.Helper()
	rec, err := eventlog.Last(s.t.Context(), s.js, events.StreamLog, events.LogFilter(ns, sid))
	if err != nil || rec == nil {
		s.t.Fatalf("the last record of %s: %v, %v", sid, rec, err)
	}
	return rec.Sequence
}

// meta returns sid's ACP_SESSIONS projection as the session service
// wrote it.
func (s *stack) meta(sid events.SessionID) *events.SessionMeta {
	s.t.Helper()
	kv, err := s.js.KeyValue(s.t.Context(), events.BucketSessions)
	if err != nil {
		s.t.Fatal(err)
	}
	e, err := kv.Get(s.t.Context(), events.SessionKey(ns, sid))
	if err != nil {
		s.t.Fatalf("the projection of %s: %v", sid, err)
	}
	m, err := events.Decode[events.SessionMeta](e.Value())
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

// state returns sid's projected state: idle, running or waiting.
func (s *stack) state(sid events.SessionID) *events.SessionState {
	s.t.Helper()
	st, err := events.ParseSessionState(s.meta(sid).Info.State)
	if err != nil {
		s.t.Fatalf("state of %s: %v", sid, err)
	}
	return st
}

// paused waits until the test agent stands at the pause point name.
func (s *stack) paused(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), time.Minute)
	defer cancel()
	if err := testagent.WaitPaused(ctx, s.control, name); err != nil {
		s.t.Fatalf("pause %s: %v", name, err)
	}
}

// release lets the test agent go on from the pause point name.
func (s *stack) release(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), time.Minute)
	defer cancel()
	if err := testagent.Release(ctx, s.control, name); err != nil {
		s.t.Fatal(err)
	}
}

// WithoutTail runs fn while ACP_LOG republishes nothing: records appended
// meanwhile are stored, and history has them, but no live viewer sees them
// arrive, as when core NATS drops messages. The next record that is
// republished names the last one as its predecessor (Nats-Last-Sequence),
// which is how a viewer finds the gap.
func (s *stack) WithoutTail(fn func()) {
	s.t.Helper()
	ctx := s.t.Context()
	st, err := s.js.Stream(ctx, events.StreamLog)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	quiet := cfg
	quiet.RePublish = nil
	if _, err := s.js.UpdateStream(ctx, quiet); err != nil {
		s.t.Fatalf("stop republishing: %v", err)
	}
	defer func() {
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			s.t.Fatalf("republish again: %v", err)
		}
	}()
	fn()
}

// Calls returns how many requests for op reached NATS so far.
func (s *stack) Calls(op events.Op) int { return s.obs.calls(op) }

// LastRequest returns the last request for op that decoded, or nil.
func (s *stack) LastRequest(op events.Op) events.Variant { return s.obs.lastRequest(op) }

// observer counts the requests of the API by op, from a plain
// subscription beside the services' (which never answers).
type observer struct {
	nc  *nats.Conn
	sub *nats.Subscription

	mu   sync.Mutex
	n    map[events.Op]int
	last map[events.Op]events.Variant
}

func observe(t testing.TB, nc *nats.Conn) *observer {
	t.Helper()
	o := &observer{nc: nc, n: map[events.Op]int{}, last: map[events.Op]events.Variant{}}
	var err error
	if o.sub, err = nc.SubscribeSync(events.APIWildcard("*")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.stop)
	return o
}

// drain takes in every request the server delivered before it: the flush
// makes them pending on the subscription.
func (o *observer) drain() {
	if !o.sub.IsValid() || o.nc.Flush() != nil {
		return
	}
	for {
		if n, _, _ := o.sub.Pending(); n == 0 {
			return
		}
		m, err := o.sub.NextMsg(time.Second)
		if err != nil {
			return
		}
		op := events.Op(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		v, err := events.Unmarshal(m.Data)
		o.mu.Lock()
		o.n[op]++
		if err == nil {
			o.last[op] = v
		}
		o.mu.Unlock()
	}
}

func (o *observer) stop() {
	o.drain()
	_ = o.sub.Unsubscribe() // the connection may be closed already
}

func (o *observer) calls(op events.Op) int {
	o.drain()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[op]
}

func (o *observer) lastRequest(op events.Op) events.Variant {
	o.drain()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last[op]
}

// textContent is a prompt's content: one text block.
func textContent(text string) events.JSON {
	b, err := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	if err != nil {
		panic(err)
	}
	return events.JSON(b)
}

// TextChunk returns a session update of kind (agent_message_chunk,
// user_message_chunk, ...) carrying one text block, in the field order of
// the test agent's updates.
func TextChunk(kind, text string) string {
	k, _ := json.Marshal(kind) // a string always encodes
	v, _ := json.Marshal(text)
	return `{"sessionUpdate":` + string(k) + `,"content":{"type":"text","text":` + string(v) + `}}`
}

// publishDelta publishes a live delta carrying text after the durable
// sequence after, on sid's live subject, as the session service does. The
// tests use it for the deltas a live session sends only by chance: one
// that arrives after a durable event it precedes, or after a record the
// service would not name.
func (s *stack) publishDelta(sid events.SessionID, after uint64, text string) {
	s.t.Helper()
	data, err := events.Marshal(&events.AcpEphemeralSessionUpdateEvent{SessionID: string(sid), AfterSequence: after,
		Update: events.JSON(TextChunk("agent_message_chunk", text))})
	if err != nil {
		s.t.Fatal(err)
	}
	msg := nats.NewMsg(events.LiveSubject(ns, sid))
	msg.Data = data
	msg.Header.Set(events.HeaderAfterSequence, strconv.FormatUint(after, 10))
	if err := s.nc.PublishMsg(msg); err != nil {
		s.t.Fatal(err)
	}
}

// appendCorrupt stores a public event of sid whose payload does not
// decode, as a broken writer might, and returns its sequence: every
// history read that reaches it fails (invalid_payload, which the gateway
// masks as internal). The session service must not write to sid again:
// the record is not its own.
func (s *stack) appendCorrupt(sid events.SessionID) uint64 {
	s.t.Helper()
	msg := nats.NewMsg(events.LogSubject(ns, sid, events.LogEvents))
	msg.Data = []byte("not msgpack")
	msg.Header.Set(events.HeaderRecord, events.AcpDurableSessionUpdate{}.VariantName())
	msg.Header.Set(events.HeaderEventNo, "1000")
	ack, err := s.js.PublishMsg(s.t.Context(), msg)
	if err != nil {
		s.t.Fatalf("append a corrupt record to %s: %v", sid, err)
	}
	return ack.Sequence
}

// stored waits until the turn accepted at acc has stored n public events
// and returns their sequences.
func (s *stack) stored(sid events.SessionID, acc uint64, n int) []uint64 {
	s.t.Helper()
	var seqs []uint64
	testutil.Eventually(s.t, "the turn's events", func() bool {
		seqs = s.eventsFrom(sid, acc)
		return len(seqs) >= n
	})
	return seqs
}

// answerWith serves op for every namespace on nc, answering every request
// with answer (an error, or a reply), until the test ends or stop is called. It stands in for a
// service where the gateway's mapping of an error the real services never
// send is tested.
func answerWith(t testing.TB, nc *nats.Conn, op events.Op, answer any) (stop func()) {
	t.Helper()
	svc, serr := micro.AddService(nc, micro.Config{Name: "failing", Version: "0.0.1"})
	if serr != nil {
		t.Fatal(serr)
	}
	stop = func() { _ = svc.Stop() } // stopping twice is harmless
	t.Cleanup(stop)
	handler := micro.HandlerFunc(func(req micro.Request) {
		switch a := answer.(type) {
		case error:
			_ = events.RespondError(req, a)
		case events.Variant:
			_ = events.Respond(req, a)
		default:
			t.Errorf("answerWith(%s): %T is neither an error nor a reply", op, answer)
		}
	})
	if serr := svc.AddEndpoint(string(op), handler, micro.WithEndpointSubject(events.APIWildcard(op))); serr != nil {
		t.Fatal(serr)
	}
	return stop
}

// workDir makes the directory name in the default namespace's directory of
// the runner's workspace root, where its sessions may work, and returns
// its path.
func (s *stack) workDir(name string) string {
	s.t.Helper()
	dir := filepath.Join(s.workspace, string(events.DefaultNamespace), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	return dir
}

// unloaded reports whether sid's adapter was unloaded after it was last
// attached, as the session's lifecycle records say.
func (s *stack) unloaded(sid events.SessionID) bool {
	s.t.Helper()
	var last string
	for rec, err := range eventlog.Replay(s.t.Context(), s.js, events.StreamLog, events.LogSubject(ns, sid, events.LogControl), 0) {
		if err != nil {
			s.t.Fatalf("read the log of %s: %v", sid, err)
		}
		switch r := rec.Header.Get(events.HeaderRecord); r {
		case events.RecordAdapterAttached, events.RecordSessionUnloaded:
			last = r
		}
	}
	return last == events.RecordSessionUnloaded
}

// exists reports whether the session service keeps a projection of sid in
// namespace n.
func (s *stack) exists(n events.Namespace, sid events.SessionID) bool {
	s.t.Helper()
	kv, err := s.js.KeyValue(s.t.Context(), events.BucketSessions)
	if err != nil {
		s.t.Fatal(err)
	}
	_, err = kv.Get(s.t.Context(), events.SessionKey(n, sid))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		s.t.Fatalf("the projection of %s: %v", sid, err)
	}
	return err == nil
}
