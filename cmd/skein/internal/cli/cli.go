// Package cli implements the client commands of the skein binary: open,
// prompt, cancel, unload, delete, rename, respond, answer, history, events, watch,
// agents, list, config, info, commands, discard, fork, dirs, upload, files, download
// and acp.
// They talk to a gateway over its HTTP API (services/gateway),
// never to NATS, so they work against any deployment.
//
// The gateway is the --server flag, else the SKEIN_URL environment
// variable, else DefaultServer. The session of a session command is
// --session (-s), default "main".
package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"skein.dev/pkg/events"
)

// DefaultServer is the gateway the commands use when neither --server nor
// SKEIN_URL names one: where `skein dev` listens.
const DefaultServer = "http://127.0.0.1:8080"

// EnvServer names the environment variable that holds the gateway URL.
const EnvServer = "SKEIN_URL"

// The bearer token of the commands is the --token flag, else EnvToken,
// else the one `skein dev` wrote in DevTokenFile under its data directory:
// EnvData (the variable skein dev's --data also reads), else DefaultDataDir.
const (
	EnvToken       = "SKEIN_TOKEN"
	EnvData        = "SKEIN_DATA"
	DefaultDataDir = ".skein"
	DevTokenFile   = "dev-token"
)

// DefaultAgent is the agent `skein open` and `skein prompt` open a session
// with when --agent is not given.
const DefaultAgent = "demo"

// defaultSession is the session of a command without --session.
const defaultSession = "main"

// Commands returns the client commands: open, prompt, cancel, unload,
// delete, rename, respond, answer, history, events, watch, agents, list, config (and
// config set), info, commands, discard, fork, dirs, upload, files and download.
// getenv supplies SKEIN_URL; stdout gets the commands' output and stderr
// their diagnostics (a turn's stop reason). Standard input is the
// command's (cobra's InOrStdin). Every command returns an *APIError when the
// gateway refused it.
func Commands(getenv func(string) string, stdout, stderr io.Writer) []*cobra.Command {
	a := &app{getenv: getenv, stdout: stdout, stderr: stderr}
	cmds := []*cobra.Command{
		a.openCommand(), a.promptCommand(), a.attachCommand(), a.cancelCommand(), a.unloadCommand(), a.deleteCommand(),
		a.renameCommand(), a.queueCommand(), a.respondCommand(), a.answerCommand(), a.historyCommand(), a.eventsCommand(),
		a.watchCommand(), a.agentsCommand(), a.listCommand(), a.configCommand(), a.infoCommand(),
		a.commandsCommand(), a.discardCommand(), a.forkCommand(), a.dirsCommand(),
		a.uploadCommand(), a.filesCommand(), a.downloadCommand(), a.versionCommand(), a.acpCommand(),
	}
	for _, cmd := range cmds {
		a.decorate(cmd)
	}
	return cmds
}

// app holds what every command shares.
type app struct {
	getenv         func(string) string
	stdout, stderr io.Writer
	// server and tokenSource are the gateway the command's client talks
	// to and where its token came from, named in its errors.
	server, tokenSource string
}

// common are the flags of every command.
type common struct {
	server  string
	token   string
	session string
}

func (c *common) register(cmd *cobra.Command) {
	c.registerServer(cmd)
	cmd.Flags().StringVarP(&c.session, "session", "s", defaultSession, "session ID")
}

// registerServer registers --server alone, for a command that addresses no
// session.
func (c *common) registerServer(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.server, "server", "", "gateway URL or host:port (default $"+EnvServer+", else "+DefaultServer+")")
	cmd.Flags().StringVar(&c.token, "token", "", "bearer token (default $"+EnvToken+", else the one skein dev wrote in $"+EnvData+"/"+DevTokenFile+", "+DefaultDataDir+"/"+DevTokenFile+" by default)")
}

// client returns a client for the gateway the flags and environment name,
// and a function that releases its connections.
func (a *app) client(c *common) (*client, func()) {
	base := serverURL(c.server, a.getenv(EnvServer))
	token, source := a.token(c)
	a.server, a.tokenSource = base, source
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	// No overall timeout: a prompt blocks through its turn and an event
	// stream lasts until interrupted.
	return &client{base: base, token: token, http: &http.Client{Transport: tr}}, tr.CloseIdleConnections
}

