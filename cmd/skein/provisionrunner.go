package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"skein.dev/internal/edgeusers"
	"skein.dev/pkg/events"
)

// provisionRunnerCommand is `skein provision runner NAME`: issue an edge
// runner's credential, or withdraw it (internal/edgeusers says what the
// credential may do, and where its user is kept).
func provisionRunnerCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "runner NAME --out FILE | runner NAME --revoke",
		Short: "Issue or withdraw the credential an edge runner joins the cluster with",
		Long: `Issue the credential of edge runner NAME (skein runner --join URL --creds FILE
on a machine outside the cluster), or withdraw it with --revoke.

The credential is an nkey: its seed goes to --out (mode 0600; never over an
existing file), its public key, with rights scoped to runner NAME, into the
users of account SKEIN in the cluster's accounts.conf (--accounts-file, env
SKEIN_ACCOUNTS_FILE), between the edge runners' markers. Then every node is
asked to reload its configuration through the system account (--sys-nats, env
SKEIN_SYS_NATS): the change takes effect at once, without a restart. Run it
again with the same --out and nothing changes; with a new file, NAME gets a
new key and the old one stops working.

--revoke removes NAME's user, reloads every node, closes the leaf connection
NAME holds (a reload alone leaves it open), and removes NAME's heartbeat from
ACP_RUNNERS as the ops user (--nats, env NATS_URL), so that it leaves skein
agents at once. A revoked runner's next connection is refused.

On a cluster whose nodes run on several hosts, each node reads its own
accounts.conf: give every node the same file (one shared through
configuration management), written here with --reload=false, then reload
each node (nats server config reload, or this command again).
Flags take one or two dashes; every flag also reads SKEIN_<NAME>.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runProvisionRunner(cmd.Context(), args, getenv, stdout, stderr)
		},
	}
}

// provisionRunnerFlags are skein provision runner's settings.
type provisionRunnerFlags struct {
	name, out, accounts string
	revoke, reload      bool
	sysURL, sysCreds    string
	natsURL, natsCreds  string
	natsTLS             natsTLSFlags
}

func runProvisionRunner(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var f provisionRunnerFlags
	fs := flag.NewFlagSet("skein provision runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.out, "out", "", "file to write the credential to (mode 0600)")
	fs.BoolVar(&f.revoke, "revoke", false, "withdraw the runner's credential: remove its user, reload, cut its connection")
	fs.StringVar(&f.accounts, "accounts-file", "", "the cluster's accounts.conf, where the edge runners' users are kept (make cluster's: .cluster/nats/accounts.conf)")
	fs.BoolVar(&f.reload, "reload", true, "ask every node to reload its configuration, and on --revoke to close the runner's leaf connection")
	fs.StringVar(&f.sysURL, "sys-nats", "", "NATS URL(s) of the system account's user, to reload the nodes")
	fs.StringVar(&f.sysCreds, "sys-nats-creds", "", "NATS credentials file of the system account's user")
	fs.StringVar(&f.natsURL, "nats", nats.DefaultURL, "NATS URL(s) of the ops user, to remove a revoked runner's heartbeat (env NATS_URL)")
	fs.StringVar(&f.natsCreds, "nats-creds", "", "NATS credentials file of the ops user")
	f.natsTLS.register(fs)
	if v := getenv("NATS_URL"); v != "" {
		f.natsURL = v
	}
	if err := applyEnv(fs, getenv); err != nil {
		return err
	}
	// NAME may come before the flags, where package flag stops.
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		f.name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return err
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	if f.name == "" {
		errs = append(errs, errors.New("name the runner: skein provision runner NAME"))
	} else if !events.RunnerID(f.name).Valid() {
		errs = append(errs, fmt.Errorf("runner ID %q must match [A-Za-z0-9_-]{1,128}", f.name))
	}
	if f.revoke == (f.out != "") {
		errs = append(errs, errors.New("give --out FILE to issue the runner's credential, or --revoke to withdraw it"))
	}
	if f.accounts == "" {
		errs = append(errs, errors.New("--accounts-file (SKEIN_ACCOUNTS_FILE) must name the cluster's accounts.conf"))
	}
	if f.reload && f.sysURL == "" {
		errs = append(errs, errors.New("--sys-nats (SKEIN_SYS_NATS) must name the system user's URL, to reload the nodes; or --reload=false"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if f.revoke {
		return revokeRunner(ctx, &f, getenv, stdout)
	}
	return issueRunner(ctx, &f, getenv, stdout)
}

// issueRunner writes runner f.name's credential and its user, and reloads
// the nodes. A credential at f.out that is already the runner's changes
// nothing.
func issueRunner(ctx context.Context, f *provisionRunnerFlags, getenv func(string) string, stdout io.Writer) error {
	if b, err := os.ReadFile(f.out); err == nil {
		c, perr := edgeusers.ParseCredential(b)
		if perr == nil && c.Name == f.name {
			conf, err := os.ReadFile(f.accounts)
			if err != nil {
				return err
			}
			runners, err := edgeusers.Read(conf)
			if err != nil {
				return fmt.Errorf("%s: %w", f.accounts, err)
			}
			if slices.Contains(runners, c.Runner) {
				fmt.Fprintf(stdout, "runner %s: unchanged (%s holds its credential)\n", f.name, f.out)
				return nil
			}
		}
		return fmt.Errorf("%s exists and is not runner %s's credential in %s: remove it, or write to another --out", f.out, f.name, f.accounts)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	user, cred, err := edgeusers.NewCredential(f.name)
	if err != nil {
		return err
	}
	// The credential first: an entry whose key nobody holds is of no
	// use, a credential without an entry is refused and written again.
	if err := edgeusers.WriteCredential(f.out, cred); err != nil {
		return err
	}
	replaced := false
	runners, _, err := edgeusers.Update(f.accounts, func(rs []edgeusers.Runner) ([]edgeusers.Runner, bool, error) {
		replaced = slices.ContainsFunc(rs, func(r edgeusers.Runner) bool { return r.Name == f.name })
		out, changed := edgeusers.Add(rs, user)
		return out, changed, nil
	})
	if err != nil {
		_ = os.Remove(f.out)
		return err
	}
	what := "issued"
	if replaced {
		what = "issued a new key (the old one is revoked)"
	}
	fmt.Fprintf(stdout, "runner %s: %s; credential in %s, user in %s\n", f.name, what, f.out, f.accounts)
	if !f.reload {
		fmt.Fprintln(stdout, "not reloaded (--reload=false): reload every node for it to take effect")
		return nil
	}
	cut := ""
	if replaced {
		cut = f.name
	}
	if err := reloadNodes(ctx, f, names(runners), cut, stdout); err != nil {
		return err
	}
	join := getenv("SKEIN_LEAF_URL")
	if join == "" {
		join = "URL"
	}
	fmt.Fprintf(stdout, "On the runner's machine: skein runner --join %q --creds %s\n", join, f.out)
	return nil
}

// revokeRunner removes runner f.name's user, reloads the nodes and cuts
// its leaf connections, then removes its heartbeat.
func revokeRunner(ctx context.Context, f *provisionRunnerFlags, getenv func(string) string, stdout io.Writer) error {
	runners, _, err := edgeusers.Update(f.accounts, func(rs []edgeusers.Runner) ([]edgeusers.Runner, bool, error) {
		out, err := edgeusers.Remove(rs, f.name)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", f.accounts, err)
		}
		return out, true, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "runner %s: revoked; its user is gone from %s\n", f.name, f.accounts)
	if !f.reload {
		fmt.Fprintln(stdout, "not reloaded (--reload=false): reload every node, and close the runner's leaf connection, for it to take effect")
		return nil
	}
	if err := reloadNodes(ctx, f, names(runners), f.name, stdout); err != nil {
		return err
	}
	// Its heartbeat would expire within its TTL; gone now, the runner
	// leaves skein agents, and the session services count its adapters
	// gone, at once. A failure here costs only that wait.
	if err := deleteHeartbeat(ctx, f); err != nil {
		fmt.Fprintf(stdout, "runner %s: its heartbeat stays until it expires (%v)\n", f.name, err)
		return nil
	}
	fmt.Fprintf(stdout, "runner %s: its heartbeat is removed from %s\n", f.name, events.BucketRunners)
	return nil
}

func names(rs []edgeusers.Runner) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// sysRequestTimeout bounds each request to a node's system services.
const sysRequestTimeout = 10 * time.Second

// reloadNodes asks every node of the cluster to reload its configuration,
// as the system user, and then closes the leaf connections of account
// SKEIN that may be runner cut's: nats-server re-checks its clients at a
// reload, but not its leaf connections. A leaf connection is a runner's
// when it holds one of that runner's subscriptions (only its credential
// may), so one that holds another provisioned runner's (keep) is left
// alone, and every other one is closed: cut's, and any that cannot be
// told apart yet (a runner just connecting), which connects again at once.
// With cut empty, no connection is closed.
func reloadNodes(ctx context.Context, f *provisionRunnerFlags, keep []string, cut string, stdout io.Writer) error {
	opts := []nats.Option{nats.Name("skein provision runner")}
	if f.sysCreds != "" {
		opts = append(opts, nats.UserCredentials(f.sysCreds))
	}
	tlsOpts, err := f.natsTLS.options()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(f.sysURL, append(opts, tlsOpts...)...)
	if err != nil {
		return fmt.Errorf("connect to %s as the system user: %w", redactFlag("sys-nats", f.sysURL), err)
	}
	defer nc.Close()
	servers, err := clusterServers(ctx, nc)
	if err != nil {
		return err
	}
	// A runner given a new key keeps its name among the runners: its
	// connections, made with the old key, go all the same.
	keep = slices.DeleteFunc(slices.Clone(keep), func(name string) bool { return name == cut })
	var errs []error
	for _, s := range servers {
		if err := sysRequest(ctx, nc, s.ID, "RELOAD", nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s: reload: %w", s.Name, err))
			continue
		}
		closed := 0
		if cut != "" {
			closed, err = cutLeafs(ctx, nc, s.ID, keep)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
				continue
			}
		}
		line := fmt.Sprintf("%s: reloaded", s.Name)
		if cut != "" {
			line += fmt.Sprintf("; %d leaf connection(s) closed", closed)
		}
		fmt.Fprintln(stdout, line)
	}
	return errors.Join(errs...)
}

// serverRef names a node: its name and its server ID.
type serverRef struct{ Name, ID string }

// clusterServers returns every node of the cluster, as the nodes answer a
// ping of the system account: each says how many servers it knows, and
// the wait ends once that many answered. A node that does not answer
// within sysRequestTimeout is an error: it would not reload.
func clusterServers(ctx context.Context, nc *nats.Conn) ([]serverRef, error) {
	ctx, cancel := context.WithTimeout(ctx, sysRequestTimeout)
	defer cancel()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SYS.REQ.SERVER.PING", inbox, nil); err != nil {
		return nil, err
	}
	var (
		out  []serverRef
		want = 1
	)
	for len(out) < want {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("%d of the cluster's %d nodes answered the system account's ping: %w", len(out), want, err)
		}
		var stats struct {
			Server struct {
				Name string `json:"name"`
				ID   string `json:"id"`
			} `json:"server"`
			Stats struct {
				ActiveServers int `json:"active_servers"`
			} `json:"statsz"`
		}
		if err := json.Unmarshal(m.Data, &stats); err != nil || stats.Server.ID == "" {
			return nil, fmt.Errorf("a node's answer to the system account's ping: %v: %.200s", err, m.Data)
		}
		if !slices.ContainsFunc(out, func(s serverRef) bool { return s.ID == stats.Server.ID }) {
			out = append(out, serverRef{stats.Server.Name, stats.Server.ID})
		}
		want = max(want, stats.Stats.ActiveServers)
	}
	return out, nil
}

// sysRequest sends a request to one node's system service
// ($SYS.REQ.SERVER.<id>.<verb>) and decodes what it answers into data.
func sysRequest(ctx context.Context, nc *nats.Conn, id, verb string, body, data any) error {
	ctx, cancel := context.WithTimeout(ctx, sysRequestTimeout)
	defer cancel()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	m, err := nc.RequestWithContext(ctx, "$SYS.REQ.SERVER."+id+"."+verb, b)
	if err != nil {
		return err
	}
	var resp struct {
		Data  json.RawMessage `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("%.200s: %w", m.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("%s (%d)", resp.Error.Description, resp.Error.Code)
	}
	if data != nil && len(resp.Data) > 0 {
		return json.Unmarshal(resp.Data, data)
	}
	return nil
}

