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

func serveCommand(getenv func(string) string, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "serve -target=all|gateway,session,adapter-runner,history --nats URL [flags]",
		Short: "Run Skein services against a NATS cluster",
		Long: `skein serve runs the named services in this process, connected to an external
NATS (JetStream enabled). Production runs each target as its own process.
The gateway needs --gateway.tokens-file, or --gateway.insecure-no-auth.
Flags take one or two dashes; every flag also reads SKEIN_<NAME>.
Run "skein serve -h" for every flag.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), args, getenv, stderr)
		},
	}
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var c stackConfig
	var natsURL, credsFile, pprofAddr string
	fs := flag.NewFlagSet("skein serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.registerFlags(fs)
	fs.StringVar(&c.Targets, "target", TargetAll, "services to run: all, or a comma list of gateway, session, adapter-runner, history")
	fs.StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s), comma separated (env NATS_URL)")
	fs.StringVar(&credsFile, "nats-creds", "", "NATS credentials file")
	fs.StringVar(&pprofAddr, "pprof", "", pprofUsage)
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
	targets, err := parseTargets(c.Targets)
	if err != nil {
		return err
	}
	if err := checkPprofFlag(pprofAddr); err != nil {
		return err
	}
	if slices.Contains(targets, TargetGateway) && !c.Gateway.Auth.Enabled() && !c.Gateway.Auth.InsecureNoAuth {
		return errors.New("the gateway needs --gateway.tokens-file (docs/API.md, Authentication), or --gateway.insecure-no-auth to serve without authentication")
	}
	lg, err := newLogger(c.LogLevel, true)
	if err != nil {
		return err
	}
	logConfig(lg, fs)
	if c.Runner.Builtin, err = builtinAgents(); err != nil {
		return err
	}
	opts := []nats.Option{nats.MaxReconnects(-1)}
	if credsFile != "" {
		opts = append(opts, nats.UserCredentials(credsFile))
	}
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
	defer st.close()
	err = runWithPprof(ctx, pprofAddr, lg, func(ctx context.Context) error {
		return st.run(ctx, lg, c.MetricsAddr, func() {
			lg.Info("skein serving", "targets", targets, "nats", nc.ConnectedUrlRedacted())
		})
	})
	_ = nc.Drain()
	return err
}
