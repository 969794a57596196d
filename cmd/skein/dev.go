package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"skein.dev/internal/workspace"
	adapterrunner "skein.dev/services/adapter-runner"
)

// devConfig holds the flags of skein dev beyond the services' own.
type devConfig struct {
	stack      stackConfig
	dataDir    string
	natsListen string
	natsAny    bool // --nats-listen-any: natsListen may be other than loopback
	maxPayload int
	pprofAddr  string
}

func devCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "dev [flags]",
		Short: "Run all services and a demo agent on an embedded NATS, for development",
		Long: `skein dev runs an embedded nats-server (JetStream, file storage under --data),
the gateway, session, adapter-runner and history services, and the built-in
demo agent, all in one process, with the same code paths as production.
The gateway accepts the token in DIR/dev-token (written at the first start,
mode 0600), an admin of namespace default; the skein CLI reads it there.
The NATS server takes no client without a password: its users are those of
the cluster's accounts.conf (skein-ops, the admin; skein-gateway and the other
services, each with only its rights; reader-default), with passwords written
at the first start in DIR/nats-users/USER.password (mode 0600). With
--nats-listen, DIR/nats-users/USER.url is the server's URL with the user's
password in it, and USER.json a nats CLI context (nats --context FILE).

Flags (single or double dash; every service flag also reads SKEIN_<NAME>):
  --data DIR          state directory (default .skein)
  --http ADDR         gateway HTTP address (default 127.0.0.1:8080)
  --nats-listen ADDR  also serve NATS on ADDR, a loopback address, for the nats CLI
  --nats-listen-any   allow a --nats-listen address other than loopback (0.0.0.0,
                      a LAN address): other machines reach NATS, with a password
  --agents FILE       agent registry file (env SKEIN_AGENTS)
  --pprof ADDR        serve net/http/pprof on ADDR (loopback only), for profiling
  --metrics-listen ADDR  serve Prometheus /metrics on ADDR, a listener of its own
Run "skein dev -h" for every flag.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDev(cmd.Context(), args, getenv, stdout, stderr)
		},
	}
}

func runDev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c devConfig
	fs := flag.NewFlagSet("skein dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.stack.registerFlags(fs)
	fs.StringVar(&c.dataDir, "data", ".skein", "state directory: NATS storage and per-session agent directories")
	fs.StringVar(&c.stack.Gateway.Addr, "http", "127.0.0.1:8080", "gateway HTTP address (same as --gateway.http-addr)")
	fs.StringVar(&c.natsListen, "nats-listen", "", "also serve NATS on this loopback address, e.g. 127.0.0.1:4222 (port 0: a free one, printed at start); clients need a user's password from DIR/"+devUsersDir)
	fs.BoolVar(&c.natsAny, "nats-listen-any", false, "allow a --nats-listen address that is not loopback (0.0.0.0, ::, a LAN address, a host name): other machines can then reach NATS, still only with a user's password")
	fs.StringVar(&c.stack.Runner.AgentsFile, "agents", "", "agent registry file (same as --adapter-runner.agents; env SKEIN_AGENTS)")
	fs.IntVar(&c.maxPayload, "nats-max-payload", 8<<20, "largest NATS message the embedded server accepts")
	fs.StringVar(&c.pprofAddr, "pprof", "", pprofUsage)
	if err := applyEnv(fs, getenv); err != nil {
		return err
	}
	if v := getenv("SKEIN_AGENTS"); v != "" {
		c.stack.Runner.AgentsFile = v
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := checkPprofFlag(c.pprofAddr); err != nil {
		return err
	}
	if c.natsListen != "" {
		if err := checkNATSListen(c.natsListen, c.natsAny); err != nil {
			return err
		}
	}
	lg, err := newLogger(c.stack.LogLevel, false)
	if err != nil {
		return err
	}
	logConfig(lg, fs)
	dataDir, err := filepath.Abs(c.dataDir)
	if err != nil {
		return err
	}
	if c.stack.Runner.DataDir == "" || !isSet(fs, "adapter-runner.data-dir") {
		c.stack.Runner.DataDir = filepath.Join(dataDir, "sessions")
	}
	if len(c.stack.Runner.WorkspaceRoots) == 0 {
		c.stack.Runner.WorkspaceRoots = workspace.Roots{filepath.Join(dataDir, "workspaces")}
	}
	if c.stack.Runner.Builtin, err = builtinAgents(); err != nil {
		return err
	}
	// The demo agent keeps its sessions under the data directory, so an
	// unloaded session comes back by session/resume, as with a real agent.
	for i, a := range c.stack.Runner.Builtin {
		if a.ID == "demo" {
			c.stack.Runner.Builtin[i].Args = append(a.Args, "--resume", "--load-session", "--state-dir", filepath.Join(dataDir, "demo-agent"))
			c.stack.Runner.Builtin[i].Sandbox.Write = []string{filepath.Join(dataDir, "demo-agent")}
		}
	}
	// A developer's machine may lack Landlock: dev runs adapters there
	// unconfined, with a warning, where serve refuses them.
	if !isSet(fs, "adapter-runner.sandbox") {
		c.stack.Runner.Sandbox = adapterrunner.SandboxWarn
	}
	if !isSet(fs, "adapter-runner.id") {
		c.stack.Runner.ID = "dev"
	}

	token, tokenFile, created, err := ensureDevToken(dataDir)
	if err != nil {
		return fmt.Errorf("dev token: %w", err)
	}
	if !c.stack.Gateway.Auth.Enabled() && !c.stack.Gateway.Auth.InsecureNoAuth {
		c.stack.Gateway.Auth.Tokens = devTokens(token)
	}
	if created {
		lg.Info("wrote a new dev token", "file", tokenFile)
	}

	auth, err := ensureDevNATSAuth(dataDir)
	if err != nil {
		return fmt.Errorf("nats users: %w", err)
	}
	ns, err := startEmbeddedNATS(filepath.Join(dataDir, "nats"), c.natsListen, c.maxPayload, auth)
	if err != nil {
		return err
	}
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	clientURL := ""
	if c.natsListen != "" {
		clientURL = ns.ClientURL()
	}
	if err := auth.writeClientFiles(clientURL); err != nil {
		return fmt.Errorf("nats users: %w", err)
	}
	// The services have no right to create or change a stream, as in a
	// cluster: the admin provisions them first, with the session service's
	// limits, so that the service finds them as it would change them and
	// only reads.
	if err := provisionDev(ctx, ns, auth, &c.stack); err != nil {
		return err
	}
	targets, _ := parseTargets(TargetAll)
	st, err := newStack(&c.stack, targets, lg, func(service string) (*nats.Conn, error) {
		// In process, yet authenticated as over TCP: each service is its
		// own user of accounts.conf, with only its rights, and its replies
		// under the inbox prefix those rights allow.
		user := devServiceUser(service)
		return auth.connect(ns, user, "skein dev "+service)
	})
	if err != nil {
		return err
	}
	defer st.close()
	err = runWithPprof(ctx, c.pprofAddr, lg, func(ctx context.Context) error {
		return st.run(ctx, lg, c.stack.MetricsAddr, func() {
			printWelcome(stdout, "http://"+st.gateway.Addr(), ns, c.natsListen, dataDir, tokenFile, auth)
		})
	})
	return err
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// startEmbeddedNATS starts a JetStream server storing under dir, whose
// clients must be users of auth. With listen it also accepts TCP
// connections there, so the nats CLI works.
func startEmbeddedNATS(dir, listen string, maxPayload int, auth *devNATSAuth) (*server.Server, error) {
	opts := &server.Options{}
	if err := auth.apply(opts); err != nil {
		return nil, err
	}
	opts.ServerName = "skein-dev"
	opts.JetStream = true
	opts.StoreDir = dir
	opts.DontListen = listen == ""
	opts.NoSigs = true
	opts.NoLog = true
	opts.MaxPayload = int32(maxPayload)
	if listen != "" {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("--nats-listen %q: %w", listen, err)
		}
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("--nats-listen %q: bad port", listen)
		}
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT // as with --http: port 0 picks a free one (nats-server's 0 means 4222)
		}
		opts.Host = host
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := moveGlobalAccountStore(dir, opts); err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats: not ready after 10s")
	}
	return ns, nil
}

func printWelcome(w io.Writer, url string, ns *server.Server, natsListen, dataDir, tokenFile string, auth *devNATSAuth) {
	fmt.Fprintf(w, "Skein is running.\n\n  HTTP   %s\n  data   %s\n  token  %s   (the skein CLI reads it; or set SKEIN_TOKEN)\n", url, dataDir, tokenFile)
	if natsListen != "" {
		fmt.Fprintf(w, "  NATS   %s   (users and passwords: %s; try: nats --context %s stream ls)\n",
			ns.ClientURL(), auth.dir, auth.file(devAdminUser, ".json"))
	}
	fmt.Fprintf(w, `
Try it:

  skein --server %[1]s prompt "hello"

  TOKEN=$(cat %[2]s)
  curl -H "Authorization: Bearer $TOKEN" -X PUT %[1]s/v1/sessions/main -d '{"agent":"demo"}'
  curl -H "Authorization: Bearer $TOKEN" -X POST %[1]s/v1/sessions/main/prompt -d '{"content":[{"type":"text","text":"hello"}]}'
  curl -H "Authorization: Bearer $TOKEN" '%[1]s/v1/sessions/main/history?after=0'
  curl -H "Authorization: Bearer $TOKEN" -N %[1]s/v1/sessions/main/events?after=0

`, url, tokenFile)
}
