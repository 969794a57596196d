// Package tcprelay is a TCP relay under a test's control, for partitions
// without root: a relay listens on loopback and forwards every connection
// to one target, and the test cuts and heals the link between them.
//
// Two kinds of cut, as networks fail:
//
//   - Cut: a refused link (a firewall that rejects, a peer that
//     restarted). Every connection is closed, and new ones are accepted and
//     closed at once, until Heal. Both ends notice at once.
//   - Blackhole: a silent link (a cable pulled, a laptop asleep, Wi-Fi
//     gone). Connections stay open but no byte moves either way, and new
//     ones are accepted and held; neither end notices but by its own
//     timeouts. Heal moves what was held, in order, as TCP's
//     retransmission would after a short outage.
//
// The relay never drops or reorders a byte of a connection it forwards: a
// stream either flows whole or is closed.
package tcprelay

import (
	"net"
	"sync"
)

// Relay forwards the connections it accepts to its target.
type Relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	state state
	// healed is closed, and replaced, at each Heal: a copy held by a
	// blackhole waits on it.
	healed chan struct{}
	conns  map[net.Conn]struct{}
	// dialed are the connections to the target, by their local port: the
	// port the target sees the client at.
	dialed map[int]net.Conn
	closed bool
	wg     sync.WaitGroup
}

type state int

const (
	open state = iota
	refused
	silent
)

// New starts a relay on a free loopback port that forwards to target
// (host:port).
func New(target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{ln: ln, target: target, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}, dialed: map[int]net.Conn{}}
	r.wg.Go(r.accept)
	return r, nil
}

// Addr is the relay's host:port: what a client dials instead of the
// target.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Port is the relay's port.
func (r *Relay) Port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// Dialed reports whether the target sees a connection of this relay's at
// port: the client port its monitoring (a nats-server's /connz) shows.
func (r *Relay) Dialed(port int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.dialed[port]
	return ok
}

// Cut closes every connection, and every new one at once, until Heal.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(refused)
	r.closeConnsLocked()
}

// Blackhole stops every byte, both ways, on every connection, new ones
// included, until Heal. Connections stay open.
func (r *Relay) Blackhole() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(silent)
}

// Heal lets connections through again; what a blackhole held moves on.
func (r *Relay) Heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(open)
}

// Close stops the relay and closes every connection.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	r.setLocked(refused)
	r.closeConnsLocked()
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}

// setLocked moves the relay to st, waking what a blackhole held when it
// leaves one.
func (r *Relay) setLocked(st state) {
	if r.state == silent && st != silent {
		close(r.healed)
		r.healed = make(chan struct{})
	}
	r.state = st
}

func (r *Relay) closeConnsLocked() {
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
	clear(r.dialed)
}

func (r *Relay) accept() {
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		r.wg.Go(func() { r.serve(in) })
	}
}

// serve forwards one accepted connection to the target.
func (r *Relay) serve(in net.Conn) {
	r.mu.Lock()
	if r.state == refused {
		r.mu.Unlock()
		in.Close()
		return
	}
	r.conns[in] = struct{}{}
	r.mu.Unlock()
	// Behind a blackhole, not even the connection reaches the target.
	if !r.pass() {
		r.forget(in)
		in.Close()
		return
	}
	out, err := net.Dial("tcp", r.target)
	if err != nil {
		r.forget(in)
		in.Close()
		return
	}
	port := out.LocalAddr().(*net.TCPAddr).Port
	if !r.track(out, port) {
		in.Close()
		out.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.pipe(out, in) })
	wg.Go(func() { r.pipe(in, out) })
	wg.Wait()
	r.forget(in)
	r.forget(out)
	r.mu.Lock()
	delete(r.dialed, port)
	r.mu.Unlock()
}

// track remembers out, dialed from port, unless the relay cut or closed
// meanwhile.
func (r *Relay) track(out net.Conn, port int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == refused || r.closed {
		return false
	}
	r.conns[out] = struct{}{}
	r.dialed[port] = out
	return true
}

func (r *Relay) forget(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// pipe copies src to dst, holding each chunk while the relay is a
// blackhole, until either end closes or the relay cuts; then it closes
// both (NATS never half-closes a connection).
func (r *Relay) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !r.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits while the relay is a blackhole, and reports whether the
// connection may carry on (false once cut or closed).
func (r *Relay) pass() bool {
	for {
		r.mu.Lock()
		st, healed, closed := r.state, r.healed, r.closed
		r.mu.Unlock()
		switch {
		case closed || st == refused:
			return false
		case st == open:
			return true
		}
		<-healed
	}
}
