package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterReadyTimeout bounds each step of a cluster's start: the servers
// accepting connections, a meta leader with every peer current, and the
// first replicated stream.
const clusterReadyTimeout = 30 * time.Second

// RunCluster starts n JetStream servers in this process as one cluster
// ("natstest") on loopback: each with file storage in a directory of its own
// under tb.TempDir() (under dir/<name> with WithStoreDir(dir)), clients on a
// loopback port the kernel chooses, and routes to every node on ports
// reserved beforehand. The options apply to every node. It returns once the
// cluster takes streams of n replicas (it creates and deletes one, since
// the first create after the meta leader's election can fail), so a caller
// may create its own at once. Connect to a node with Connect (TCP), or to
// all of them with ConnectURL(tb, ClusterURL(nodes)). The servers are shut
// down when the test ends.
//
// The nodes must listen for clients: a server that does not never starts
// its routes (nats-server 2.15 starts them after the client listener).
func RunCluster(tb testing.TB, n int, opts ...Option) []*server.Server {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("natstest: a cluster of %d servers", n)
	}
	// A reserved route port can be taken by another process between its
	// release and the server's listen; that fails the start, and another
	// set of ports is tried.
	var err error
	for range 3 {
		var nodes []*server.Server
		if nodes, err = startCluster(tb, n, opts); err == nil {
			return nodes
		}
	}
	tb.Fatalf("natstest: cluster of %d: %v", n, err)
	return nil
}

// ClusterURL returns the client URLs of nodes, comma-separated, as
// nats.Connect takes them: a client fails over between the nodes.
func ClusterURL(nodes []*server.Server) string {
	urls := make([]string, len(nodes))
	for i, ns := range nodes {
		urls[i] = ns.ClientURL()
	}
	return strings.Join(urls, ",")
}

// startCluster makes one attempt at RunCluster. A failure shuts down what
// it started.
func startCluster(tb testing.TB, n int, opts []Option) (nodes []*server.Server, err error) {
	tb.Helper()
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	routes := make([]*url.URL, n)
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	defer func() {
		if err != nil {
			for _, ns := range nodes {
				ns.Shutdown()
				ns.WaitForShutdown()
			}
			nodes = nil
		}
	}()
	base := tb.TempDir()
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("natstest-%d", i+1),
			JetStream:  true,
			StoreDir:   base,
			Host:       "127.0.0.1",
			Port:       -1,
			NoLog:      true,
			NoSigs:     true,
			Cluster:    server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		}
		for _, opt := range opts {
			opt(o)
		}
		// One store per node, under the directory the options name.
		o.StoreDir = filepath.Join(o.StoreDir, o.ServerName)
		o.DontListen = false
		ns, err := server.NewServer(o)
		if err != nil {
			return nodes, fmt.Errorf("new server %s: %w", o.ServerName, err)
		}
		nodes = append(nodes, ns)
		go ns.Start()
	}
	for _, ns := range nodes {
		if !ns.ReadyForConnections(clusterReadyTimeout) {
			return nodes, fmt.Errorf("server %s not ready after %s", ns.Name(), clusterReadyTimeout)
		}
	}
	if err := waitClusterReady(tb.Context(), nodes); err != nil {
		return nodes, err
	}
	if err := probeStream(tb.Context(), nodes[0], n); err != nil {
		return nodes, err
	}
	tb.Cleanup(func() {
		for _, ns := range nodes {
			ns.Shutdown()
		}
		for _, ns := range nodes {
			ns.WaitForShutdown()
		}
	})
	return nodes, nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago: all n are held open together, so none is returned twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a route port: %w", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// waitClusterReady waits until some node is the JetStream meta leader, it
// counts every node as a peer, and every node's meta log is current (what
// nats-server's own cluster tests wait for).
func waitClusterReady(ctx context.Context, nodes []*server.Server) error {
	ctx, cancel := context.WithTimeout(ctx, clusterReadyTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if clusterReady(nodes) {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("no JetStream meta leader with %d current peers: %w", len(nodes), context.Cause(ctx))
		}
	}
}

func clusterReady(nodes []*server.Server) bool {
	var leader *server.Server
	for _, ns := range nodes {
		if ns.JetStreamIsLeader() {
			leader = ns
		}
	}
	if leader == nil || len(leader.JetStreamClusterPeers()) != len(nodes) {
		return false
	}
	for _, ns := range nodes {
		if !ns.JetStreamIsCurrent() {
			return false
		}
	}
	return true
}

// probeStream creates a stream of the given replicas through ns, retrying
// until the cluster takes it, and deletes it.
func probeStream(ctx context.Context, ns *server.Server, replicas int) error {
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", ns.Name(), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, clusterReadyTimeout)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "NATSTEST_PROBE", Subjects: []string{"natstest.probe"}, Storage: jetstream.MemoryStorage, Replicas: replicas}
	for {
		attempt, stop := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.CreateStream(attempt, cfg)
		if err == nil {
			err = js.DeleteStream(attempt, cfg.Name)
		}
		stop()
		if err == nil {
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("no R%d stream: %w", replicas, errors.Join(err, context.Cause(ctx)))
		}
	}
}
