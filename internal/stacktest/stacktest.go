// Package stacktest runs the Skein services for a test, as in production:
// an embedded NATS server, and on it the adapter-runner (whose agents are
// the test agent, testagent), the session service and the history
// service, each on its own connection. A test puts what it tests (a
// gateway, a command) in front of the stack, drives sessions through it,
// and reads what the services stored and which requests reached NATS.
//
// It is the one stack harness of the repository's tests, in three ways:
//   - Start, as the gateway's and the CLI's tests use it: the three
//     services behind the gateway, with test defaults (agents "demo" and
//     "plain", short stop and drain waits) and a count of the requests
//     (Calls). The gateway's tests serve theirs on Stack.Server, with
//     options of their own.
//   - Start with AsSkein, as the black-box tests (test/) use it: the four
//     services, the gateway included, configured as skein's flags default
//     them.
//   - Start with WithoutServices, then StartRunner, StartSession and
//     StartHistory, as the session service's rig uses it: each service
//     started, stopped and started again as the test says.
//
// Tests import it; production code never does.
package stacktest

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/history"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// ConnectTimeout bounds a connection's handshake, in-process included:
// the default 2 s is not enough on a loaded machine that runs the race
// detector and five connections per test.
const ConnectTimeout = 20 * time.Second

// AgentArg, as the first argument of a test binary whose TestMain is
// Main, makes the binary run the test agent instead of its tests.
const AgentArg = "testagent"

// mainRan is set by Main: the test binary can then be its own test agent.
var mainRan bool

