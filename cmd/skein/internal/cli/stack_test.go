package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
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
	"skein.dev/services/gateway"
	"skein.dev/services/history"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// The commands are tested against a real gateway, served over HTTP, in
// front of the real session, history and adapter-runner services on an
// embedded NATS server, with the test agent (testagent) as the agents.

// testAgentArg makes this test binary run the test agent (see TestMain),
// so that the runner can start it as an ordinary process.
const testAgentArg = "testagent"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == testAgentArg {
		os.Exit(testagent.Main(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	}
	testutil.Main(m, nil)
}

const ns = events.DefaultNamespace

// env is the gateway and the services behind it.
type env struct {
	t   *testing.T
	url string
	nc  *nats.Conn // the test's own connection
	js  jetstream.JetStream
	obs *observer
	// control is the test agent's directory of pause and release files.
	control string
	// exe is the test agent's command: this test binary.
	exe string
	// workspace is the runner's workspace root.
	workspace string

	stopHistory func()
}

type envOptions struct {
	// noBackend runs the gateway alone: a test serves the ops it needs
	// with answerWith.
	noBackend bool
	// maxEvents bounds the records ACP_LOG keeps per subject (0: the
	// default).
	maxEvents int64
	// tokens, when set, are the gateway's bearer tokens.
	tokens []gateway.Token
}

// newEnv starts the services and a gateway in front of them until the
// test ends.
func newEnv(t *testing.T, opts ...func(*envOptions)) *env {
	t.Helper()
	var o envOptions
	for _, opt := range opts {
		opt(&o)
	}
	srv := natstest.Run(t)
	e := &env{t: t, nc: natstest.Connect(t, srv), control: t.TempDir()}
	var err error
	if e.js, err = jetstream.New(e.nc); err != nil {
		t.Fatal(err)
	}
	if e.exe, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	// The observer subscribes before any service serves, so that it sees
	// every request.
	e.obs = observe(t, e.nc)
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if !o.noBackend {
		e.startServices(srv, lg, o)
	}
	cfg := gateway.DefaultConfig()
	cfg.Auth.Tokens = o.tokens
	gw, err := gateway.New(cfg, lg, natstest.Connect(t, srv), nil)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	hs := httptest.NewServer(gw.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

func withoutBackend(o *envOptions)            { o.noBackend = true }
func withMaxEvents(n int64) func(*envOptions) { return func(o *envOptions) { o.maxEvents = n } }
func withTokens(tokens ...gateway.Token) func(*envOptions) {
	return func(o *envOptions) { o.tokens = tokens }
}

// startServices runs the runner, session and history services, each on
// its own connection, as in production. The runner offers "demo", the
// test agent with config options, resume, load and close; "plain", the
// test agent with none of them; and "other", whose command is not
// installed.
func (e *env) startServices(srv *server.Server, lg *slog.Logger, o envOptions) {
	t := e.t
	agentEnv := map[string]string{testagent.EnvControlDir: e.control}
	dataDir := t.TempDir()
	e.workspace = filepath.Join(dataDir, "workspaces")
	runner, err := adapterrunner.New(adapterrunner.Config{
		ID: "r1", DataDir: dataDir, StopGrace: 200 * time.Millisecond,
		Builtin: []adapterrunner.Agent{
			{ID: "demo", Command: e.exe, Env: agentEnv, Args: []string{testAgentArg,
				"--config-options=mode,model", "--resume", "--load-session", "--close", "--state-dir", t.TempDir()}},
			{ID: "plain", Command: e.exe, Env: agentEnv, Args: []string{testAgentArg}},
			{ID: "other", Command: "skein-no-such-agent"},
		},
	}, lg, natstest.Connect(t, srv), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	runService(t, "runner", runner)
	svc, err := session.New(session.Config{
		// A test that ends with a turn still open must not wait 5 s.
		DrainWait:           200 * time.Millisecond,
		MaxEventsPerSession: o.maxEvents,
	}, lg, natstest.Connect(t, srv), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	runService(t, "session", svc)
	hist, err := history.New(history.Config{}, lg, natstest.Connect(t, srv), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e.stopHistory = runService(t, "history", hist)
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

// StopHistory stops the history service: its ops then find no responder.
// The observer stops listening first, for its interest would turn "no
// responder" into a timeout.
func (e *env) StopHistory() {
	e.obs.stop()
	e.stopHistory()
}

// open opens sid with agent through the CLI.
func (e *env) open(sid, agent string, args ...string) {
	e.t.Helper()
	if r := e.run(e.t.Context(), "", append([]string{"open", "-s", sid, "--agent", agent}, args...)...); r.err != nil {
		e.t.Fatalf("open %s: %v\nstderr: %s", sid, r.err, r.stderr)
	}
}

// turn runs script as one turn of sid to its end, over NATS.
func (e *env) turn(sid events.SessionID, script string) {
	e.t.Helper()
	id := string(sid)
	content, err := json.Marshal([]map[string]string{{"type": "text", "text": script}})
	if err != nil {
		e.t.Fatal(err)
	}
	acc, err := events.Call[events.PromptAccepted](e.t.Context(), e.nc, events.APISubject(ns, events.OpPrompt),
		&events.AcpPromptRequest{SessionID: &id, Content: events.JSON(content)}, nil)
	if err != nil {
		e.t.Fatalf("prompt %s: %v", sid, err)
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	if _, err := eventlog.AwaitTurn(ctx, e.js, ns, sid, acc); err != nil {
		e.t.Fatalf("await turn %s: %v", acc.TurnID, err)
	}
}

// paused waits until the test agent stands at the pause point name.
func (e *env) paused(name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	if err := testagent.WaitPaused(ctx, e.control, name); err != nil {
		e.t.Fatalf("pause %s: %v", name, err)
	}
}

// release lets the test agent go on from the pause point name.
func (e *env) release(name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	if err := testagent.Release(ctx, e.control, name); err != nil {
		e.t.Fatal(err)
	}
}

// eventsOf returns the sequences of sid's public events.
func (e *env) eventsOf(sid events.SessionID) []uint64 {
	e.t.Helper()
	var seqs []uint64
	for rec, err := range eventlog.Replay(e.t.Context(), e.js, events.StreamLog, events.LogSubject(ns, sid, events.LogEvents), 0) {
		if err != nil {
			e.t.Fatalf("read the log of %s: %v", sid, err)
		}
		seqs = append(seqs, rec.Sequence)
	}
	return seqs
}

// unloaded reports whether sid's adapter was unloaded after it was last
// attached, as the session's lifecycle records say.
func (e *env) unloaded(sid events.SessionID) bool {
	e.t.Helper()
	var last string
	for rec, err := range eventlog.Replay(e.t.Context(), e.js, events.StreamLog, events.LogSubject(ns, sid, events.LogControl), 0) {
		if err != nil {
			e.t.Fatalf("read the log of %s: %v", sid, err)
		}
		switch r := rec.Header.Get(events.HeaderRecord); r {
		case events.RecordAdapterAttached, events.RecordSessionUnloaded:
			last = r
		}
	}
	return last == events.RecordSessionUnloaded
}

// exists reports whether the session service keeps a projection of sid.
func (e *env) exists(sid events.SessionID) bool {
	e.t.Helper()
	kv, err := e.js.KeyValue(e.t.Context(), events.BucketSessions)
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = kv.Get(e.t.Context(), events.SessionKey(ns, sid))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		e.t.Fatalf("the projection of %s: %v", sid, err)
	}
	return err == nil
}

// meta returns sid's ACP_SESSIONS projection as the session service
// wrote it.
func (e *env) meta(sid events.SessionID) *events.SessionMeta {
	e.t.Helper()
	kv, err := e.js.KeyValue(e.t.Context(), events.BucketSessions)
	if err != nil {
		e.t.Fatal(err)
	}
	entry, err := kv.Get(e.t.Context(), events.SessionKey(ns, sid))
	if err != nil {
		e.t.Fatalf("the projection of %s: %v", sid, err)
	}
	m, err := events.Decode[events.SessionMeta](entry.Value())
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// WithoutTail runs fn while ACP_LOG republishes nothing: records appended
// meanwhile are stored, and history has them, but no live viewer sees them
// arrive, as when core NATS drops messages. The next record that is
// republished names the last one as its predecessor, which is how a viewer
// finds the gap.
func (e *env) WithoutTail(fn func()) {
	e.t.Helper()
	ctx := e.t.Context()
	st, err := e.js.Stream(ctx, events.StreamLog)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	quiet := cfg
	quiet.RePublish = nil
	if _, err := e.js.UpdateStream(ctx, quiet); err != nil {
		e.t.Fatalf("stop republishing: %v", err)
	}
	defer func() {
		if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
			e.t.Fatalf("republish again: %v", err)
		}
	}()
	fn()
}

// Calls returns how many requests for op reached NATS so far.
func (e *env) Calls(op events.Op) int { return e.obs.calls(op) }

// LastRequest returns the last request for op that decoded, or nil.
func (e *env) LastRequest(op events.Op) events.Variant { return e.obs.lastRequest(op) }

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

// answerWith serves op for every namespace, answering every request with
// answer (an error, or a reply), until the test ends. It stands in for
// the session service, in an env without one (withoutBackend), where a
// test shows how the CLI renders an answer the real services give only
// in a fault or a race.
func (e *env) answerWith(op events.Op, answer any) {
	e.t.Helper()
	svc, err := micro.AddService(e.nc, micro.Config{Name: "standin", Version: "0.0.1"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = svc.Stop() })
	handler := micro.HandlerFunc(func(req micro.Request) {
		switch a := answer.(type) {
		case error:
			_ = events.RespondError(req, a)
		case events.Variant:
			_ = events.Respond(req, a)
		default:
			e.t.Errorf("answerWith(%s): %T is neither an error nor a reply", op, answer)
		}
	})
	if err := svc.AddEndpoint(string(op), handler, micro.WithEndpointSubject(events.APIWildcard(op))); err != nil {
		e.t.Fatal(err)
	}
}

// workDir makes the directory name in namespace ns's directory of the
// runner's workspace root, where its sessions may work, and returns its
// path.
func (e *env) workDir(name string) string {
	e.t.Helper()
	dir := filepath.Join(e.workspace, string(ns), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	return dir
}
