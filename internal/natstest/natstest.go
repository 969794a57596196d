// Package natstest runs a real nats-server with JetStream inside a test
// process. Tests import it; services never do, so their binaries do not link
// the server.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Option changes the server options before the server starts.
type Option func(*server.Options)

// WithListen makes the server listen on a loopback TCP port (chosen by the
// kernel), for tests that need a separate process to connect.
func WithListen() Option {
	return func(o *server.Options) {
		o.DontListen = false
		o.Host = "127.0.0.1"
		o.Port = -1
	}
}

// WithStoreDir sets the JetStream store directory, so a test can restart a
// server on the same data.
func WithStoreDir(dir string) Option {
	return func(o *server.Options) { o.StoreDir = dir }
}

// Run starts a JetStream server with file storage in tb.TempDir(). By default
// it listens on no port and traps no signals. It is shut down when the test
// ends.
func Run(tb testing.TB, opts ...Option) *server.Server {
	tb.Helper()
	o := &server.Options{
		ServerName: "natstest",
		JetStream:  true,
		StoreDir:   tb.TempDir(),
		DontListen: true,
		Port:       -1,
		NoLog:      true,
		NoSigs:     true,
	}
	for _, opt := range opts {
		opt(o)
	}
	ns, err := server.NewServer(o)
	if err != nil {
		tb.Fatalf("natstest: new server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		tb.Fatal("natstest: server not ready after 10s")
	}
	quiet := attachLogger(tb, ns, o.ServerName)
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
		quiet()
	})
	return ns
}

// RequestTimeout is the request timeout of Connect's connections.
const RequestTimeout = 30 * time.Second

// Connect returns a client connection to ns (in-process unless ns listens),
// closed when the test ends. Its requests without a deadline of their own
// wait up to RequestTimeout, not nats.go's 2 s: a test is a bound on what
// it checks, and a loaded machine must not fail it by a timeout it did not
// choose. opts may set another.
func Connect(tb testing.TB, ns *server.Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	opts = append([]nats.Option{nats.Timeout(RequestTimeout)}, opts...)
	url := ""
	if ns.Addr() != nil {
		url = ns.ClientURL()
	} else {
		opts = append(opts, nats.InProcessServer(ns))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		tb.Fatalf("natstest: connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// WithMaxPayload sets the largest message the server accepts (its
// max_payload; nats-server's default is 1 MiB, skein dev's 8 MiB).
func WithMaxPayload(n int32) Option {
	return func(o *server.Options) { o.MaxPayload = n }
}
