package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/gateway"
	"skein.dev/services/history"
	"skein.dev/services/notify"
	"skein.dev/services/session"
)

// Targets: the services skein can run. "all" is every one of them.
const (
	TargetGateway       = "gateway"
	TargetSession       = "session"
	TargetAdapterRunner = "adapter-runner"
	TargetHistory       = "history"
	TargetNotify        = "notify"
	TargetAll           = "all"
)

var allTargets = []string{TargetGateway, TargetSession, TargetAdapterRunner, TargetHistory, TargetNotify}

// testAgentCommand is the hidden subcommand that runs the built-in test agent.
const testAgentCommand = "testagent"

// stackConfig holds every service's configuration; one FlagSet carries them
// all, each under its service's prefix.
type stackConfig struct {
	Gateway gateway.Config
	Session session.Config
	Runner  adapterrunner.Config
	History history.Config
	Notify  notify.Config

	Targets     string
	MetricsAddr string
	LogLevel    string
	Replicas    int
}

func (c *stackConfig) registerFlags(fs *flag.FlagSet) {
	c.Gateway.RegisterFlags(fs)
	c.Session.RegisterFlags(fs)
	c.Runner.RegisterFlags(fs)
	c.History.RegisterFlags(fs)
	c.Notify.RegisterFlags(fs)
	fs.StringVar(&c.MetricsAddr, "metrics-listen", "", "serve Prometheus /metrics on this address, a listener of its own, without authentication (off when empty)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.IntVar(&c.Replicas, "replicas", 1, "replicas of the streams and buckets (3 in a cluster)")
}

// validate reports, at once, every invalid setting of the stack's own
// flags and of the services targets names; it changes nothing. Each
// service is checked as its New will check it, with its defaults.
func (c *stackConfig) validate(targets []string) error {
	var errs []error
	if c.Replicas < 1 {
		errs = append(errs, fmt.Errorf("--replicas must be at least 1, got %d", c.Replicas))
	}
	var lv slog.LevelVar
	if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: %w", c.LogLevel, err))
	}
	for _, t := range targets {
		var err error
		switch t {
		case TargetGateway:
			err = c.Gateway.Validate()
		case TargetSession:
			s := c.Session.WithDefaults()
			err = s.Validate()
		case TargetAdapterRunner:
			r := c.Runner.WithDefaults()
			err = r.Validate()
		case TargetHistory:
			h := c.History.WithDefaults()
			err = h.Validate()
		case TargetNotify:
			n := c.Notify.WithDefaults()
			err = n.Validate()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// parseTargets turns "gateway,session" or "all" into a list.
func parseTargets(s string) ([]string, error) {
	var out []string
	for t := range strings.SplitSeq(s, ",") {
		t = strings.TrimSpace(t)
		switch {
		case t == TargetAll:
			out = append(out, allTargets...)
		case slices.Contains(allTargets, t):
			out = append(out, t)
		default:
			return nil, fmt.Errorf("unknown target %q (want %s or %s)", t, strings.Join(allTargets, ", "), TargetAll)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// runnable is what every service is: Run blocks until ctx is done.
type runnable interface {
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// stack is a set of constructed services, each on a NATS connection of
// its own (see dialer).
type stack struct {
	services map[string]runnable
	gateway  *gateway.Gateway
	reg      *prometheus.Registry
	conns    []*nats.Conn
}

// dialer returns the NATS connection for one service. Each service of a
// process gets its own: a connection has one reader and one writer
// goroutine, and a runner streaming adapter output, the session service
// applying it and the gateway fanning it out to viewers would otherwise
// queue behind each other on them.
type dialer func(service string) (*nats.Conn, error)

// newStack constructs the services named by targets, dialing their
// connections. It does no other I/O. close drains the connections.
func newStack(cfg *stackConfig, targets []string, lg *slog.Logger, dial dialer) (*stack, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st := &stack{services: map[string]runnable{}, reg: reg}
	cfg.Session.Replicas, cfg.Runner.Replicas, cfg.History.Replicas, cfg.Notify.Replicas = cfg.Replicas, cfg.Replicas, cfg.Replicas, cfg.Replicas
	if len(cfg.Notify.Allow) == 0 && slices.Contains(targets, TargetNotify) && slices.Contains(targets, TargetGateway) {
		// One process: what the gateway lets a webhook be registered
		// for, the notify service lets it reach.
		cfg.Notify.Allow = cfg.Gateway.WebhookAllow
	}
	if len(cfg.Session.WorkspaceRoots) == 0 && slices.Contains(targets, TargetSession) && slices.Contains(targets, TargetAdapterRunner) {
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
	for _, t := range targets {
		var (
			svc runnable
			err error
		)
		nc, err := dial(t)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("%s: connect to nats: %w", t, err)
		}
		if !slices.Contains(st.conns, nc) {
			st.conns = append(st.conns, nc)
		}
		switch t {
		case TargetGateway:
			st.gateway, err = gateway.New(cfg.Gateway, lg, nc, reg)
			svc = st.gateway
		case TargetSession:
			svc, err = session.New(cfg.Session, lg, nc, reg)
		case TargetAdapterRunner:
			svc, err = adapterrunner.New(cfg.Runner, lg, nc, reg)
		case TargetHistory:
			svc, err = history.New(cfg.History, lg, nc, reg)
		case TargetNotify:
			svc, err = notify.New(cfg.Notify, lg, nc, reg)
		}
		if err != nil {
			st.close()
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		st.services[t] = svc
	}
	return st, nil
}

// close drains the services' connections: what they published is sent
// before the connections close. Call it after run returned.
//
// Drain only begins a drain: each connection is waited for until it has
// closed (nats.go closes it once drained, or after its drain timeout), so
// that what it flushes is not cut short by the process's exit or, in
// skein dev, by the embedded server's shutdown.
func (st *stack) close() {
	closed := make([]chan struct{}, len(st.conns))
	for i, nc := range st.conns {
		closed[i] = make(chan struct{})
		prev := nc.ClosedHandler()
		nc.SetClosedHandler(func(c *nats.Conn) {
			if prev != nil {
				prev(c)
			}
			close(closed[i])
		})
		if err := nc.Drain(); err != nil {
			// Closed already (and its handler called, or never to be),
			// or draining already: nothing more to wait for here.
			if nc.IsClosed() {
				closed[i] = nil
			}
		}
	}
	for _, c := range closed {
		if c != nil {
			<-c
		}
	}
}

// run runs every service until ctx is done or one fails; the first failure
// stops the others. ready is called once every service is ready.
func (st *stack) run(ctx context.Context, lg *slog.Logger, metricsAddr string, ready func()) error {
	g, gctx := errgroup.WithContext(ctx)
	for name, svc := range st.services {
		g.Go(func() error {
			if err := svc.Run(gctx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	if metricsAddr != "" {
		g.Go(func() error { return serveMetrics(gctx, metricsAddr, st.reg, lg) })
	}
	g.Go(func() error {
		for _, svc := range st.services {
			select {
			case <-svc.Ready():
			case <-gctx.Done():
				return nil
			}
		}
		if ready != nil {
			ready()
		}
		return nil
	})
	return g.Wait()
}

func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, lg *slog.Logger) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	lg.Info("metrics listening", "addr", ln.Addr().String())
	return serveUntilDone(ctx, &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln, false)
}

// newLogger returns a text logger for a terminal, JSON otherwise, writing
// to stderr.
func newLogger(level string, json bool) (*slog.Logger, error) {
	return newLoggerTo(os.Stderr, level, json)
}

// newLoggerTo is newLogger writing to w.
func newLoggerTo(w io.Writer, level string, json bool) (*slog.Logger, error) {
	var lv slog.LevelVar
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: &lv}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// applyEnv sets each flag of fs whose variable SKEIN_<NAME> is set, NAME
// being the flag name upper-cased with '.' and '-' as '_'
// (session.default-cwd → SKEIN_SESSION_DEFAULT_CWD). Flags given on the
// command line win, since they are parsed after.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "SKEIN_" + strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(f.Name))
		if v := getenv(name); v != "" && err == nil {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s: %w", name, serr)
			}
		}
	})
	return err
}

// builtinAgents returns the test agent under the IDs "test" and "demo": this
// binary run as "skein testagent". Neither has an allowEnv: the test agent
// reads no variable a session could set, so a session's env is refused
// (an agents file entry with the same ID can allow some).
func builtinAgents() ([]adapterrunner.Agent, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate the skein binary for the built-in agents: %w", err)
	}
	return []adapterrunner.Agent{
		{ID: "test", Command: exe, Args: []string{testAgentCommand}},
		{ID: "demo", Command: exe, Args: []string{testAgentCommand}},
	}, nil
}