// serverURL returns the gateway's base URL: flag, else env, else
// DefaultServer; a bare host:port means http, and a trailing slash is
// dropped.
func serverURL(flag, env string) string {
	s := flag
	if s == "" {
		s = env
	}
	if s == "" {
		s = DefaultServer
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	return strings.TrimRight(s, "/")
}

// token returns the bearer token the flags and environment name, and
// where it came from: --token, else EnvToken, else skein dev's token file,
// else "" (the gateway then answers unauthenticated, unless it runs
// without authentication).
func (a *app) token(c *common) (token, source string) {
	if c.token != "" {
		return c.token, "--token"
	}
	if t := a.getenv(EnvToken); t != "" {
		return t, "$" + EnvToken
	}
	dir := a.getenv(EnvData)
	if dir == "" {
		dir = DefaultDataDir
	}
	path := filepath.Join(dir, DevTokenFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(a.stderr, "skein: no token: %v\n", err)
		}
		return "", "no token (no --token, $" + EnvToken + " or " + path + ")"
	}
	return strings.TrimSpace(string(b)), path
}

// decorate makes a command's errors name the gateway (and, for a refused
// token, where the token came from), and completes its --session and
// --agent flags from the gateway.
func (a *app) decorate(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			return a.describe(run(cmd, args))
		}
	}
	a.complete(cmd)
	for _, sub := range cmd.Commands() {
		a.decorate(sub)
	}
}

// describe adds the gateway, and for an authentication failure the token's
// source, to an error of the gateway.
func (a *app) describe(err error) error {
	if err == nil || a.server == "" {
		return err
	}
	if _, ok := errors.AsType[*UnreachableError](err); ok {
		return fmt.Errorf("%w (is the gateway running? set it with --server or $%s)", err, EnvServer)
	}
	if _, ok := errors.AsType[*APIError](err); !ok {
		return err
	}
	switch ExitCode(err) {
	case ExitUnauth:
		return fmt.Errorf("%w [gateway %s, token: %s]", err, a.server, a.tokenSource)
	case ExitTurnFailed, ExitCancelled:
		return err
	}
	return fmt.Errorf("%w [gateway %s]", err, a.server)
}

