package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func serveCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "serve -target=all|gateway,session,adapter-runner,history,notify --nats URL [flags]",
		Short: "Run Skein services against a NATS cluster",
		Long: `skein serve runs the named services in this process, connected to an external
NATS (JetStream enabled). Production runs each target as its own process.
The gateway needs --gateway.tokens-file, or --gateway.insecure-no-auth.
Flags take one or two dashes; every flag also reads SKEIN_<NAME>.
Run "skein serve -h" for every flag.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), args, getenv, stdout, stderr)
		},
	}
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c stackConfig
	var natsURL, credsFile, pprofAddr string
	var testAgents bool
	var natsTLS natsTLSFlags
	fs := flag.NewFlagSet("skein serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.registerFlags(fs)
	fs.StringVar(&c.Targets, "target", TargetAll, "services to run: all, or a comma list of gateway, session, adapter-runner, history, notify")
	fs.StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s), comma separated (env NATS_URL)")
	fs.StringVar(&credsFile, "nats-creds", "", "NATS credentials file")
	natsTLS.register(fs)
	fs.StringVar(&pprofAddr, "pprof", "", pprofUsage)
	var printCfg bool
	fs.BoolVar(&printCfg, "print-config", false, printConfigUsage)
	fs.BoolVar(&testAgents, "adapter-runner.test-agents", false, `offer the built-in scripted test agent as the agents "test" and "demo" (for trials and tests: never in production, where every token could start it)`)
	if v := getenv("NATS_URL"); v != "" {
		natsURL = v
	}
	if err := applyEnv(fs, getenv); err != nil {
		return err
	}
	if v := getenv("SKEIN_AGENTS"); v != "" {
		c.Runner.AgentsFile = v
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if printCfg {
		return printConfig(stdout, fs, nil)
	}
	targets, err := parseTargets(c.Targets)
	if err != nil {
		return err
	}
	errs := []error{checkPprofFlag(pprofAddr), c.validate(targets)}
	if slices.Contains(targets, TargetGateway) && !c.Gateway.Auth.Enabled() && !c.Gateway.Auth.InsecureNoAuth {
		errs = append(errs, errors.New("the gateway needs --gateway.tokens-file (docs/API.md, Authentication), or --gateway.insecure-no-auth to serve without authentication"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	lg, err := newLogger(c.LogLevel, true)
	if err != nil {
		return err
	}
	logConfig(lg, fs)
	// A production runner offers only the agents its registry names: the
	// test agent is a scripted fake that any token could start.
	if testAgents {
		if c.Runner.Builtin, err = builtinAgents(); err != nil {
			return err
		}
	}
	opts := []nats.Option{nats.MaxReconnects(-1)}
	if credsFile != "" {
		opts = append(opts, nats.UserCredentials(credsFile))
	}
	tlsOpts, err := natsTLS.options()
	if err != nil {
		return err
	}
	opts = append(opts, tlsOpts...)
	var nc *nats.Conn // the first service's, for the log line below
	st, err := newStack(&c, targets, lg, func(service string) (*nats.Conn, error) {
		// Each service's replies arrive under an inbox prefix of its own,
		// which the cluster's permissions grant it alone (ops/cluster).
		conn, err := nats.Connect(natsURL, append(opts, nats.Name("skein "+service), nats.CustomInboxPrefix("_INBOX."+service))...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", natsURL, err)
		}
		if nc == nil {
			nc = conn
		}
		return conn, nil
	})
	if err != nil {
		return err
	}
	// The services have returned once run has, and the profile and
	// metrics servers have shut down; close then waits for every
	// connection's drain, so that serve returns only once shutdown has
	// finished.
	defer st.close()
	return runWithPprof(ctx, pprofAddr, lg, func(ctx context.Context) error {
		return st.run(ctx, lg, c.MetricsAddr, func() {
			// What a person needs at info level; the rest is at debug
			// level, or from --print-config.
			attrs := []any{"targets", targets, "nats", nc.ConnectedUrlRedacted()}
			if slices.Contains(targets, TargetGateway) {
				attrs = append(attrs, "http", st.gateway.Addr())
			}
			if slices.Contains(targets, TargetAdapterRunner) {
				attrs = append(attrs, "data_dir", c.Runner.DataDir, "sandbox", string(c.Runner.Sandbox), "agents", agentNames(&c.Runner))
			}
			lg.Info("skein serving", attrs...)
		})
	})
}

// natsTLSFlags are the client TLS flags of the commands that connect to a
// cluster as a service or an operator (serve, provision): the CA that
// signed the servers' certificates, and the client certificate a server
// with verify (ops/cluster/nats/tls.conf) asks for.
type natsTLSFlags struct {
	ca, cert, key string
}

func (f *natsTLSFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "nats-tls-ca", "", "PEM file of the CA that signed the NATS servers' certificates (TLS; a tls:// URL, or any URL of a server that requires TLS)")
	fs.StringVar(&f.cert, "nats-tls-cert", "", "PEM file of this client's certificate, for servers that verify clients (with --nats-tls-key)")
	fs.StringVar(&f.key, "nats-tls-key", "", "PEM file of the private key of --nats-tls-cert")
}

// options returns the connection's TLS options; none when no flag is set.
// The files are read at connect, and a missing one fails it.
func (f *natsTLSFlags) options() ([]nats.Option, error) {
	if (f.cert == "") != (f.key == "") {
		return nil, errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	var opts []nats.Option
	if f.ca != "" {
		opts = append(opts, nats.RootCAs(f.ca))
	}
	if f.cert != "" {
		opts = append(opts, nats.ClientCert(f.cert, f.key))
	}
	return opts, nil
}
