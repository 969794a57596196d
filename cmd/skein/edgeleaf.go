package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/edgeusers"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// edgeLeaf is the nats-server skein runner --join embeds: a leaf node of
// the cluster with no listener of its own, whose one remote is the
// cluster's leafnodes listener, authenticated as the runner's nkey user.
// The runner connects to it in process.
//
// A leaf node rather than the runner's own connection to the cluster: a
// client cannot speak the leaf protocol, and only a leaf connection may
// carry an edge credential (accounts.conf allows it nothing else), so that
// the leafnodes listener is the one door the cluster opens to runners
// outside it. The hub tells the leaf what the credential may do, and the
// leaf itself forwards nothing else; the hub checks again, and cuts a leaf
// that tries. The leaf is also where the runner keeps its adapters'
// output while the link is down: a JetStream of its own domain
// (edgeDomain), on the runner's disk, holds its outbox
// (adapterrunner.Outbox).
type edgeLeaf struct {
	srv *server.Server
	// refused is closed once the cluster refused the credential: revoked,
	// or another cluster's. The link is never back then.
	refused chan struct{}
	once    sync.Once
	cred    events.RunnerID // the runner the credential is for
}

// edgeMaxPayload is the largest message the leaf takes from the runner:
// the cluster's (ops/cluster/nats/node.conf, max_payload).
const edgeMaxPayload = 8 << 20

// edgeDomain is the JetStream domain of runner id's leaf node: its own,
// not the cluster's (events.JetStreamDomain), so that neither reaches
// into the other's streams.
func edgeDomain(id string) string { return "skein-runner-" + id }

// startEdgeLeaf starts the leaf node for runner id, dialing urls (comma
// separated, nats-leaf:// or tls://) with cred, its JetStream's store in
// storeDir. tlsCA, when set, is the PEM file of the CA that signed the
// cluster's certificates; a tls:// URL without it checks them against the
// system's roots. Its log goes to lg.
func startEdgeLeaf(lg *slog.Logger, id, urls string, cred edgeusers.Credential, tlsCA, storeDir string) (*edgeLeaf, error) {
	var remote server.RemoteLeafOpts
	useTLS := tlsCA != ""
	for raw := range strings.SplitSeq(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--join %q: not a URL (nats-leaf://host:7422, or tls://host:7422)", raw)
		}
		switch u.Scheme {
		case "nats-leaf", "nats":
		case "tls":
			useTLS = true
		default:
			return nil, fmt.Errorf("--join %q: the scheme is nats-leaf:// or tls://", raw)
		}
		if u.User != nil {
			return nil, fmt.Errorf("--join %q: a runner authenticates with its credential (--creds), not a user in the URL", u.Redacted())
		}
		remote.URLs = append(remote.URLs, u)
	}
	remote.Nkey = string(cred.Seed)
	// The outbox's subjects are the leaf's own: the link never carries
	// them, whatever the hub asks.
	remote.DenyExports = []string{adapterrunner.OutboxSubjects}
	if useTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if tlsCA != "" {
			pem, err := os.ReadFile(tlsCA)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", tlsCA)
			}
		}
		remote.TLSConfig = cfg
	}
	opts := &server.Options{
		ServerName:      "skein-runner-" + id,
		DontListen:      true,
		NoSigs:          true,
		MaxPayload:      edgeMaxPayload,
		LeafNode:        server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{&remote}},
		JetStream:       true,
		JetStreamDomain: edgeDomain(id),
		StoreDir:        storeDir,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("leaf node: %w", err)
	}
	l := &edgeLeaf{srv: srv, refused: make(chan struct{}), cred: events.RunnerID(cred.Name)}
	srv.SetLoggerV2(&leafLog{lg: lg.With("svc", "leaf"), leaf: l}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("leaf node: not ready after 10s")
	}
	return l, nil
}

// awaitLink waits until the link to the cluster is up and the cluster has
// told the leaf what it serves (its interest in ACP_IO's subjects), for at
// most timeout; it fails at once when the cluster refuses the credential.
func (l *edgeLeaf) awaitLink(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A subject the credential may publish: the hub tells the leaf only of
	// those. (Whether the runner's ID is the credential's, the hub decides
	// at its first heartbeat.)
	probe := events.IOSubject(events.DefaultNamespace, "probe", l.cred)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if l.srv.NumLeafNodes() > 0 && l.srv.GlobalAccount().SubscriptionInterest(probe) {
			return nil
		}
		select {
		case <-l.refused:
			return errLeafRefused
		case <-ctx.Done():
			return fmt.Errorf("no link to the cluster after %v (see the leaf node's warnings above)", timeout)
		case <-tick.C: // the server has no event for it: its link state is polled
		}
	}
}

// errLeafRefused is the error of a leaf whose credential the cluster
// refused.
var errLeafRefused = errors.New("the cluster refused the runner's credential: it was revoked, or is not this cluster's")

// connect returns the runner's connection to the leaf, in process, whose
// replies come under the inbox only runner id's credential may read.
func (l *edgeLeaf) connect(id string) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(l.srv), nats.Name("skein runner "+id),
		nats.CustomInboxPrefix(edgeusers.InboxPrefix(id)), nats.MaxReconnects(-1))
}

// awaitJetStream waits until the leaf's own JetStream answers: it starts
// after the server takes connections.
func (l *edgeLeaf) awaitJetStream(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := js.AccountInfo(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the leaf node's JetStream, for the outbox: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (l *edgeLeaf) shutdown() {
	l.srv.Shutdown()
	l.srv.WaitForShutdown()
}

// leafLog is the leaf node's logger: its warnings and errors (a link that
// cannot be made, a refusal) at warning level, the rest at debug level.
// A refusal of the credential closes edgeLeaf.refused.
type leafLog struct {
	lg   *slog.Logger
	leaf *edgeLeaf
}

func (g *leafLog) Noticef(format string, v ...any) { g.lg.Debug(fmt.Sprintf(format, v...)) }
func (g *leafLog) Debugf(format string, v ...any)  { g.lg.Debug(fmt.Sprintf(format, v...)) }
func (g *leafLog) Tracef(format string, v ...any)  {}
func (g *leafLog) Warnf(format string, v ...any)   { g.lg.Warn(fmt.Sprintf(format, v...)) }
func (g *leafLog) Fatalf(format string, v ...any)  { g.lg.Error(fmt.Sprintf(format, v...)) }
func (g *leafLog) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	g.lg.Warn(msg)
	// What the spoke logs when the hub refuses its CONNECT:
	// "Leafnode Error 'Authorization Violation'" (client.go, processErr).
	if strings.Contains(msg, "Authorization Violation") {
		g.leaf.once.Do(func() { close(g.leaf.refused) })
	}
}