// cutLeafs closes, on node id, the leaf connections of account SKEIN that
// hold no subscription of a runner in keep, and returns how many it
// closed.
func cutLeafs(ctx context.Context, nc *nats.Conn, id string, keep []string) (int, error) {
	var leafz struct {
		Leafs []struct {
			ID   uint64   `json:"id"`
			Subs []string `json:"subscriptions_list"`
		} `json:"leafs"`
	}
	if err := sysRequest(ctx, nc, id, "LEAFZ", map[string]any{"subscriptions": true, "account": skeinAccount}, &leafz); err != nil {
		return 0, fmt.Errorf("leaf connections: %w", err)
	}
	closed := 0
	for _, l := range leafz.Leafs {
		if slices.ContainsFunc(keep, func(name string) bool { return holdsRunnerSubs(l.Subs, name) }) {
			continue
		}
		if err := sysRequest(ctx, nc, id, "KICK", map[string]uint64{"cid": l.ID}, nil); err != nil {
			return closed, fmt.Errorf("close leaf connection %d: %w", l.ID, err)
		}
		closed++
	}
	return closed, nil
}

// holdsRunnerSubs reports whether subs hold a subscription only runner
// name's credential may make: to its control subjects or its inbox.
func holdsRunnerSubs(subs []string, name string) bool {
	control := strings.TrimSuffix(events.RunnerSubject(events.RunnerID(name), "*"), "*")
	inbox := edgeusers.InboxPrefix(name) + "."
	return slices.ContainsFunc(subs, func(s string) bool {
		return strings.HasPrefix(s, control) || strings.HasPrefix(s, inbox)
	})
}

// deleteHeartbeat removes runner f.name's entry of ACP_RUNNERS, as the ops
// user.
func deleteHeartbeat(ctx context.Context, f *provisionRunnerFlags) error {
	opts := []nats.Option{nats.Name("skein provision runner")}
	if f.natsCreds != "" {
		opts = append(opts, nats.UserCredentials(f.natsCreds))
	}
	tlsOpts, err := f.natsTLS.options()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(f.natsURL, append(opts, tlsOpts...)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, sysRequestTimeout)
	defer cancel()
	m := nats.NewMsg(events.KVSubject(events.BucketRunners, f.name))
	m.Header.Set(events.HeaderKVOperation, events.KVOperationDelete)
	_, err = js.PublishMsg(ctx, m)
	return err
}
