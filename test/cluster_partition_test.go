package test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"skein.dev/internal/cluster"
	"skein.dev/internal/tcprelay"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// TestClusterPartitions cuts parts of the cluster off while they stay
// alive, mid-turn, through the relays of a relayed cluster
// (cluster.Options.Relayed): the faults kills cannot show, because a
// partitioned process keeps running, keeps its state, and comes back.
//
//   - partition-log-leader: the ACP_LOG leader is cut off from the other
//     two nodes (silently: a blackhole, noticed by Raft's timeouts alone)
//     while both session services stay connected to it, and nothing else.
//     The majority elects a new leader; the old one's appends are never
//     acknowledged. Every turn ends with its whole output or a typed
//     outcome; no acknowledged event is lost (the viewers' events are all
//     in the audited log), and no prompt reaches an agent twice (each
//     session's log has one turn per fault).
//   - partition-session: session-1 is cut off from NATS (a blackhole)
//     for longer than its owner lease. Its sessions are taken over by
//     session-2; when it returns it writes nothing (the fence: every log
//     passes the audit, one turn per fault); requests it held get typed
//     errors, which the clients retry with their keys.
//   - partition-gateway: gateway-1 is cut off from the node it is
//     connected to (refused): it reconnects to another node, and its
//     viewers lose nothing.
//
// The quick version (make test) runs them on 3 sessions; make test-long on
// faultSessions, after a baseline with no fault, and logs each one's cost
// as the fault tests do.
func TestClusterPartitions(t *testing.T) {
	o := rigOptions{relayed: true, quick: true, sessions: 3}
	if testutil.Long() {
		o.sessions = faultSessions
	}
	r := startFaultRig(t, o)
	if testutil.Long() {
		// The baseline each partition's cost is measured against.
		r.run(fault{
			name:    "none",
			inject:  func() string { return "" },
			restore: func() {},
			strict:  true,
			want:    []string{"completed"},
		})
	}
	r.run(r.logLeaderPartition())
	r.run(r.sessionPartition("session-1"))
	r.run(r.gatewayPartition("gateway-1"))
}

// How long a partition lasts: the leader's past an election (6 to 8 s on
// these nodes), a session service's past its owner lease (15 s).
const (
	leaderPartitionFor  = 12 * time.Second
	sessionPartitionFor = 20 * time.Second
)

// logLeaderPartition blackholes the ACP_LOG leader's routes, with both
// session services connected to it, for leaderPartitionFor.
func (r *faultRig) logLeaderPartition() fault {
	var node string
	var sessions []string
	return fault{
		name: "partition-log-leader",
		inject: func() string {
			node = r.leader(events.StreamLog)
			i := r.nodeIndex(node)
			sessions = r.servicesOf(cluster.Session)
			for _, s := range sessions {
				r.pinService(s, i)
			}
			r.c.PartitionNode(i, (*tcprelay.Relay).Blackhole)
			r.waitOrFail(leaderPartitionFor)
			r.c.HealNode(i)
			return fmt.Sprintf("node=%s for=%v", node, leaderPartitionFor)
		},
		restore: func() {
			for _, s := range sessions {
				r.unpinService(s)
			}
		},
		returnWithin: time.Minute,
	}
}

// sessionPartition blackholes every connection of session service name
// for sessionPartitionFor.
func (r *faultRig) sessionPartition(name string) fault {
	return fault{
		name: "partition-" + name,
		inject: func() string {
			for _, rl := range r.c.ClientRelays(name) {
				rl.Blackhole()
			}
			r.waitOrFail(sessionPartitionFor)
			for _, rl := range r.c.ClientRelays(name) {
				rl.Heal()
			}
			return fmt.Sprintf("for=%v", sessionPartitionFor)
		},
		restore:      func() {},
		returnWithin: time.Minute,
	}
}

// gatewayPartition cuts gateway name's connection to the node it is on:
// it reconnects through another.
func (r *faultRig) gatewayPartition(name string) fault {
	var cut *tcprelay.Relay
	return fault{
		name: "partition-" + name,
		inject: func() string {
			node := r.serviceNode(name)
			cut = r.c.ClientRelays(name)[node]
			cut.Cut()
			return "node=" + r.c.Nodes[node].Name
		},
		restore: func() { cut.Heal() },
		gw:      1,
		want:    []string{"completed"},
	}
}

// waitOrFail waits d, or fails the test when it ends first.
func (r *faultRig) waitOrFail(d time.Duration) {
	r.t.Helper()
	if !wait(r.t.Context(), d) {
		r.t.Fatal(r.t.Context().Err())
	}
}

// nodeIndex returns the index in Nodes of the node named name.
func (r *faultRig) nodeIndex(name string) int {
	r.t.Helper()
	i := slices.IndexFunc(r.c.Nodes, func(p *cluster.Proc) bool { return p.Name == name })
	if i < 0 {
		r.t.Fatalf("no node %s", name)
	}
	return i
}

// servicesOf returns the names of target's processes.
func (r *faultRig) servicesOf(target string) []string {
	var names []string
	for _, p := range r.c.Services {
		if len(p.Name) > len(target) && p.Name[:len(target)+1] == target+"-" {
			names = append(names, p.Name)
		}
	}
	return names
}

// pinService cuts service name's relays to every node but node, and waits
// until its connection is on node.
func (r *faultRig) pinService(name string, node int) {
	r.t.Helper()
	for n, rl := range r.c.ClientRelays(name) {
		if n != node {
			rl.Cut()
		}
	}
	deadline := time.Now().Add(time.Minute)
	for r.serviceNode(name) != node {
		if time.Now().After(deadline) || !wait(r.t.Context(), 50*time.Millisecond) {
			r.t.Fatalf("%s did not move its connection to %s", name, r.c.Nodes[node].Name)
		}
	}
}

// unpinService heals every relay of service name.
func (r *faultRig) unpinService(name string) {
	for _, rl := range r.c.ClientRelays(name) {
		rl.Heal()
	}
}

// serviceNode returns the index of the node service name's connection is
// on, or -1: the node whose /connz holds a connection from one of its
// relays.
func (r *faultRig) serviceNode(name string) int {
	r.t.Helper()
	for i := range r.c.Nodes {
		var connz struct {
			Connections []struct {
				Port int `json:"port"`
			} `json:"connections"`
		}
		if err := r.monitor(i, "connz?limit=4096", &connz); err != nil {
			continue
		}
		for _, c := range connz.Connections {
			if r.relayedFrom(name, i, c.Port) {
				return i
			}
		}
	}
	return -1
}

// relayedFrom reports whether node's client port seen at port is service
// name's connection through its relay to that node.
func (r *faultRig) relayedFrom(name string, node, port int) bool {
	rs := r.c.ClientRelays(name)
	return node < len(rs) && rs[node].Dialed(port)
}
