package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// The gateway's guards against clients that hold resources without using
// them: a connection is the cost, and a client that sends a body a byte at
// a time, or opens connections by the thousand, or guesses tokens, must
// not be able to make the gateway hold its file descriptors.
//
//   - Bodies are read within Config.BodyReadTimeout (limitBodies). A
//     request refused before its body is read (authentication) is answered
//     at once with Connection: close, so that the server does not read the
//     rest of the body first: a slow sender once held the connection open
//     that way, unauthenticated, for as long as it liked.
//   - A client address holds at most Config.MaxConnsPerAddr connections
//     (limitListener); one past it is closed as it is accepted.
//   - An address whose requests keep failing authentication waits, longer
//     each time, before its requests are looked at again (authBackoff).

// limitBodies bounds the time a request's body may take to arrive.
func (g *Gateway) limitBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		// Best effort: a ResponseWriter without deadlines (a test's
		// recorder) has nothing to bound.
		_ = rc.SetReadDeadline(time.Now().Add(g.cfg.BodyReadTimeout))
		body := &watchedBody{ReadCloser: r.Body, done: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		r.Body = body
		cut := new(bool)
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), cutKey{}, cut)))
		if *cut && !body.sawEOF {
			// A refusal that must not wait for the body (a 401, a
			// backoff's 429): the server would read the rest before
			// closing; end the read at once. Any other unread body is
			// read within the deadline above.
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// cutKey is the context key of the flag by which a handler asks
// limitBodies to read nothing more of its request's body.
type cutKey struct{}

// cutBody asks that r's unread body be dropped, not read, once r is
// answered.
func cutBody(r *http.Request) {
	if cut, ok := r.Context().Value(cutKey{}).(*bool); ok {
		*cut = true
	}
}

// watchedBody is a request body that calls done when it has been read to
// its end: the body's deadline no longer applies to the connection (an
// event stream reads nothing more, and lasts).
type watchedBody struct {
	io.ReadCloser
	done   func()
	sawEOF bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.sawEOF {
		b.sawEOF = true
		b.done()
	}
	return n, err
}

// limitListener closes each connection accepted past perAddr from one
// client address.
type limitListener struct {
	net.Listener
	perAddr int

	mu    sync.Mutex
	conns map[string]int
}

func newLimitListener(ln net.Listener, perAddr int) net.Listener {
	if perAddr <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, perAddr: perAddr, conns: map[string]int{}}
}

// Accept returns the next connection whose address holds fewer than
// perAddr; the others are closed unanswered.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		l.mu.Lock()
		ok := l.conns[addr] < l.perAddr
		if ok {
			l.conns[addr]++
		}
		l.mu.Unlock()
		if ok {
			return &countedConn{Conn: c, release: func() { l.release(addr) }}, nil
		}
		_ = c.Close()
	}
}

func (l *limitListener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns[addr]--; l.conns[addr] <= 0 {
		delete(l.conns, addr)
	}
}

// countedConn gives its address's place back once, when it is closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite passes the half close through: the server half-closes a
// connection whose request it refuses unread (431), and waits a little,
// so that the client reads the answer before the connection goes; a
// plain Close would reset it under the client's feet.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// hostOf is the client address of a connection or request, without its
// port.
func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	return hostPart(a.String())
}

func hostPart(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return host
}

// authBackoff makes an address whose requests keep failing authentication
// wait: after free failures, each further one doubles the wait before the
// address's next request is looked at, from authBackoffFirst up to max.
// An address's failures are forgotten authForget after its last one.
// While an address waits, its requests without a valid token are refused
// unread (rate_limited, Retry-After); a request with a valid token is
// never refused nor counted here (Gateway.authenticate). So the backoff
// bounds the work failed requests cost, not the guessing of tokens: a
// token is safe from guessing by its length (skein dev's and rand.Text's
// carry 130 bits).
type authBackoff struct {
	free  int
	first time.Duration // authBackoffFirst, but in tests
	max   time.Duration

	mu    sync.Mutex
	addrs map[string]*failures
}

// failures is one address's record.
type failures struct {
	n     int       // failures, the last at most authForget apart
	until time.Time // no request of the address is looked at before then
	last  time.Time // the last failure, to forget quiet addresses
}

const (
	authBackoffFirst = 100 * time.Millisecond
	// authForget is how long an address's failures are kept after its
	// last one; authMaxAddrs bounds how many addresses are kept at all
	// (past it the quiet ones are forgotten first).
	authForget   = 10 * time.Minute
	authMaxAddrs = 100_000
)

func newAuthBackoff(free int, max time.Duration) *authBackoff {
	return &authBackoff{free: free, first: authBackoffFirst, max: max, addrs: map[string]*failures{}}
}

// wait returns how long addr must still wait before its next request is
// looked at (0: none).
func (b *authBackoff) wait(addr string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.addrs[addr]
	if f == nil || !now.Before(f.until) {
		return 0
	}
	return f.until.Sub(now)
}

// failed records a failed authentication of addr.
func (b *authBackoff) failed(addr string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.addrs[addr]
	if f == nil {
		if len(b.addrs) >= authMaxAddrs {
			b.forgetLocked(now)
		}
		f = &failures{}
		b.addrs[addr] = f
	}
	if now.Sub(f.last) > authForget {
		f.n = 0 // quiet long enough: start over
	}
	f.n++
	f.last = now
	if over := f.n - b.free; over > 0 {
		d := b.max
		if over < 32 && b.first<<(over-1) < b.max {
			d = b.first << (over - 1)
		}
		f.until = now.Add(d)
	}
}

// forgetLocked drops the addresses quiet for authForget, or, if none is,
// every address not waiting now.
func (b *authBackoff) forgetLocked(now time.Time) {
	for a, f := range b.addrs {
		if now.Sub(f.last) > authForget {
			delete(b.addrs, a)
		}
	}
	if len(b.addrs) < authMaxAddrs {
		return
	}
	for a, f := range b.addrs {
		if !now.Before(f.until) {
			delete(b.addrs, a)
		}
	}
}