func (a *app) openCommand() *cobra.Command {
	var (
		c      common
		agent  string
		cwd    string
		policy string
		inputs string
		runner string
		labels []string
	)
	cmd := &cobra.Command{
		Use:   "open",
		Short: "Open a session (idempotent)",
		Long: `Open the session, creating it with the given agent and options, or restoring
its adapter if it exists. Opening an existing session with different options
fails with session_conflict.

--runner ID pins a new session to that runner, and --label k=v (repeated) to
the least loaded runner with every label: its agent then runs there and
nowhere else, and while that runner is away its prompts fail
agent_unavailable naming it. skein agents --runners lists the runners and
their labels. An existing session is reopened with the runner it is pinned
to unless the flags say otherwise.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			placement, err := placementFlags(runner, labels)
			if err != nil {
				return err
			}
			cl, done := a.client(&c)
			defer done()
			req := openRequest{Agent: agent, Placement: placement}
			info, err := cl.session(cmd.Context(), c.session)
			exists := err == nil
			if exists && placement == nil && info.Runner != "" {
				// A pinned session is reopened where it is pinned, as
				// with its cwd below.
				req.Placement = &placementBody{Runner: &info.Runner}
			}
			if cmd.Flags().Changed("cwd") {
				req.Cwd = &cwd
			} else if isCode(err, string(events.CodeSessionNotFound)) {
				// A new session works in the shell's directory when the
				// workspace holds it.
				req.Cwd = a.shellCwd(cmd.Context(), cl)
			} else if exists && info.Cwd != "" {
				// An existing one keeps its own: reopened with it, so that
				// a session opened in the shell's directory reopens from
				// any other without a conflict.
				req.Cwd = &info.Cwd
			}
			if cmd.Flags().Changed("permission-policy") {
				req.PermissionPolicy = &policy
			}
			if cmd.Flags().Changed("input-policy") {
				req.InputPolicy = &inputs
			}
			if err := cl.open(cmd.Context(), c.session, req); err != nil {
				return fmt.Errorf("open %s: %w", c.session, err)
			}
			_, err = fmt.Fprintf(a.stdout, "session %s is open\n", c.session)
			return err
		},
	}
	c.register(cmd)
	cmd.Flags().StringVar(&agent, "agent", DefaultAgent, "agent ID")
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory of the agent (default: the shell's when the workspace holds it, else the server's default)")
	cmd.Flags().StringVar(&policy, "permission-policy", "", "allow_all (default), reject_all or ask")
	cmd.Flags().StringVar(&inputs, "input-policy", "", "ask (default: a person answers the agent's input requests) or decline")
	cmd.Flags().StringVar(&runner, "runner", "", "pin the session to the runner with this ID")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "pin the session to the least loaded runner with the label `k=v` (repeat for several)")
	return cmd
}

// placementFlags returns the placement --runner and --label ask for, nil
// for none. The gateway checks the IDs and labels (events.ValidLabels);
// what the flags alone get wrong is a usage error.
func placementFlags(runner string, labels []string) (*placementBody, error) {
	switch {
	case runner != "" && len(labels) > 0:
		return nil, usagef("--runner and --label choose the runner two ways: give one of them")
	case runner != "":
		return &placementBody{Runner: &runner}, nil
	case len(labels) == 0:
		return nil, nil
	}
	p := &placementBody{Labels: map[string]string{}}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" || v == "" {
			return nil, usagef("--label %q: want k=v", l)
		}
		if _, dup := p.Labels[k]; dup {
			return nil, usagef("--label %s is given twice", k)
		}
		p.Labels[k] = v
	}
	return p, nil
}

func (a *app) promptCommand() *cobra.Command {
	var (
		c           common
		agent       string
		key         string
		policy      string
		cwd         string
		interactive bool
		queue       bool
		attach      []string
	)
	cmd := &cobra.Command{
		Use:   "prompt TEXT... | prompt -",
		Short: "Send a prompt and print the reply as it streams",
		Long: `Send a prompt (the arguments joined by spaces, or standard input when the only
argument is "-") and print the agent's reply live: message text as it streams,
tool calls and plans as lines of their own. The session is opened with --agent
(and --policy) first if it does not exist. A stop reason other than end_turn is
printed on standard error.

In a session opened with the permission policy "ask", the agent's permission
requests are printed with their options and the command that answers them
(skein respond REQUEST_ID OPTION_ID). When standard input is a terminal and
--interactive is on, the command also asks for a choice (an option's number
or ID) and answers the request itself.`,
		Args:         cobra.MinimumNArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			stdin := cmd.InOrStdin()
			text := strings.Join(args, " ")
			fromStdin := len(args) == 1 && args[0] == "-"
			if fromStdin {
				b, err := io.ReadAll(stdin)
				if err != nil {
					return fmt.Errorf("read prompt from standard input: %w", err)
				}
				text = string(b)
			}
			if strings.TrimSpace(text) == "" {
				return usagef("the prompt is empty")
			}
			t := turn{app: a, session: c.session, agent: agent, attach: attach}
			if cmd.Flags().Changed("policy") {
				if !validPolicy(policy) {
					return usagef("--policy must be %s, %s or %s, not %q", events.PolicyAllowAll, events.PolicyRejectAll, events.PolicyAsk, policy)
				}
				t.policy = &policy
			}
			if cmd.Flags().Changed("cwd") {
				t.cwd = &cwd
			}
			for _, name := range []string{"agent", "policy", "cwd"} {
				if cmd.Flags().Changed(name) {
					t.flags = append(t.flags, "--"+name)
				}
			}
			if cmd.Flags().Changed("idempotency-key") {
				t.key = &key
			}
			t.queue = queue
			// Standard input that held the prompt has nothing left to read.
			if interactive && !fromStdin && isTerminal(stdin) {
				t.input = stdin
			}
			cl, done := a.client(&c)
			defer done()
			t.cl = cl
			return t.run(cmd.Context(), text)
		},
	}
	c.register(cmd)
	cmd.Flags().StringVar(&agent, "agent", DefaultAgent, "agent to open the session with if it does not exist")
	cmd.Flags().StringVar(&policy, "policy", "", "permission policy of a session this command opens: allow_all (default), reject_all or ask")
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory of a session this command opens (default: the shell's when the workspace holds it)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry-safe key: the same key and prompt run one turn")
	cmd.Flags().BoolVar(&queue, "queue", false, "while a turn runs, queue the prompt (print its place and return) instead of failing session_busy")
	cmd.Flags().BoolVar(&interactive, "interactive", true, "ask for permission choices on the terminal (only when standard input is one)")
	cmd.Flags().StringArrayVar(&attach, "attach", nil, "name of an upload (skein upload) the prompt references; repeat for up to 8")
	return cmd
}

// validPolicy reports whether p is a permission policy.
func validPolicy(p string) bool {
	switch p {
	case events.PolicyAllowAll, events.PolicyRejectAll, events.PolicyAsk:
		return true
	}
	return false
}

func (a *app) cancelCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "cancel",
		Short: "Cancel the session's running turn",
		Long: `Cancel the session's running turn and print what happened: cancelled,
no_active_prompt, or, when the turn ended on its own while the cancel waited,
that turn's outcome (completed, failed or cancelled). The turn's prompt returns
with stop reason "cancelled"; message text the agent was still streaming is not
kept in the session's history.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			resp, err := cl.cancel(cmd.Context(), c.session)
			if err != nil {
				return fmt.Errorf("cancel %s: %w", c.session, err)
			}
			_, err = fmt.Fprintln(a.stdout, Visible(resp.Status))
			return err
		},
	}
	c.register(cmd)
	return cmd
}

