// Package cluster runs Skein as it is deployed: a three-node JetStream
// cluster of nats-server processes, configured by ops/cluster/nats, and the
// four services as separate skein serve processes, each connected as its
// own NATS user. `make cluster` starts one on fixed loopback ports and
// leaves it running (ops/tools/cluster); the fault, soak and runbook tests
// start one on free ports, kill and restart its processes, and stop it when
// they end.
//
// Every process is a real OS process in a session of its own, its output
// appended to <dir>/logs/<name>.log. Readiness is read, never waited out: a
// node is ready when its /healthz says so, a service when its log says
// "skein serving".
package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The users of ops/cluster/nats/accounts.conf, and the environment variable
// that holds each one's password.
const (
	UserGateway = "skein-gateway"
	UserSession = "skein-session"
	UserRunner  = "skein-adapter-runner"
	UserHistory = "skein-history"
	UserNotify  = "skein-notify"
	UserOps     = "skein-ops"
	UserReader  = "reader-default"
	UserSys     = "sys"
)

var passwordEnv = map[string]string{
	UserGateway: "SKEIN_GATEWAY_PASSWORD",
	UserSession: "SKEIN_SESSION_PASSWORD",
	UserRunner:  "SKEIN_RUNNER_PASSWORD",
	UserHistory: "SKEIN_HISTORY_PASSWORD",
	UserNotify:  "SKEIN_NOTIFY_PASSWORD",
	UserOps:     "SKEIN_OPS_PASSWORD",
	UserReader:  "SKEIN_READER_PASSWORD",
	UserSys:     "SKEIN_SYS_PASSWORD",
}

// The skein serve targets, and the user each connects as.
const (
	Gateway = "gateway"
	Session = "session"
	Runner  = "adapter-runner"
	History = "history"
	Notify  = "notify"
)

var serviceUser = map[string]string{Gateway: UserGateway, Session: UserSession, Runner: UserRunner, History: UserHistory, Notify: UserNotify}

// Options say what to run and where.
type Options struct {
	// Dir holds the cluster's state: node stores, runner data, logs, the
	// gateway's tokens file, and cluster.json (see Save).
	Dir string
	// ConfDir is ops/cluster/nats: node.conf and accounts.conf. The nodes
	// run a copy of it, <dir>/nats, in which skein provision runner writes
	// the edge runners' users (AccountsFile).
	ConfDir string
	// NATSServer is the nats-server binary.
	NATSServer string
	// Skein is the command line that runs skein (the binary, or a test
	// binary and its arguments), and SkeinEnv what it needs in its
	// environment besides the cluster's.
	Skein    []string
	SkeinEnv []string
	// FixedPorts uses the well-known loopback ports of `make cluster`
	// (clients 4222-4224, routes 6222-6224, monitoring 8222-8224, gateways
	// 8080 and up, metrics 9101 and up). Otherwise free ports are picked.
	FixedPorts bool
	// Gateways and Sessions are the replicas of the gateway and the session
	// service (1 when zero). One history and one notify service run.
	Gateways, Sessions int
	// Runners is how many adapter-runners run (1 when zero): each one its
	// own machine, as far as Skein can tell, with an ID, a data directory
	// and a metrics port of its own (adapter-runner-1, adapter-runner-2, ...).
	// Args and Env of target adapter-runner go to every one.
	Runners int
	// Args are extra skein serve flags per target.
	Args map[string][]string
	// Env is extra environment per target.
	Env map[string][]string
	// Detach leaves the processes running when the starter exits (make
	// cluster); see Proc.Detach.
	Detach bool
	// TLS runs the nodes with node-tls.conf: TLS for clients and routes,
	// both sides verified, with a CA and certificates made under
	// <dir>/tls (Cluster.TLS). The services and provision connect with
	// --nats-tls-ca/cert/key, and URL gives tls:// URLs.
	TLS bool
	// Relayed runs every route and every service's connection through a
	// relay the test controls, for partitions (relay.go). Not with
	// Detach: the relays live in the starting process.
	Relayed bool
	// TestAgents makes every runner offer the built-in test agent as
	// "test" and "demo" (--adapter-runner.test-agents): the cluster's
	// tests and the walkthrough of `make cluster` talk to it.
	TestAgents bool
}

