package stacktest

import (
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/gateway"
	"skein.dev/services/history"
	"skein.dev/services/notify"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// Config is the five services' configuration, as skein's flags hold it:
// Defaults fills it as the flags default it, and a test's edits change it
// from there.
type Config struct {
	Gateway gateway.Config
	Session session.Config
	Runner  adapterrunner.Config
	History history.Config
	Notify  notify.Config
	// Replicas is every stream's and bucket's (skein's --replicas).
	Replicas int
	// LogLevel is the least level of the services' logs, which go to the
	// test's output: warnings unless an edit says otherwise.
	LogLevel slog.Level
	// Targets names the services to run, as skein serve's --target does
	// ("gateway", "session", "adapter-runner", "history", "notify"); all
	// five when empty.
	Targets []string
}

// Defaults returns the configuration skein runs with when given no flag:
// each service's flags, registered on a flag set of their own, left at
// their defaults.
func Defaults() Config {
	c := Config{Replicas: 1, LogLevel: slog.LevelWarn}
	fs := flag.NewFlagSet("stacktest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Gateway.RegisterFlags(fs)
	c.Session.RegisterFlags(fs)
	c.Runner.RegisterFlags(fs)
	c.History.RegisterFlags(fs)
	c.Notify.RegisterFlags(fs)
	return c
}

// AsSkein makes Start run the five services as skein serve and skein dev
// run them: configured as Defaults, then by edits; the runner "e2e" keeping
// its data in dataDir and offering the test agent as "test" and "demo",
// with no environment, as skein's built-in agents (unless the edits name
// agents of their own); every service's metrics
// in one registry (Registry) with the Go and process collectors; and the
// gateway listening on a loopback port (URL). The stack counts no request
// (Calls), so that what a benchmark measures is the services alone.
func AsSkein(dataDir string, edits ...func(*Config)) Option {
	return func(o *options) {
		o.skein = &skeinOptions{dataDir: dataDir, edits: edits}
	}
}

type skeinOptions struct {
	dataDir string
	edits   []func(*Config)
}

// startSkein runs the five services as AsSkein says.
func (s *Stack) startSkein(o options) {
	t := s.t
	t.Helper()
	cfg := Defaults()
	cfg.Gateway.Addr = "127.0.0.1:0"
	cfg.Runner.ID = "e2e"
	cfg.Runner.DataDir = o.skein.dataDir
	testutil.SearchableAbove(o.skein.dataDir) // for the adapters' user, under root
	for _, edit := range o.skein.edits {
		edit(&cfg)
	}
	runs := func(target string) bool { return len(cfg.Targets) == 0 || slices.Contains(cfg.Targets, target) }
	s.agent = o.agent[0]
	if len(cfg.Runner.Builtin) == 0 {
		args := slices.Clip(o.agent[1:])
		// Their pauses are the stack's (Paused, Release).
		env := map[string]string{testagent.EnvControlDir: s.control}
		cfg.Runner.Builtin = []adapterrunner.Agent{
			{ID: "test", Command: s.agent, Args: args, Env: env},
			{ID: "demo", Command: s.agent, Args: args, Env: env},
		}
	}
	cfg.Session.Replicas, cfg.Runner.Replicas, cfg.History.Replicas, cfg.Notify.Replicas = cfg.Replicas, cfg.Replicas, cfg.Replicas, cfg.Replicas
	if len(cfg.Session.WorkspaceRoots) == 0 && runs("session") && runs("adapter-runner") {
		// One process, one file system: the session service refuses at
		// open what its runner would refuse at launch.
		runner := cfg.Runner.WithDefaults()
		if err := runner.Validate(); err == nil {
			cfg.Session.WorkspaceRoots = runner.WorkspaceRoots
			if len(cfg.Session.WorkspaceGrants) == 0 {
				cfg.Session.WorkspaceGrants = runner.WorkspaceGrants
			}
		}
	}
	s.workspace = filepath.Join(o.skein.dataDir, "workspaces")

	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: cfg.LogLevel}))
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Each service on its own connection, as skein serve and skein dev
	// run them.
	connect := func() *nats.Conn { return natstest.Connect(t, s.srv) }
	if runs("adapter-runner") {
		runner, err := adapterrunner.New(cfg.Runner, lg, connect(), s.reg)
		if err != nil {
			t.Fatal(err)
		}
		s.stopRunner = s.run("adapter-runner", runner)
	}
	if runs("session") {
		svc, err := session.New(cfg.Session, lg, connect(), s.reg)
		if err != nil {
			t.Fatal(err)
		}
		s.run("session", svc)
	}
	if runs("history") {
		nc := connect()
		hist, err := history.New(cfg.History, lg, nc, s.reg)
		if err != nil {
			t.Fatal(err)
		}
		stop := s.run("history", hist)
		s.stopHistory = func() { stop(); _ = nc.FlushTimeout(testutil.PollTimeout) }
	}
	if runs("notify") {
		svc, err := notify.New(cfg.Notify, lg, connect(), s.reg)
		if err != nil {
			t.Fatal(err)
		}
		s.run("notify", svc)
	}
	if runs("gateway") {
		gw, err := gateway.New(cfg.Gateway, lg, connect(), s.reg)
		if err != nil {
			t.Fatal(err)
		}
		s.run("gateway", gw)
		s.url = "http://" + gw.Addr()
	}
}

// URL returns the gateway's base URL, of a stack that AsSkein runs.
func (s *Stack) URL() string {
	s.t.Helper()
	if s.url == "" {
		s.t.Fatal("stacktest: URL of a stack that runs no gateway (AsSkein)")
	}
	return s.url
}

// Registry returns the services' metrics registry, of a stack that AsSkein
// runs.
func (s *Stack) Registry() *prometheus.Registry {
	s.t.Helper()
	if s.reg == nil {
		s.t.Fatal("stacktest: Registry of a stack that AsSkein does not run")
	}
	return s.reg
}
