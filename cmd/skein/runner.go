package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"skein.dev/internal/edgeusers"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// runnerCommand is `skein runner --join URL --creds FILE`: an
// adapter-runner on a machine outside the cluster, an edge runner, joined
// to the cluster through a leaf node (edgeLeaf).
func runnerCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "runner --join URL --creds FILE [--id ID] [--label k=v ...] [--agents FILE] [--data DIR]",
		Short: "Run agents on this machine for a Skein cluster, joined as an edge runner",
		Long: `skein runner runs an adapter-runner on this machine, joined to a Skein cluster
through its leafnodes listener (--join URL, env SKEIN_LEAF_URL: nats-leaf://
or tls:// URLs, comma separated) with the credential skein provision runner
issued (--creds FILE). It runs the agents installed here (--agents FILE, and
the built-in demo and test agents unless --adapter-runner.test-agents=false),
confined to the directories allowed here (--adapter-runner.workspace-roots and
--adapter-runner.workspace-grants; by default DIR/workspaces), with its data
under --data DIR (default $XDG_STATE_HOME/skein/runner/ID).

It hosts only the sessions placed on it: opened with "placement": {"runner":
ID} or {"labels": {...}} naming its --label k=v. Its ID is the credential's
runner unless --id says otherwise; the cluster refuses any other.
Flags take one or two dashes; every flag also reads SKEIN_<NAME>.
Run "skein runner -h" for every flag.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRunner(cmd.Context(), args, getenv, stdout, stderr)
		},
	}
}

// joinTimeout bounds the wait for the link to the cluster at start: a
// runner that cannot join says why rather than waiting on.
const joinTimeout = 30 * time.Second

func runRunner(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		c               stackConfig
		join, creds, ca string
		testAgents      bool
		joinWait        time.Duration
		printCfg        bool
		id, dataDir     string
		outboxSize      string
		agentsFl        string
	)
	fs := flag.NewFlagSet("skein runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.Runner.RegisterFlags(fs)
	fs.StringVar(&join, "join", "", "the cluster's leafnodes listener: nats-leaf://host:7422 or tls://host:7422, comma separated (env SKEIN_LEAF_URL)")
	fs.StringVar(&creds, "creds", "", "the runner's credential file, from skein provision runner NAME --out FILE")
	fs.StringVar(&ca, "tls-ca", "", "PEM file of the CA that signed the cluster's certificates, for a tls:// URL")
	fs.DurationVar(&joinWait, "join-timeout", joinTimeout, "how long to wait for the link to the cluster at start")
	fs.StringVar(&outboxSize, "outbox-bytes", "1GB", "bound of the adapters' output kept on this machine while the link to the cluster is down, as 512MB, 2GB or bytes: past it the adapters wait")
	fs.StringVar(&id, "id", "", "runner ID (same as --adapter-runner.id; default: the credential's runner)")
	fs.Var(fs.Lookup("adapter-runner.label").Value, "label", "a label of this runner for placement, k=v (same as --adapter-runner.label; repeat it)")
	fs.StringVar(&agentsFl, "agents", "", "agent registry file (same as --adapter-runner.agents; env SKEIN_AGENTS)")
	fs.StringVar(&dataDir, "data", "", "data directory: sessions' HOME and TMPDIR, the default workspace root (same as --adapter-runner.data-dir; default $XDG_STATE_HOME/skein/runner/ID)")
	fs.BoolVar(&testAgents, "adapter-runner.test-agents", true, `offer the built-in scripted test agent as the agents "test" and "demo", as skein dev does`)
	fs.StringVar(&c.MetricsAddr, "metrics-listen", "", "serve Prometheus /metrics on this address, a listener of its own, without authentication (off when empty)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&printCfg, "print-config", false, printConfigUsage)
	if v := getenv("SKEIN_LEAF_URL"); v != "" {
		join = v
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
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if agentsFl != "" {
		c.Runner.AgentsFile = agentsFl
	}
	outboxBytes, err := parseSize(outboxSize)
	if err != nil {
		return fmt.Errorf("--outbox-bytes: %w", err)
	}
	var errs []error
	if join == "" {
		errs = append(errs, errors.New("--join (SKEIN_LEAF_URL) must name the cluster's leafnodes listener"))
	}
	if creds == "" {
		errs = append(errs, errors.New("--creds must name the runner's credential file (skein provision runner NAME --out FILE)"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	b, err := os.ReadFile(creds)
	if err != nil {
		return fmt.Errorf("--creds: %w", err)
	}
	cred, err := edgeusers.ParseCredential(b)
	if err != nil {
		return fmt.Errorf("--creds %s: %w", creds, err)
	}
	switch {
	case id != "":
		c.Runner.ID = id
	case !isSet(fs, "adapter-runner.id"):
		c.Runner.ID = cred.Name
	}
	switch {
	case dataDir != "":
		c.Runner.DataDir = dataDir
	case !isSet(fs, "adapter-runner.data-dir"):
		if c.Runner.DataDir, err = runnerDataDir(getenv, c.Runner.ID); err != nil {
			return err
		}
	}
	// An edge runner hosts only what is placed on it, and reaches
	// JetStream only through the cluster's domain.
	c.Runner.PlacedOnly = true
	c.Runner.JetStreamDomain = events.JetStreamDomain
	c.Replicas = 1
	if err := c.validate([]string{TargetAdapterRunner}); err != nil {
		return err
	}
	if printCfg {
		return printConfig(stdout, fs, nil)
	}
	lg, err := newLoggerTo(stderr, c.LogLevel, false)
	if err != nil {
		return err
	}
	logConfig(lg, fs)
	if testAgents {
		if c.Runner.Builtin, err = builtinAgents(); err != nil {
			return err
		}
	}
	id = c.Runner.ID
	leaf, err := startEdgeLeaf(lg, id, join, cred, ca, filepath.Join(c.Runner.DataDir, "leaf"))
	if err != nil {
		return err
	}
	defer leaf.shutdown()
	if err := leaf.awaitLink(ctx, joinWait); err != nil {
		if errors.Is(err, errLeafRefused) {
			return fmt.Errorf("%w (runner %s, %s)", err, cred.Name, creds)
		}
		return fmt.Errorf("join %s: %w", redactFlag("join", join), err)
	}
	// The runner's outbox lives in the leaf's own JetStream.
	local, err := leaf.connect(id)
	if err != nil {
		return err
	}
	defer local.Close()
	localJS, err := jetstream.New(local)
	if err != nil {
		return err
	}
	c.Runner.Outbox = &adapterrunner.OutboxConfig{Local: localJS, MaxBytes: outboxBytes}
	if err := leaf.awaitJetStream(ctx, localJS); err != nil {
		return err
	}
	st, err := newStack(&c, []string{TargetAdapterRunner}, lg, func(string) (*nats.Conn, error) { return leaf.connect(id) })
	if err != nil {
		return err
	}
	defer st.close()
	g, gctx := errgroup.WithContext(ctx)
	ready := make(chan struct{})
	g.Go(func() error {
		err := st.run(gctx, lg, c.MetricsAddr, func() {
			close(ready)
			lg.Info("skein runner joined", "id", id, "cluster", redactFlag("join", join), "labels", fs.Lookup("label").Value.String(),
				"data_dir", c.Runner.DataDir, "sandbox", string(c.Runner.Sandbox), "agents", agentNames(&c.Runner))
			fmt.Fprintf(stdout, "Runner %s joined the cluster at %s; it hosts the sessions placed on it.\n", id, redactFlag("join", join))
		})
		select {
		case <-ready:
		default:
			// The runner's first write is its heartbeat, which the
			// cluster takes only from runner id's credential.
			if err != nil && id != cred.Name {
				err = fmt.Errorf("the cluster refused runner %s: the credential in %s is runner %s's, and runner %s needs its own (skein provision runner %s): %w",
					id, creds, cred.Name, id, id, err)
			}
		}
		return err
	})
	g.Go(func() error {
		select {
		case <-leaf.refused:
			return fmt.Errorf("%w (runner %s, %s)", errLeafRefused, cred.Name, creds)
		case <-gctx.Done():
			return nil
		}
	})
	return g.Wait()
}

// runnerDataDir is skein runner's default data directory:
// $XDG_STATE_HOME/skein/runner/<id>, else ~/.local/state/skein/runner/<id>,
// out of any project an agent works in.
func runnerDataDir(getenv func(string) string, id string) (string, error) {
	state := getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(state) {
		home := getenv("HOME")
		if !filepath.IsAbs(home) {
			return "", errors.New("--data: no HOME to put the runner's data under; give a directory")
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "skein", "runner", id), nil
}