// Cluster is a running cluster: three nodes and the services.
type Cluster struct {
	Dir       string
	Nodes     []*Proc
	Services  []*Proc // gateway-1.., session-1.., adapter-runner-1.., history-1
	Passwords map[string]string
	// Token is the gateway's admin token for namespace default.
	Token string
	// ClientPorts, RoutePorts, MonitorPorts and LeafPorts are the nodes'.
	ClientPorts, RoutePorts, MonitorPorts, LeafPorts []int
	// HTTP are the gateways' base URLs (http://127.0.0.1:8080), Metrics
	// each service's /metrics URL by process name.
	HTTP    []string
	Metrics map[string]string
	// TLS are the certificates of a cluster started with Options.TLS, nil
	// otherwise: a client needs the CA and the client certificate.
	TLS *TLSFiles

	opts   Options
	relays *relays // Options.Relayed
}

// Start starts the nodes, waits for the cluster to be healthy, provisions
// Skein's streams and buckets at R3 as the ops user, then starts the
// services and waits until each is serving. On failure it stops what it
// started.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Gateways == 0 {
		o.Gateways = 1
	}
	if o.Sessions == 0 {
		o.Sessions = 1
	}
	if o.Runners == 0 {
		o.Runners = 1
	}
	c := &Cluster{Dir: o.Dir, opts: o, Passwords: map[string]string{}, Metrics: map[string]string{}}
	for _, dir := range []string{"logs", "nodes", "runner"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, dir), 0o700); err != nil {
			return nil, err
		}
	}
	// A runner started as root runs its adapters as another user, which
	// must pass through to the runner's data directory: search, not list,
	// it and the cluster's directory above it (make cluster's .cluster,
	// which MkdirAll made 0700).
	if err := os.Chmod(filepath.Join(o.Dir, "runner"), 0o711); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(o.Dir); err != nil {
		return nil, err
	} else if err := os.Chmod(o.Dir, fi.Mode().Perm()|0o111); err != nil {
		return nil, err
	}
	for user := range passwordEnv {
		c.Passwords[user] = randomHex(16)
	}
	if o.TLS {
		var err error
		if c.TLS, err = writeTLS(filepath.Join(o.Dir, "tls")); err != nil {
			return nil, err
		}
	}
	if err := c.writeTokens(); err != nil {
		return nil, err
	}
	if err := c.copyConf(); err != nil {
		return nil, err
	}
	services := o.Gateways + o.Sessions + o.Runners + 2 // history, notify
	ports, err := c.ports(12 + 2*services)
	if err != nil {
		return nil, err
	}
	c.ClientPorts, c.RoutePorts, c.MonitorPorts, c.LeafPorts = ports[0:3], ports[3:6], ports[6:9], ports[9:12]
	httpPorts, metricsPorts := ports[12:12+o.Gateways], ports[12+o.Gateways:]

	if err := c.startNodes(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.provision(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	names := make([]string, 0, services)
	for i := range o.Gateways {
		names = append(names, fmt.Sprintf("%s-%d", Gateway, i+1))
	}
	for i := range o.Sessions {
		names = append(names, fmt.Sprintf("%s-%d", Session, i+1))
	}
	for i := range o.Runners {
		names = append(names, fmt.Sprintf("%s-%d", Runner, i+1))
	}
	names = append(names, History+"-1", Notify+"-1")
	for i, name := range names {
		target := name[:strings.LastIndexByte(name, '-')]
		metrics := fmt.Sprintf("127.0.0.1:%d", metricsPorts[i])
		c.Metrics[name] = "http://" + metrics + "/metrics"
		args := append(append([]string{}, o.Skein[1:]...), "serve", "--target="+target, "--replicas=3", "--log-level=info", "--metrics-listen="+metrics)
		switch target {
		case Gateway:
			addr := fmt.Sprintf("127.0.0.1:%d", httpPorts[i])
			c.HTTP = append(c.HTTP, "http://"+addr)
			args = append(args, "--gateway.http-addr="+addr, "--gateway.tokens-file="+filepath.Join(o.Dir, "tokens.json"))
		case Runner:
			args = append(args, "--adapter-runner.id="+name, "--adapter-runner.data-dir="+filepath.Join(o.Dir, "runner", name))
			if o.TestAgents {
				args = append(args, "--adapter-runner.test-agents")
			}
		}
		args = append(append(args, c.TLS.skeinArgs()...), o.Args[target]...)
		natsURL, err := c.clientURL(name, serviceUser[target])
		if err != nil {
			c.Stop()
			return nil, err
		}
		env := append(append([]string{"NATS_URL=" + natsURL}, o.SkeinEnv...), o.Env[target]...)
		c.Services = append(c.Services, &Proc{Name: name, Path: o.Skein[0], Args: args, Env: env,
			Log: filepath.Join(o.Dir, "logs", name+".log"), Ready: "skein serving", Detach: o.Detach})
	}
	for _, p := range c.Services {
		if err := p.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, p := range c.Services {
		if err := p.WaitReady(ctx); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.AwaitRouted(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// ports returns n ports: the fixed ones of make cluster, or free ones.
func (c *Cluster) ports(n int) ([]int, error) {
	if c.opts.FixedPorts {
		p := []int{4222, 4223, 4224, 6222, 6223, 6224, 8222, 8223, 8224, 7422, 7423, 7424}
		for i := range c.opts.Gateways {
			p = append(p, 8080+i)
		}
		for i := range n - len(p) {
			p = append(p, 9101+i)
		}
		return p, nil
	}
	// Listen on all at once so that no two are the same, then free them
	// for the processes. Another process may take one in between: then a
	// start fails and says so.
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	p := make([]int, n)
	for i := range p {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		p[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return p, nil
}

func (c *Cluster) startNodes(ctx context.Context) error {
	routes := make([]string, 3)
	for i, p := range c.RoutePorts {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	conf := filepath.Join(c.confDir(), c.TLS.nodeConf())
	if c.opts.Relayed {
		if err := c.startRouteRelays(); err != nil {
			return err
		}
		var err error
		if conf, err = c.relayedConf(); err != nil {
			return err
		}
	}
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		env := []string{
			"NATS_SERVER_NAME=" + name,
			"NATS_HOST=127.0.0.1",
			"NATS_PORT=" + strconv.Itoa(c.ClientPorts[i]),
			"NATS_HTTP_PORT=" + strconv.Itoa(c.MonitorPorts[i]),
			"NATS_CLUSTER_PORT=" + strconv.Itoa(c.RoutePorts[i]),
			"NATS_LEAF_HOST=127.0.0.1",
			"NATS_LEAF_PORT=" + strconv.Itoa(c.LeafPorts[i]),
			"NATS_ROUTES=" + c.routesOf(i, routes),
			// Quoted: nats-server reads an unquoted value only up to a comma.
			"NATS_STORE_DIR=" + strconv.Quote(filepath.Join(c.Dir, "nodes", name)),
		}
		if c.relays != nil {
			env = append(env, "NATS_CLUSTER_ADVERTISE="+c.relayedAdvertise(i))
		}
		env = append(env, c.TLS.nodeTLSEnv()...)
		for user, v := range passwordEnv {
			env = append(env, v+"="+c.Passwords[user])
		}
		c.Nodes = append(c.Nodes, &Proc{Name: name, Path: c.opts.NATSServer,
			Args: []string{"-c", conf}, Env: env,
			Log: filepath.Join(c.Dir, "logs", name+".log"), Health: fmt.Sprintf("http://127.0.0.1:%d/healthz", c.MonitorPorts[i]), Detach: c.opts.Detach})
	}
	for _, n := range c.Nodes {
		if err := n.Start(); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := n.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// provision creates Skein's streams and buckets at R3, as the ops user.
// Right after the cluster forms the meta leader may not be elected yet, so
// it is retried while it fails for that.
func (c *Cluster) provision(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		cmd := exec.CommandContext(ctx, c.opts.Skein[0], append(append(append([]string{}, c.opts.Skein[1:]...), "provision", "--replicas=3"), c.TLS.skeinArgs()...)...)
		cmd.Env = append(append(os.Environ(), c.opts.SkeinEnv...), "NATS_URL="+c.URL(UserOps))
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("skein provision: %v\n%s", err, out)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// URL returns the cluster's client URLs with user's credentials, comma
// separated, for NATS_URL or nats --server.
func (c *Cluster) URL(user string) string {
	urls := make([]string, len(c.ClientPorts))
	for i, p := range c.ClientPorts {
		u := url.URL{Scheme: c.TLS.scheme(), User: url.UserPassword(user, c.Passwords[user]), Host: fmt.Sprintf("127.0.0.1:%d", p)}
		urls[i] = u.String()
	}
	return strings.Join(urls, ",")
}

// LeafURL returns the nodes' leafnodes listeners, comma separated: what
// skein runner --join takes (SKEIN_LEAF_URL).
func (c *Cluster) LeafURL() string {
	scheme := "nats-leaf"
	if c.TLS != nil {
		scheme = "tls"
	}
	urls := make([]string, len(c.LeafPorts))
	for i, p := range c.LeafPorts {
		urls[i] = fmt.Sprintf("%s://127.0.0.1:%d", scheme, p)
	}
	return strings.Join(urls, ",")
}

// AccountsFile is the accounts.conf the nodes run, in which skein
// provision runner writes the edge runners' users.
func (c *Cluster) AccountsFile() string { return filepath.Join(c.confDir(), "accounts.conf") }

// confDir is the nodes' copy of Options.ConfDir.
func (c *Cluster) confDir() string { return filepath.Join(c.Dir, "nats") }

// Env is <dir>/env, what points the skein and nats CLIs at the cluster as
// its operator: NATS_URL (the ops user), SKEIN_URL and SKEIN_TOKEN (the
// gateway and its admin token), and what skein provision runner and skein
// runner --join need: SKEIN_LEAF_URL, SKEIN_ACCOUNTS_FILE and
// SKEIN_SYS_NATS (the system user, which asks the nodes to reload). With
// TLS, the CA and client certificate too, for the nats CLI (NATS_CA, ...)
// and for skein (SKEIN_NATS_TLS_*; SKEIN_TLS_CA, the CA skein runner
// checks the leafnodes listener against).
func (c *Cluster) Env() string {
	var b strings.Builder
	for _, kv := range [][2]string{
		{"NATS_URL", c.URL(UserOps)}, {"SKEIN_URL", c.HTTP[0]}, {"SKEIN_TOKEN", c.Token},
		{"SKEIN_LEAF_URL", c.LeafURL()}, {"SKEIN_ACCOUNTS_FILE", c.AccountsFile()}, {"SKEIN_SYS_NATS", c.URL(UserSys)},
	} {
		fmt.Fprintf(&b, "export %s=%q\n", kv[0], kv[1])
	}
	if c.TLS != nil {
		fmt.Fprintf(&b, "export NATS_CA=%q\nexport NATS_CERT=%q\nexport NATS_KEY=%q\n", c.TLS.CA, c.TLS.ClientCert, c.TLS.ClientKey)
		fmt.Fprintf(&b, "export SKEIN_NATS_TLS_CA=%q\nexport SKEIN_NATS_TLS_CERT=%q\nexport SKEIN_NATS_TLS_KEY=%q\nexport SKEIN_TLS_CA=%q\n", c.TLS.CA, c.TLS.ClientCert, c.TLS.ClientKey, c.TLS.CA)
	}
	return b.String()
}

// Service returns the service process of that name (gateway-1, ...), or nil.
func (c *Cluster) Service(name string) *Proc {
	for _, p := range c.Services {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Node returns the node of that server name (n1, n2, n3), or nil.
func (c *Cluster) Node(name string) *Proc {
	for _, p := range c.Nodes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Stop stops the services, then the nodes: SIGTERM, and SIGKILL for what
// has not exited in 30 seconds.
func (c *Cluster) Stop() {
	stopAll(c.Services)
	stopAll(c.Nodes)
	c.closeRelays()
}

// routesOf is node i's NATS_ROUTES: every node's route URL, or, relayed,
// its relays to the others.
func (c *Cluster) routesOf(i int, routes []string) string {
	if c.relays != nil {
		return c.relayedRoutes(i)
	}
	return "[" + strings.Join(routes, ", ") + "]"
}

func stopAll(ps []*Proc) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { _ = p.Stop() })
	}
	wg.Wait()
}

// writeTokens writes the gateway's tokens file: one admin of namespace
// default, whose token is c.Token (also in <dir>/admin-token).
func (c *Cluster) writeTokens() error {
	c.Token = randomHex(24)
	sum := sha256.Sum256([]byte(c.Token))
	tokens, _ := json.Marshal([]map[string]any{{"sha256": hex.EncodeToString(sum[:]), "principal": "admin", "namespaces": []string{"default"}, "role": "admin"}})
	if err := os.WriteFile(filepath.Join(c.Dir, "tokens.json"), tokens, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "admin-token"), []byte(c.Token), 0o600)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Proc is one process of the cluster: a node or a service.
type Proc struct {
	Name string
	Path string
	Args []string
	Env  []string // added to this process's environment
	Log  string
	// Health is an HTTP URL that answers 200 once the process is ready
	// (a node's /healthz); Ready a line its log writes once ready (a
	// service's "skein serving"). One of the two is set.
	Health string
	Ready  string
	// Pid is the process's ID while it runs; after a Load, the ID it had.
	Pid int
	// Detach runs the process in a session of its own, to outlive the one
	// that started it (make cluster). Otherwise it is killed when its
	// starter dies, where the system can say so (Linux), so that a test
	// that crashes leaves no servers behind.
	Detach bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	offset int64 // the log's size when the process started
}

// Start starts the process, its output appended to its log. It runs in a
// session of its own, so that a terminal's signals do not reach it.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s: already running", p.Name)
		}
	}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	p.offset = fi.Size()
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr(p.Detach)
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	f.Close()
	p.cmd, p.Pid, p.done = cmd, cmd.Process.Pid, make(chan struct{})
	done := p.done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

// PID returns the process's ID, safely while another goroutine restarts it
// (Pid is written by Start).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Pid
}

// Running reports whether the process runs.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return p.Pid != 0 && syscall.Kill(p.Pid, 0) == nil
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited is closed when the process started last has exited.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() error { return p.signal(syscall.SIGKILL, time.Minute) }

// Stop sends SIGTERM, and SIGKILL if the process has not exited in 30 s.
func (p *Proc) Stop() error {
	if err := p.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		return p.Kill()
	}
	return nil
}

// Restart starts the process again and waits until it is ready.
func (p *Proc) Restart(ctx context.Context) error {
	if err := p.Start(); err != nil {
		return err
	}
	return p.WaitReady(ctx)
}

func (p *Proc) signal(sig syscall.Signal, wait time.Duration) error {
	p.mu.Lock()
	cmd, done, pid := p.cmd, p.done, p.Pid
	p.mu.Unlock()
	if cmd == nil {
		// A process of a saved cluster (Load): not a child of this one.
		if pid == 0 || syscall.Kill(pid, sig) != nil {
			return nil
		}
		deadline := time.Now().Add(wait)
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s (pid %d): still running %v after %v", p.Name, pid, wait, sig)
			}
			time.Sleep(50 * time.Millisecond) // polls another process's exit: there is nothing to wait on
		}
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("%s: still running %v after %v", p.Name, wait, sig)
	}
}

// WaitReady waits until the process is ready, for at most two minutes, and
// fails early if it exits.
func (p *Proc) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if p.ready(ctx) {
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited before it was ready:\n%s", p.Name, p.Tail(4096))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w\n%s", p.Name, ctx.Err(), p.Tail(4096))
		case <-tick.C:
		}
	}
}

func (p *Proc) ready(ctx context.Context) bool {
	if p.Health != "" {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.Health, nil)
		resp, err := healthClient.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	f, err := os.Open(p.Log)
	if err != nil {
		return false
	}
	defer f.Close()
	p.mu.Lock()
	off := p.offset
	p.mu.Unlock()
	b, err := io.ReadAll(io.NewSectionReader(f, off, 1<<40))
	return err == nil && bytes.Contains(b, []byte(p.Ready))
}

// healthClient keeps no connection open between polls: a test that ends
// leaves no idle connection's goroutines behind.
var healthClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}

