package cluster

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"skein.dev/internal/tcprelay"
)

// Partitions (Options.Relayed). Every link of the cluster runs through a
// relay the test controls (package tcprelay): each route, one relay per
// ordered pair of nodes (node i dials node j through RouteRelay(i, j)),
// and each service's connection, one relay per service and node. A node
// is cut off from its peers, alive, by cutting the relays of its routes
// (PartitionNode); a service from NATS by cutting its relays
// (ClientRelays).
//
// Two settings keep every byte on the relays: each node advertises, for
// routes, an address of a relay into it (a node that learns of a peer
// through gossip dials it there, not at its route port), and advertises no
// client URLs (cluster no_advertise: a service's client does not learn the
// nodes' own ports and dial them directly).

// relays are a relayed cluster's: routes[i][j] carries node i's route to
// node j; clients[name][n] a service's connection to node n.
type relays struct {
	routes  [3][3]*tcprelay.Relay
	clients map[string][]*tcprelay.Relay
}

// startRouteRelays starts a relay for every ordered pair of nodes, and
// writes the node configuration that routes through them.
func (c *Cluster) startRouteRelays() error {
	c.relays = &relays{clients: map[string][]*tcprelay.Relay{}}
	for i := range 3 {
		for j := range 3 {
			if i == j {
				continue
			}
			r, err := tcprelay.New(fmt.Sprintf("127.0.0.1:%d", c.RoutePorts[j]))
			if err != nil {
				return err
			}
			c.relays.routes[i][j] = r
		}
	}
	return nil
}

// relayedRoutes is node i's NATS_ROUTES, through its relays.
func (c *Cluster) relayedRoutes(i int) string {
	var routes []string
	for j := range 3 {
		if r := c.relays.routes[i][j]; r != nil {
			routes = append(routes, "nats-route://"+r.Addr())
		}
	}
	return "[" + strings.Join(routes, ", ") + "]"
}

// relayedConf writes <dir>/node-relayed.conf: node.conf, then its cluster
// block again with the advertise settings above (NATS_CLUSTER_ADVERTISE,
// per node), and returns its path.
func (c *Cluster) relayedConf() (string, error) {
	rel, err := filepath.Rel(c.Dir, filepath.Join(c.confDir(), c.TLS.nodeConf()))
	if err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`# Written by internal/cluster for a relayed cluster (tests only).
include %q
cluster {
  name: skein
  host: $NATS_HOST
  port: $NATS_CLUSTER_PORT
  routes: $NATS_ROUTES
  advertise: $NATS_CLUSTER_ADVERTISE
  no_advertise: true
}
`, rel)
	path := filepath.Join(c.Dir, "node-relayed.conf")
	return path, os.WriteFile(path, []byte(conf), 0o600)
}

// relayedAdvertise is node i's route address for gossip: a relay into it.
func (c *Cluster) relayedAdvertise(i int) string {
	return c.relays.routes[(i+1)%3][i].Addr()
}

// clientURL returns user's URLs for service name: through relays of its
// own in a relayed cluster, else URL(user).
func (c *Cluster) clientURL(name, user string) (string, error) {
	if c.relays == nil {
		return c.URL(user), nil
	}
	urls := make([]string, len(c.ClientPorts))
	for n, p := range c.ClientPorts {
		r, err := tcprelay.New(fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return "", err
		}
		c.relays.clients[name] = append(c.relays.clients[name], r)
		u := url.URL{Scheme: c.TLS.scheme(), User: url.UserPassword(user, c.Passwords[user]), Host: r.Addr()}
		urls[n] = u.String()
	}
	return strings.Join(urls, ","), nil
}

// RouteRelay returns the relay of node from's route to node to (indexes
// into Nodes), or nil when the cluster is not relayed.
func (c *Cluster) RouteRelay(from, to int) *tcprelay.Relay {
	if c.relays == nil {
		return nil
	}
	return c.relays.routes[from][to]
}

// ClientRelays returns service name's relays, one per node, or nil when
// the cluster is not relayed.
func (c *Cluster) ClientRelays(name string) []*tcprelay.Relay {
	if c.relays == nil {
		return nil
	}
	return c.relays.clients[name]
}

// PartitionNode cuts node i's routes to and from both peers, with cut
// (tcprelay.Relay.Cut or Blackhole); the node and its clients stay up.
// HealNode ends it.
func (c *Cluster) PartitionNode(i int, cut func(*tcprelay.Relay)) {
	for j := range 3 {
		if j != i {
			cut(c.relays.routes[i][j])
			cut(c.relays.routes[j][i])
		}
	}
}

// HealNode heals node i's routes.
func (c *Cluster) HealNode(i int) {
	for j := range 3 {
		if j != i {
			c.relays.routes[i][j].Heal()
			c.relays.routes[j][i].Heal()
		}
	}
}

// closeRelays closes every relay.
func (c *Cluster) closeRelays() {
	if c.relays == nil {
		return
	}
	for i := range 3 {
		for j := range 3 {
			if r := c.relays.routes[i][j]; r != nil {
				r.Close()
			}
		}
	}
	for _, rs := range c.relays.clients {
		for _, r := range rs {
			r.Close()
		}
	}
}
