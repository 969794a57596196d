package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/webhook"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
)

// devConfig holds the flags of skein dev beyond the services' own.
type devConfig struct {
	stack      stackConfig
	dataDir    string
	natsListen string
	natsAny    bool // --nats-listen-any: natsListen may be other than loopback
	maxPayload int
	maxStore   string // --nats-max-store: "" is nats-server's own choice
	pprofAddr  string
}

func devCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "dev [flags]",
		Short: "Run all services and a demo agent on an embedded NATS, for development",
		Long: `skein dev runs an embedded nats-server (JetStream, file storage under --data),
the gateway, session, adapter-runner, history and notify services, and the built-in
demo agent, all in one process, with the same code paths as production.
The gateway accepts the token in DIR/dev-token (written at the first start,
mode 0600), an admin of namespace default; the skein CLI reads it there.
The NATS server takes no client without a password: its users are those of
the cluster's accounts.conf (skein-ops, the admin; skein-gateway and the other
services, each with only its rights; reader-default), with passwords written
at the first start in DIR/nats-users/USER.password (mode 0600). With
--nats-listen, DIR/nats-users/USER.url is the server's URL with the user's
password in it, and USER.json a nats CLI context (nats --context FILE).
Agents may work in the directory skein dev runs in (granted to namespace
default) and under DIR/workspaces, unless workspace roots or grants are
given. A DIR to be made inside that directory (.skein, say) is made under
$XDG_STATE_HOME/skein/dev (~/.local/state/skein/dev; /var/lib/skein/dev for
root), and DIR links there:
out of the agents' reach. A session working in a directory that holds a
DIR that is really there is warned about (refused with
--adapter-runner.sandbox=require): its agent can reach DIR.

Flags (single or double dash; every service flag also reads SKEIN_<NAME>):
  --data DIR          state directory (default .skein)
  --http ADDR         gateway HTTP address (default 127.0.0.1:8080)
  --nats-listen ADDR  also serve NATS on ADDR, a loopback address, for the nats CLI
  --nats-listen-any   allow a --nats-listen address other than loopback (0.0.0.0,
                      a LAN address): other machines reach NATS, with a password
  --agents FILE       agent registry file (env SKEIN_AGENTS)
  --pprof ADDR        serve net/http/pprof on ADDR (loopback only), for profiling
  --metrics-listen ADDR  serve Prometheus /metrics on ADDR, a listener of its own
  --print-config      print the effective configuration and exit
Run "skein dev -h" for every flag.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			startDir, err := os.Getwd()
			if err != nil {
				return fmt.Errorf("the directory skein dev runs in: %w", err)
			}
			return runDev(cmd.Context(), args, getenv, startDir, stdout, stderr)
		},
	}
}

// runDev runs skein dev started in startDir, the directory its agents may
// work in by default. It logs to stderr.
func runDev(ctx context.Context, args []string, getenv func(string) string, startDir string, stdout, stderr io.Writer) error {
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
	fs.StringVar(&c.maxStore, "nats-max-store", "", "JetStream's file store limit, as 512MB, 20GB or bytes (default: 75% of the disk's free space at start, nats-server's choice); fixed until skein dev restarts. At the limit, writes answer 507 storage_full")
	fs.StringVar(&c.pprofAddr, "pprof", "", pprofUsage)
	var printCfg bool
	fs.BoolVar(&printCfg, "print-config", false, printConfigUsage)
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
	// Every invalid setting at once, before anything is made: what
	// devDefaults fills in below is valid by construction.
	errs := []error{checkPprofFlag(c.pprofAddr), c.stack.validate(allTargets)}
	if c.natsListen != "" {
		errs = append(errs, checkNATSListen(c.natsListen, c.natsAny))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	lg, err := newLoggerTo(stderr, c.stack.LogLevel, false)
	if err != nil {
		return err
	}
	// A relative --data is the start directory's, as the shell meant it.
	if !filepath.IsAbs(c.dataDir) && startDir != "" {
		c.dataDir = filepath.Join(startDir, c.dataDir)
	}
	shownData, err := filepath.Abs(c.dataDir)
	if err != nil {
		return err
	}
	dataDir, err := placeDevData(shownData, startDir, getenv)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	c.dataDir = dataDir
	if err := devDefaults(&c, fs, startDir); err != nil {
		return err
	}
	// A flag set by a function has no value to show, so the sandbox mode
	// is given.
	shownFlags := map[string]string{"adapter-runner.sandbox": string(c.stack.Runner.Sandbox)}
	if printCfg {
		return printConfig(stdout, fs, shownFlags)
	}
	if os.Geteuid() == 0 && c.stack.Runner.Sandbox != adapterrunner.SandboxOff {
		// Its agents run as another user, which must pass through the
		// data directory to its sessions and workspaces: search, not
		// list; what lies in it stays root's alone.
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		if fi, err := os.Stat(dataDir); err == nil {
			if err := os.Chmod(dataDir, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("data directory: %w", err)
			}
		}
	}
	// Logged once every default is applied: what the services run with,
	// not what the flags held before skein dev filled them in.
	logConfigWith(lg, fs, shownFlags)

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
	// Skein's own listeners are bound before any adapter can start, and
	// after what a skein dev killed before this one left running is
	// gone: a process an agent left behind must not hold the HTTP or the
	// NATS port, where the next curl or skein would hand it a bearer
	// token. A port taken all the same fails the start, plainly.
	if err := adapterrunner.KillLeftovers(c.stack.Runner, lg); err != nil {
		return err
	}
	httpLn, err := (&net.ListenConfig{}).Listen(ctx, "tcp", c.stack.Gateway.Addr)
	if err != nil {
		return fmt.Errorf("--http %s: cannot listen (is another skein dev, or something it left, running there?): %w", c.stack.Gateway.Addr, err)
	}
	defer httpLn.Close() // closed by the gateway once it served; here if it never did
	c.stack.Gateway.Listener = httpLn
	if c.natsListen != "" {
		if err := probeListen(ctx, c.natsListen); err != nil {
			return fmt.Errorf("--nats-listen %s: cannot listen (is another skein dev, or something it left, running there?): %w", c.natsListen, err)
		}
	}
	maxStore, err := parseSize(c.maxStore)
	if err != nil {
		return fmt.Errorf("--nats-max-store: %w", err)
	}
	ns, err := startEmbeddedNATS(filepath.Join(dataDir, "nats"), c.natsListen, c.maxPayload, maxStore, auth)
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
			shown, shownToken := shownData, filepath.Join(shownData, cli.DevTokenFile)
			if shownData != dataDir {
				shown += " (kept in " + dataDir + ", out of the agents' reach)"
			}
			// What a person needs at info level; the rest is at debug
			// level, or from --print-config.
			natsShown := clientURL
			if natsShown == "" {
				natsShown = "in process only" // no --nats-listen
			}
			lg.Info("skein dev started", "http", st.gateway.Addr(), "nats", natsShown, "data_dir", dataDir,
				"sandbox", string(c.stack.Runner.Sandbox), "agents", agentNames(&c.stack.Runner))
			printWelcome(stdout, "http://"+st.gateway.Addr(), ns, c.natsListen, shown, shownToken, auth)
			printWorkspace(stdout, &c.stack.Runner, dataDir)
			printRoot(stdout, &c.stack.Runner, startDir, os.Geteuid())
		})
	})
	return err
}

// placeDevData keeps skein dev's data out of reach of the agents that
// work in its start directory. The sandbox grants a working directory
// whole, so data inside the start directory (the tour's .skein) would be
// theirs to read and write: the NATS store, the NATS passwords, and the
// dev token, with which an agent could answer its own permission
// requests. A data directory to be made there is therefore made under the
// user's state directory ($XDG_STATE_HOME, else ~/.local/state, or for
// root /var/lib: skein/dev/<hash of its path>), and dataDir becomes a
// symlink to it. The
// CLI and every path the README gives work through the symlink; Landlock,
// which checks where a file really lies, denies it to the agents.
//
// It returns the directory to use, symlinks resolved. A data directory
// outside the start directory, one that exists already (an older skein
// dev's, which stays where it is, with printWorkspace's warning), or one
// whose state directory lies in the start directory too (skein dev started
// in the home directory) is used where it is.
func placeDevData(dataDir, startDir string, getenv func(string) string) (string, error) {
	if startDir == "" || !workspace.Under(dataDir, filepath.Clean(startDir)) {
		return dataDir, nil
	}
	if _, err := os.Lstat(dataDir); err == nil {
		return filepath.EvalSymlinks(dataDir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	state := getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(state) {
		home := getenv("HOME")
		if !filepath.IsAbs(home) {
			return dataDir, nil
		}
		state = filepath.Join(home, ".local", "state")
		if os.Geteuid() == 0 {
			// root's home is closed to the user its agents run as
			// (adapterrunner.Config.AdapterUID), which must pass
			// through the data directory.
			state = "/var/lib"
		}
	}
	sum := sha256.Sum256([]byte(dataDir))
	kept := filepath.Join(state, "skein", "dev", hex.EncodeToString(sum[:8]))
	if workspace.Under(kept, filepath.Clean(startDir)) {
		return dataDir, nil
	}
	perm := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		perm = 0o711 // searchable, not listable, by the agents' user
	}
	if err := os.MkdirAll(kept, perm); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return "", err
	}
	if err := os.Symlink(kept, dataDir); err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(kept)
}

// devDefaults fills in what skein dev decides for the services unless a
// flag said otherwise: the runner's data directory and ID, the workspace,
// the demo agent, and the sandbox mode. c.dataDir is absolute.
//
// The workspace. skein dev is one person's, on their own machine, for
// their own projects: its agents may work in the directory it was started
// in, granted to namespace default (the dev token's), besides the root
// <data>/workspaces, where a session opened without a cwd gets a
// directory of its own. A root alone would not do: a namespace owns only
// <root>/<namespace> under it. Roots or grants given by flags replace all
// of this.
//
// Its own data (the NATS store, the token, the NATS users' passwords, the
// runner's data directory with each session's HOME) is protected: a
// session whose working directory holds it or lies in it (a session in the
// start directory, when the data directory really lies inside it, as a
// .skein an older skein dev made does: placeDevData) is one the sandbox
// cannot keep from it, and the runner refuses
// it under --adapter-runner.sandbox=require and warns under warn, dev's
// default (adapterrunner.Config.Protected).
func devDefaults(c *devConfig, fs *flag.FlagSet, startDir string) error {
	dataDir := c.dataDir
	runner := &c.stack.Runner
	if runner.DataDir == "" || !isSet(fs, "adapter-runner.data-dir") {
		runner.DataDir = filepath.Join(dataDir, "sessions")
	}
	if len(runner.WorkspaceRoots) == 0 {
		runner.WorkspaceRoots = workspace.Roots{filepath.Join(dataDir, "workspaces")}
		if len(runner.WorkspaceGrants) == 0 && startDir != "" {
			runner.WorkspaceGrants = workspace.Grants{events.DefaultNamespace: {filepath.Clean(startDir)}}
		}
	}
	runner.Protected = []string{
		filepath.Join(dataDir, "nats"), filepath.Join(dataDir, devUsersDir), filepath.Join(dataDir, cli.DevTokenFile),
	}
	if dir, err := filepath.Abs(runner.DataDir); err == nil && !slices.ContainsFunc(runner.WorkspaceRoots, func(root string) bool {
		return workspace.Under(root, dir)
	}) {
		// Every session's HOME and TMPDIR; unless a root lies in it, as
		// <data-dir>/workspaces does when only the data dir is given.
		runner.Protected = append(runner.Protected, dir)
	}
	// A webhook to a receiver on this machine is what a developer tries
	// first: dev allows loopback, to register and to reach.
	c.stack.Gateway.WebhookAllow = append(c.stack.Gateway.WebhookAllow, webhook.Loopback...)
	c.stack.Notify.Allow = append(c.stack.Notify.Allow, webhook.Loopback...)
	var err error
	if runner.Builtin, err = builtinAgents(); err != nil {
		return err
	}
	// The demo agent keeps its sessions under the data directory, so an
	// unloaded session comes back by session/resume, as with a real agent.
	// It offers a mode and a model, and announces commands, as real agents
	// do: skein config and skein commands show something.
	for i, a := range runner.Builtin {
		if a.ID == "demo" {
			runner.Builtin[i].Args = append(a.Args, "--resume", "--load-session", "--state-dir", filepath.Join(dataDir, "demo-agent"),
				"--config-options", "mode,model", "--commands")
			runner.Builtin[i].Sandbox.Write = []string{filepath.Join(dataDir, "demo-agent")}
		}
	}
	// A developer's machine may lack Landlock: dev runs adapters there
	// unconfined, with a warning, where serve refuses them.
	if !isSet(fs, "adapter-runner.sandbox") {
		runner.Sandbox = adapterrunner.SandboxWarn
	}
	if !isSet(fs, "adapter-runner.id") {
		runner.ID = "dev"
	}
	// One person in one namespace: the quotas that keep tenants from
	// crowding each other out would only give that person half the
	// runner. Past its capacity, their own idle adapters make room.
	if !isSet(fs, "session.max-adapters-per-namespace") {
		c.stack.Session.MaxAdaptersPerNamespace = session.Quota{}
	}
	if !isSet(fs, "session.max-adapters-per-principal") {
		c.stack.Session.MaxAdaptersPerPrincipal = session.Quota{}
	}
	return nil
}

// printWorkspace says where agents may work, and, when that exposes skein
// dev's own data to them, what follows and how to avoid it.
func printWorkspace(w io.Writer, runner *adapterrunner.Config, dataDir string) {
	dirs := slices.Clone(runner.WorkspaceGrants[events.DefaultNamespace])
	for _, root := range runner.WorkspaceRoots {
		dirs = append(dirs, filepath.Join(root, string(events.DefaultNamespace)))
	}
	fmt.Fprintf(w, "Agents may work in %s (a session's cwd, or the shell's for skein prompt and skein open).\n", strings.Join(dirs, ", "))
	for _, d := range runner.WorkspaceGrants[events.DefaultNamespace] {
		if workspace.Under(dataDir, d) {
			fmt.Fprintf(w, `