// Violations returns the permission violations the nodes logged: a
// client's, each line naming the user ("SKEIN/user:skein-session") and the
// subject it was refused, and a leaf connection's (an edge runner's),
// `Publish Violation on "<subject>" - Check other side configuration`
// after the connection's address. A service whose permissions in
// accounts.conf are too narrow shows here first.
func (c *Cluster) Violations() []string {
	var out []string
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, " Violation - ") || strings.Contains(line, " Violation on ") {
				out = append(out, n.Name+": "+strings.TrimSpace(line))
			}
		}
	}
	return out
}

// Tail returns at most the last n bytes of the process's log.
func (p *Proc) Tail(n int64) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(b)
}

// LogSince returns what the log holds after the process's last start.
func (p *Proc) LogSince() string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	p.mu.Lock()
	off := p.offset
	p.mu.Unlock()
	if off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

// state is cluster.json: what make cluster-stop and the tools need of a
// cluster another process started.
type state struct {
	Dir          string            `json:"dir"`
	Nodes        []procState       `json:"nodes"`
	Services     []procState       `json:"services"`
	Passwords    map[string]string `json:"passwords"`
	Token        string            `json:"token"`
	ClientPorts  []int             `json:"clientPorts"`
	RoutePorts   []int             `json:"routePorts"`
	MonitorPorts []int             `json:"monitorPorts"`
	LeafPorts    []int             `json:"leafPorts"`
	HTTP         []string          `json:"http"`
	Metrics      map[string]string `json:"metrics"`
	TLS          *TLSFiles         `json:"tls,omitempty"`
}