// Main is a TestMain for a package whose stacks run the test binary
// itself as the test agent, the default of Start: called with AgentArg,
// the binary is the agent; otherwise it runs the tests as testutil.Main
// does, after setup (nil for none).
func Main(m *testing.M, setup func(dir string) error) {
	if len(os.Args) > 1 && os.Args[1] == AgentArg {
		os.Exit(testagent.Main(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	}
	mainRan = true
	testutil.Main(m, setup)
}

// Stack is the services on one NATS server, and the test's own
// connection to it. Its methods that name a session read and act in one
// namespace: the default one, or the one In chose.
type Stack struct {
	t   testing.TB
	ns  events.Namespace
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	obs *observer
	// control is the test agent's directory of pause and release files.
	control   string
	agent     string // the test agent's command
	workspace string // the runner's workspace root

	stopRunner, stopHistory func()
	stops                   []func() // every service's, in the order they started

	// Of a stack that AsSkein runs: the gateway's base URL and the
	// services' registry.
	url string
	reg *prometheus.Registry
}

type options struct {
	srv        *server.Server
	noServices bool
	uncounted  bool
	maxEvents  int64
	agent      []string // command and leading arguments
	agents     []adapterrunner.Agent
	skein      *skeinOptions
	session    session.Config // of the session service Start runs
}

// Option changes what Start runs.
type Option func(*options)

// WithStallAfter runs Start's session service with session.stall-after
// stall, and a sweep (which finds stalls) every sweep.
func WithStallAfter(stall, sweep time.Duration) Option {
	return func(o *options) { o.session.StallAfter, o.session.SweepInterval = stall, sweep }
}

// WithServer runs the stack on srv instead of a fresh server.
func WithServer(srv *server.Server) Option { return func(o *options) { o.srv = srv } }

// WithoutServices runs no service: the stack is the server, the test's
// connection and the request counts, and a test serves the ops it needs
// (AnswerWith) or starts the services it needs (StartRunner, StartSession,
// StartHistory).
func WithoutServices() Option { return func(o *options) { o.noServices = true } }

// Uncounted makes the stack count no request (Calls): nothing but the
// services listens to the API, so that a request to a service the test
// stopped finds no responder at once.
func Uncounted() Option { return func(o *options) { o.uncounted = true } }

// WithMaxEvents makes ACP_LOG keep at most n records per subject: older
// events are pruned, and history answers cursor_expired before them.
func WithMaxEvents(n int64) Option { return func(o *options) { o.maxEvents = n } }

// WithAgentCommand makes command, run with args before the agent's own
// flags, the test agent, instead of the test binary (see Main).
func WithAgentCommand(command string, args ...string) Option {
	return func(o *options) { o.agent = append([]string{command}, args...) }
}

// WithAgents makes the runner offer agents besides "demo" and "plain".
func WithAgents(agents ...adapterrunner.Agent) Option {
	return func(o *options) { o.agents = append(o.agents, agents...) }
}

// Start runs the stack until the test ends. Unless told otherwise, it
// runs on a fresh server, and the runner offers two agents: "demo", the
// test agent with config options (mode, model), resume, load and close,
// which lets a session set the environment variables A and B; and
// "plain", the test agent with none of them.
func Start(t testing.TB, opts ...Option) *Stack {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.agent == nil && !o.noServices {
		if !mainRan {
			t.Fatal("stacktest: no test agent: call stacktest.Main from TestMain, or pass WithAgentCommand")
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		o.agent = []string{exe, AgentArg}
	}
	if o.srv == nil {
		o.srv = natstest.Run(t)
	}
	s := &Stack{t: t, ns: events.DefaultNamespace, srv: o.srv, control: t.TempDir()}
	s.nc = natstest.Connect(t, s.srv, nats.Timeout(ConnectTimeout))
	var err error
	if s.js, err = jetstream.New(s.nc); err != nil {
		t.Fatal(err)
	}
	if o.skein != nil {
		s.startSkein(o)
		return s
	}
	// The observer subscribes before any service serves, so that it sees
	// every request.
	if !o.uncounted {
		s.obs = observe(t, s.nc)
	}
	if !o.noServices {
		s.startServices(o)
	}
	return s
}

func (s *Stack) startServices(o options) {
	t := s.t
	env := map[string]string{testagent.EnvControlDir: s.control}
	s.agent = o.agent[0]
	args := slices.Clip(o.agent[1:]) // so that demo's append copies it
	demo := append(args, "--config-options=mode,model", "--resume", "--load-session", "--close", "--state-dir", t.TempDir())
	// Out of order: list_agents sorts them.
	agents := append([]adapterrunner.Agent{
		{ID: "plain", Command: s.agent, Args: args, Env: env},
		{ID: "demo", Command: s.agent, Args: demo, Env: env, AllowEnv: []string{"A", "B"}},
	}, o.agents...)

	dataDir := t.TempDir()
	s.workspace = filepath.Join(dataDir, "workspaces")
	s.StartRunner(adapterrunner.Config{ID: "r1", DataDir: dataDir, Builtin: agents}, s.connect())
	scfg := o.session
	scfg.MaxEventsPerSession = cmp.Or(o.maxEvents, scfg.MaxEventsPerSession)
	s.StartSession(scfg, s.connect(), prometheus.NewRegistry())
	s.StartHistory(history.Config{}, s.connect())
}

// Logger is the services' logger: warnings and errors, to the test's
// output.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// StartRunner runs an adapter-runner with cfg on nc until the test ends or
// the returned stop (and StopRunner) is called. A runner stops its
// adapters within 200 ms unless cfg says otherwise.
func (s *Stack) StartRunner(cfg adapterrunner.Config, nc *nats.Conn) (stop func()) {
	s.t.Helper()
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 200 * time.Millisecond
	}
	runner, err := adapterrunner.New(cfg, Logger(s.t), nc, prometheus.NewRegistry())
	if err != nil {
		s.t.Fatal(err)
	}
	s.stopRunner = s.run("runner "+cfg.ID, runner)
	flush(s.t, nc)
	return s.stopRunner
}

// StartSession runs a session service with cfg on nc, its metrics in reg,
// until the test ends or the returned stop is called. It waits at most
// 200 ms for a turn still open at its end unless cfg says otherwise: a
// test that ends with a turn open must not wait 5 s.
func (s *Stack) StartSession(cfg session.Config, nc *nats.Conn, reg *prometheus.Registry) (stop func()) {
	s.t.Helper()
	if cfg.DrainWait == 0 {
		cfg.DrainWait = 200 * time.Millisecond
	}
	svc, err := session.New(cfg, Logger(s.t), nc, reg)
	if err != nil {
		s.t.Fatal(err)
	}
	stop = s.run("session", svc)
	flush(s.t, nc)
	return stop
}

// StartHistory runs a history service with cfg on nc until the test ends
// or the returned stop (and StopHistory) is called.
func (s *Stack) StartHistory(cfg history.Config, nc *nats.Conn) (stop func()) {
	s.t.Helper()
	hist, err := history.New(cfg, Logger(s.t), nc, prometheus.NewRegistry())
	if err != nil {
		s.t.Fatal(err)
	}
	run := s.run("history", hist)
	flush(s.t, nc)
	// Once stopped, the server must have dropped the service's
	// subscriptions before a test asks for no responder.
	s.stopHistory = func() { run(); _ = nc.FlushTimeout(testutil.PollTimeout) }
	return s.stopHistory
}

// flush waits until the server has processed everything nc sent: Ready
// is closed once a service has subscribed, not once the server knows it,
// and the test's requests come on another connection.
func flush(t testing.TB, nc *nats.Conn) {
	t.Helper()
	if err := nc.FlushTimeout(testutil.PollTimeout); err != nil {
		t.Fatal(err)
	}
}

// connect opens a service's connection, which reconnects at once and for
// ever (a test may restart the server).
func (s *Stack) connect() *nats.Conn {
	return natstest.Connect(s.t, s.srv, nats.Timeout(ConnectTimeout), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
}

// Service is what every Skein service is: Run serves until its context
// ends, and Ready is closed once it serves.
type Service interface {
	Run(context.Context) error
	Ready() <-chan struct{}
}

// RunService runs svc until the test ends or the returned stop is called,
// and returns once svc is ready. Stop cancels Run and waits for it to
// return; the test fails if Run failed. A second call does nothing.
//
// Run's context is not the test's: the services stop in the test's
// cleanups, the last started first, so that cleanups registered before
// them (a NATS server's shutdown, a connection's close) run after.
func RunService(t testing.TB, name string, svc Service) (stop func()) {
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
		once.Do(func() {}) // Run returned: there is nothing to stop
		t.Fatalf("%s stopped before ready: %v", name, err)
	}
	return stop
}

// run is RunService, whose stop s.Stop calls too.
func (s *Stack) run(name string, svc Service) (stop func()) {
	s.t.Helper()
	stop = RunService(s.t, name, svc)
	s.stops = append(s.stops, stop)
	return stop
}

// In returns the stack acting in namespace n.
func (s *Stack) In(n events.Namespace) *Stack {
	c := *s
	c.ns = n
	return &c
}

// Connect opens another connection to the server, which reconnects at
// once and for ever, and is closed when the test ends.
func (s *Stack) Connect() *nats.Conn { return s.connect() }

// ControlDir returns the test agent's directory of pause and release
// files (testagent.EnvControlDir), which Paused and Release use.
func (s *Stack) ControlDir() string { return s.control }

// Server returns the NATS server.
func (s *Stack) Server() *server.Server { return s.srv }

// Conn returns the test's own connection.
func (s *Stack) Conn() *nats.Conn { return s.nc }

// JetStream returns JetStream on the test's own connection.
func (s *Stack) JetStream() jetstream.JetStream { return s.js }

// AgentCommand returns the test agent's command: what list_agents
// reports as the entrypoint of "demo" and "plain".
func (s *Stack) AgentCommand() string { return s.agent }

// Stop stops every service, the last started first. A test that replaces
// the NATS server registers it as a cleanup after the new server's, so
// that the services stop while they can still reach NATS.
func (s *Stack) Stop() {
	for _, stop := range slices.Backward(s.stops) {
		stop()
	}
}

// StopRunner stops the runner: its agents go with its heartbeat.
func (s *Stack) StopRunner() { s.stopRunner() }

// StopHistory stops the history service: its ops then find no responder.
// The observer stops listening first, for its interest would turn "no
// responder" into a timeout.
func (s *Stack) StopHistory() {
	if s.obs != nil {
		s.obs.stop()
	}
	s.stopHistory()
}

// WorkDir makes the directory name in the default namespace's directory of
// the runner's workspace root, where its sessions may work, and returns
// its path.
func (s *Stack) WorkDir(name string) string {
	s.t.Helper()
	dir := filepath.Join(s.workspace, string(events.DefaultNamespace), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	return dir
}

// Paused waits until the test agent stands at the pause point name.
func (s *Stack) Paused(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), time.Minute)
	defer cancel()
	if err := testagent.WaitPaused(ctx, s.control, name); err != nil {
		s.t.Fatalf("pause %s: %v", name, err)
	}
}

// Release lets the test agent go on from the pause point name.
func (s *Stack) Release(name string) {
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
func (s *Stack) WithoutTail(fn func()) {
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

// Calls returns how many requests for op reached NATS so far, in any
// namespace.
func (s *Stack) Calls(op events.Op) int { s.observed(); return s.obs.calls(op) }

// LastRequest returns the last request for op that decoded, or nil.
func (s *Stack) LastRequest(op events.Op) events.Variant {
	s.observed()
	return s.obs.lastRequest(op)
}

// observed fails the test if the stack counts no request (AsSkein,
// Uncounted).
func (s *Stack) observed() {
	if s.obs == nil {
		s.t.Helper()
		s.t.Fatal("stacktest: the stack counts no request (AsSkein, Uncounted)")
	}
}