func (a *app) unloadCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "unload",
		Short: "Unload a session: stop its adapter, keep its history",
		Long: `Unload the session and print "unloaded": its running turn, if any, is
cancelled as by skein cancel, and its adapter is stopped. The session's
metadata and history stay, and its next prompt restores it transparently.
Unloading a session that is already unloaded succeeds.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			if err := cl.unload(cmd.Context(), c.session); err != nil {
				return fmt.Errorf("unload %s: %w", c.session, err)
			}
			_, err := fmt.Fprintln(a.stdout, "unloaded")
			return err
		},
	}
	c.register(cmd)
	return cmd
}

func (a *app) deleteCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "delete",
		Short: "Delete a session: stop it, remove its metadata and history",
		Long: `Delete the session and print "deleted": its running turn, if any, is
cancelled (its pending permission requests end with session_deleted), its
adapter is stopped, and its metadata and history are removed. Opening the same
session ID afterwards starts a new, empty session. Deleting a session that does
not exist, or was already deleted, succeeds.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			if err := cl.deleteSession(cmd.Context(), c.session); err != nil {
				return fmt.Errorf("delete %s: %w", c.session, err)
			}
			_, err := fmt.Fprintln(a.stdout, "deleted")
			return err
		},
	}
	c.register(cmd)
	return cmd
}

func (a *app) respondCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "respond REQUEST_ID OPTION_ID",
		Short: "Answer a pending permission request",
		Long: `Answer the permission request REQUEST_ID of the session with the option
OPTION_ID, as printed by skein prompt (or found in the session's events), and
print "accepted", or "not pending: REASON" when the request was already
answered or ended (already_resolved, prompt_cancelled, adapter_exited,
turn_failed, session_unloaded, session_deleted, unknown_request). Both exit
0; an option the request does not offer fails with invalid_permission_option
and leaves the request pending.`,
		Args:         cobra.ExactArgs(2),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, done := a.client(&c)
			defer done()
			resp, err := cl.respond(cmd.Context(), c.session, args[0], args[1])
			if err != nil {
				return fmt.Errorf("respond to %s: %w", args[0], err)
			}
			_, err = fmt.Fprintln(a.stdout, describeAnswer(resp))
			return err
		},
	}
	c.register(cmd)
	return cmd
}

// describeAnswer returns how an answer to a permission or input request
// is printed: "accepted", or "not pending: REASON".
func describeAnswer(r *statusResponse) string {
	if r.Status == events.PermissionNotPending {
		return "not pending: " + Visible(orDefault(r.Reason, "no reason given"))
	}
	return Visible(r.Status)
}