type procState struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	Log  string `json:"log"`
}

// Save writes <dir>/cluster.json (mode 0600: it holds the passwords).
func (c *Cluster) Save() error {
	s := state{Dir: c.Dir, Passwords: c.Passwords, Token: c.Token, ClientPorts: c.ClientPorts,
		RoutePorts: c.RoutePorts, MonitorPorts: c.MonitorPorts, LeafPorts: c.LeafPorts, HTTP: c.HTTP, Metrics: c.Metrics, TLS: c.TLS}
	for _, p := range c.Nodes {
		s.Nodes = append(s.Nodes, procState{p.Name, p.Pid, p.Log})
	}
	for _, p := range c.Services {
		s.Services = append(s.Services, procState{p.Name, p.Pid, p.Log})
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "cluster.json"), b, 0o600)
}

// Load reads the cluster that Save wrote in dir. Its processes can be
// stopped (Stop), not restarted.
func Load(dir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "cluster.json"), err)
	}
	c := &Cluster{Dir: s.Dir, Passwords: s.Passwords, Token: s.Token, ClientPorts: s.ClientPorts,
		RoutePorts: s.RoutePorts, MonitorPorts: s.MonitorPorts, LeafPorts: s.LeafPorts, HTTP: s.HTTP, Metrics: s.Metrics, TLS: s.TLS}
	for _, p := range s.Nodes {
		c.Nodes = append(c.Nodes, &Proc{Name: p.Name, Pid: p.Pid, Log: p.Log})
	}
	for _, p := range s.Services {
		c.Services = append(c.Services, &Proc{Name: p.Name, Pid: p.Pid, Log: p.Log})
	}
	if len(c.Nodes) == 0 {
		return nil, errors.New("cluster.json names no nodes")
	}
	return c, nil
}