Note: the data directory %s lies in %s.
An agent working in that directory itself can read and write Skein's data (the
NATS store, the token, the NATS passwords): the sandbox grants a working
directory whole. The runner warns when it starts one. To keep them apart, run skein dev with --data
outside that directory, or with --adapter-runner.sandbox=require to refuse them.

`, dataDir, d)
		}
	}
}

// printRoot says, when skein dev runs as root (euid 0), what that means
// for its agents: under the sandbox they run as another user, with no
// capability; with the sandbox off, as root, with every capability.
func printRoot(w io.Writer, runner *adapterrunner.Config, startDir string, euid int) {
	if euid != 0 {
		return
	}
	resolved := runner.WithDefaults()
	uid, gid := resolved.AdapterUID, resolved.AdapterGID
	if runner.Sandbox == adapterrunner.SandboxOff {
		fmt.Fprintf(w, `
Note: skein dev runs as ROOT, with --adapter-runner.sandbox=off: its agents run as
root too, with every capability. An agent can do anything on this machine: read
every session's files and the token, sniff traffic, load kernel modules. Run skein
dev as yourself, or with the sandbox on.

`)
		return
	}
	who := fmt.Sprintf("uid %d", uid)
	if runner.AdapterUIDRange > 0 {
		who = fmt.Sprintf("its namespace's uid, from %d,", uid)
	}
	fmt.Fprintf(w, `