// printEvent prints one public event: as a JSON line, or in its readable
// one-line form.
func (a *app) printEvent(raw []byte, asJSON bool) error {
	if asJSON {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return fmt.Errorf("event is not JSON: %w", err)
		}
		buf.WriteByte('\n')
		_, err := a.stdout.Write(visibleJSON(buf.Bytes()))
		return err
	}
	var e event
	if err := decodeVisible(raw, &e); err != nil {
		return fmt.Errorf("decode event: %w", err)
	}
	_, err := fmt.Fprintln(a.stdout, oneLine(&e))
	return err
}

func (a *app) agentsCommand() *cobra.Command {
	var (
		c       common
		asJSON  bool
		runners bool
	)
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "List the agents the adapter runners know, and the runners",
		Long: `List every agent a live adapter runner knows, sorted by ID, one a line of
tab-separated fields: its ID, "installed" (its command resolves on at least
one runner) or "not installed", the command a runner starts it with, and the
runners it is installed on, by ID, separated by commas ("-" for none). With
--json, each agent is printed as a JSON object {id, installed,
adapterEntrypoint, runners} on a line.

With --runners, list the live runners instead, sorted by ID, one a line of
tab-separated fields: its ID, its labels as k=v separated by commas ("-" for
none), "placed-only" (it hosts only the sessions placed on it, as an edge
runner does) or "any", its load as adapters/capacity, and the agents
installed on it, separated by commas ("-" for none). With --json, each
runner is printed as the gateway's JSON object {id, agents, labels,
placedOnly, load, capacity} on a line. A session is pinned to a runner with
skein open --runner or --label.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			list, err := cl.agents(cmd.Context())
			if err != nil {
				return fmt.Errorf("list agents: %w", err)
			}
			if runners {
				for _, r := range list.Runners {
					if err := a.printRunner(r, asJSON); err != nil {
						return err
					}
				}
				return nil
			}
			for _, ag := range list.Agents {
				if err := a.printAgent(ag, installedOn(list.Runners, ag.ID), asJSON); err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.registerServer(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each agent, or runner, as a JSON object on a line")
	cmd.Flags().BoolVar(&runners, "runners", false, "list the runners: their labels, load and agents")
	return cmd
}

// installedOn returns the runners, of runners, that have agent id
// installed, in their order.
func installedOn(runners []runner, id string) []string {
	on := []string{}
	for _, r := range runners {
		for _, a := range r.Agents {
			if a.ID == id && a.Installed {
				on = append(on, r.ID)
			}
		}
	}
	return on
}

// printAgent prints one agent: as a JSON line, or as the tab-separated
// fields ID, "installed" or "not installed", ENTRYPOINT and the runners
// it is installed on.
func (a *app) printAgent(ag agent, on []string, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(struct {
			agent
			Runners []string `json:"runners"`
		}{ag, on})
		if err != nil {
			return fmt.Errorf("encode agent %s: %w", ag.ID, err)
		}
		_, err = a.stdout.Write(append(visibleJSON(b), '\n'))
		return err
	}
	installed := "not installed"
	if ag.Installed {
		installed = "installed"
	}
	_, err := fmt.Fprintf(a.stdout, "%s\t%s\t%s\t%s\n", Visible(ag.ID), installed, Visible(ag.AdapterEntrypoint), Visible(orDash(strings.Join(on, ","))))
	return err
}

// printRunner prints one runner: as a JSON line, or as the tab-separated
// fields ID, LABELS, "placed-only" or "any", LOAD/CAPACITY and the agents
// installed on it.
func (a *app) printRunner(r runner, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode runner %s: %w", r.ID, err)
		}
		_, err = a.stdout.Write(append(visibleJSON(b), '\n'))
		return err
	}
	hosts := "any"
	if r.PlacedOnly {
		hosts = "placed-only"
	}
	var agents []string
	for _, ag := range r.Agents {
		if ag.Installed {
			agents = append(agents, ag.ID)
		}
	}
	_, err := fmt.Fprintf(a.stdout, "%s\t%s\t%s\t%d/%d\t%s\n", Visible(r.ID), Visible(orDash(labelsOf(r.Labels))), hosts,
		r.Load, r.Capacity, Visible(orDash(strings.Join(agents, ","))))
	return err
}

// labelsOf writes labels as k=v separated by commas, by key.
func labelsOf(labels map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k+"="+labels[k])
	}
	return strings.Join(out, ",")
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
