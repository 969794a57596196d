// Command cluster starts and stops the local three-node cluster of `make
// cluster`: three nats-server processes configured by ops/cluster/nats, and
// gateway, session, adapter-runner, history and notify as separate skein serve
// processes, each its own NATS user, on fixed loopback ports. The processes
// outlive the command; `cluster down` stops them.
//
//	go run ./ops/tools/cluster up   -dir .cluster -nats-server bin/nats-server -skein bin/skein
//	go run ./ops/tools/cluster down -dir .cluster
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"skein.dev/internal/cluster"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: cluster up|down [flags]")
	}
	fs := flag.NewFlagSet("cluster "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", ".cluster", "the cluster's state: stores, logs, cluster.json")
	conf := fs.String("conf", "ops/cluster/nats", "the nats-server configuration (node.conf, accounts.conf)")
	natsServer := fs.String("nats-server", "bin/nats-server", "the nats-server binary")
	skein := fs.String("skein", "bin/skein", "the skein binary")
	sessions := fs.Int("sessions", 1, "session service replicas")
	gateways := fs.Int("gateways", 1, "gateway replicas")
	runners := fs.Int("runners", 1, "adapter-runners, each with its own ID and data directory")
	tls := fs.Bool("tls", false, "TLS for clients and routes (node-tls.conf), with a CA and certificates made in <dir>/tls")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		return a
	}
	switch args[0] {
	case "up":
		if _, err := cluster.Load(*dir); err == nil {
			return fmt.Errorf("%s/cluster.json exists: a cluster runs there (make cluster-stop), or remove the directory", *dir)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		c, err := cluster.Start(ctx, cluster.Options{
			Dir: abs(*dir), ConfDir: abs(*conf), NATSServer: abs(*natsServer), Skein: []string{abs(*skein)},
			FixedPorts: true, Detach: true, Sessions: *sessions, Gateways: *gateways, Runners: *runners, TLS: *tls,
			// The walkthrough (README, docs/OPERATIONS.md) talks to the
			// test agent: make cluster is for trying Skein out.
			TestAgents: true,
		})
		if err != nil {
			return err
		}
		if err := c.Save(); err != nil {
			c.Stop()
			return err
		}
		return writeEnv(c, stdout)
	case "down":
		c, err := cluster.Load(*dir)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stdout, "no cluster in %s\n", *dir)
			return nil
		}
		if err != nil {
			return err
		}
		c.Stop()
		fmt.Fprintf(stdout, "stopped the cluster in %s (its data stays; rm -rf %s forgets it)\n", *dir, *dir)
		return os.Remove(filepath.Join(*dir, "cluster.json"))
	}
	return fmt.Errorf("unknown command %q: up or down", args[0])
}

// writeEnv writes <dir>/env, the variables that point the skein and nats
// CLIs at the cluster as its operator, and prints where everything is.
func writeEnv(c *cluster.Cluster, w io.Writer) error {
	envFile := filepath.Join(c.Dir, "env")
	if err := os.WriteFile(envFile, []byte(c.Env()), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(w, "Skein is running as a cluster.\n\n")
	for i, n := range c.Nodes {
		fmt.Fprintf(w, "  nats %s   nats://127.0.0.1:%d  monitor http://127.0.0.1:%d  route %d  leafnodes %d  pid %d\n", n.Name, c.ClientPorts[i], c.MonitorPorts[i], c.RoutePorts[i], c.LeafPorts[i], n.Pid)
	}
	gateways := 0
	for _, p := range c.Services {
		line := fmt.Sprintf("  %-18s metrics %s  pid %d", p.Name, c.Metrics[p.Name], p.Pid)
		if strings.HasPrefix(p.Name, cluster.Gateway+"-") {
			line += "  HTTP " + c.HTTP[gateways]
			gateways++
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "\n  logs    %s\n  secrets %s (passwords, admin token; mode 0600)\n\n", filepath.Join(c.Dir, "logs"), filepath.Join(c.Dir, "cluster.json"))
	fmt.Fprintf(w, "Operate it (docs/OPERATIONS.md):\n\n  source %s\n  skein list\n  nats stream info ACP_LOG\n  nats micro ls\n\n", envFile)
	fmt.Fprintf(w, "Join a runner of your own machine (docs/OPERATIONS.md, Edge runners):\n\n  skein provision runner laptop --out laptop.creds\n  skein runner --join \"$SKEIN_LEAF_URL\" --creds laptop.creds --data ~/.skein-laptop\n\nStop it: make cluster-stop\n")
	return nil
}