Note: skein dev runs as root. Its agents do not: each runs as %s gid %d
(--adapter-runner.adapter-uid, --adapter-runner.adapter-gid), with no capability,
no_new_privs and a seccomp filter (no raw sockets, device nodes, ptrace, mounts or
namespaces). What Skein makes for a session (its workspace under the workspace
root, its HOME) is that user's. Your own directories are not changed: an agent
working in %s may write there only what uid %d (and the like) may; give it the
directories agents are to write (chown, setfacl), or run skein dev as yourself.

`, who, gid, startDir, uid)
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// startEmbeddedNATS starts a JetStream server storing under dir, whose
// clients must be users of auth. With listen it also accepts TCP
// connections there, so the nats CLI works.
func startEmbeddedNATS(dir, listen string, maxPayload int, maxStore int64, auth *devNATSAuth) (*server.Server, error) {
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
	opts.JetStreamMaxStore = maxStore // 0: the server's own choice
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
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats: not ready after 10s")
	}
	if err := limitAccountStore(ns); err != nil {
		ns.Shutdown()
		return nil, err
	}
	return ns, nil
}

// skeinAccount is the account of accounts.conf that holds everything of
// Skein's.
const skeinAccount = "SKEIN"

// limitAccountStore gives Skein's account the server's store limit as its
// own: the server refuses writes at either, and only an account's limit
// is what JetStream's account info tells the services ($JS.API.INFO), for
// the gateway's /readyz and the store metrics (storage_full).
func limitAccountStore(ns *server.Server) error {
	acc, err := ns.LookupAccount(skeinAccount)
	if err != nil {
		return fmt.Errorf("embedded nats: account %s: %w", skeinAccount, err)
	}
	// What streams reserve (their max_bytes) is the server's, not the
	// account's to give; and the server checks the change from the
	// account's unlimited -1, one byte more than the limit itself.
	_, reserved, err := ns.JetStreamReservedResources()
	if err != nil {
		return fmt.Errorf("embedded nats: %w", err)
	}
	limit := server.JetStreamAccountLimits{MaxMemory: -1, MaxStore: ns.JetStreamConfig().MaxStore - reserved - 1, MaxStreams: -1, MaxConsumers: -1}
	if err := acc.UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{"": limit}); err != nil {
		return fmt.Errorf("embedded nats: limit account %s's store: %w", skeinAccount, err)
	}
	return nil
}

// parseSize reads a size as nats-server's configuration does: bytes, or a
// number with K, M, G or T (each 1024 times the last), with or without a
// B or iB after it, any case. "" is 0.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size (512MB, 20GB, or bytes)", s)
	}
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "IB"), "B")
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[unit]
	if !ok || n > math.MaxInt64>>sh {
		return 0, fmt.Errorf("%q is not a size (512MB, 20GB, or bytes)", s)
	}
	return n << sh, nil
}

// probeListen fails when addr cannot be listened on now (a port taken).
// The embedded NATS server binds its own listener, and says no more than
// that it is not ready when it cannot.
func probeListen(ctx context.Context, addr string) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
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
