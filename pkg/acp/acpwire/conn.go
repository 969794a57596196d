package acpwire

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
)

// Log attribute keys. logKeyErr is the key Skein's services use for an
// error (pkg/events LogKeyErr), repeated here because this package
// imports nothing of Skein.
const (
	logKeyErr    = "err"
	logKeyMethod = "rpc_method"
	logKeyID     = "rpc_id"
	logKeyLine   = "line"
)

// Options configures a Conn. The zero value is usable: 16 MiB lines, every
// notification and response dropped, every request answered -32601.
//
// All callbacks run on the Conn's single reader goroutine, one at a time, in
// the order the lines arrived on the stream, each finishing before the next
// line is read. A callback therefore holds up reading while it runs: it must
// not block on something only a later line can provide (never call the
// blocking Conn.Call from a callback; CallAsync, Notify, Respond and
// RespondError are fine, though a write blocks while the adapter is not
// reading its stdin). The *Message passed in is the callback's to keep; its
// bytes are never reused. Panics in callbacks are not recovered.
type Options struct {
	// MaxLineBytes bounds one line, not counting its '\n'. Zero means
	// DefaultMaxLineBytes. A longer line ends the connection: Err returns an
	// ErrLineTooLong error, pending calls fail, and the reader stops as soon
	// as the limit is crossed, so it never holds much more than MaxLineBytes.
	MaxLineBytes int

	// OnNotification receives every notification (session/update,
	// $/cancel_request, _vendor extensions, ...). Nil drops them.
	OnNotification func(*Message)

	// OnRequest receives every agent->client request. The handler owns the
	// answer: it must eventually call Conn.Respond or Conn.RespondError with
	// the message's ID exactly once, from any goroutine, now or later; the
	// Conn does not track or time out inbound requests. When OnRequest is nil
	// the reader answers every request itself with CodeMethodNotFound and
	// data {"method": <name>} (the TypeScript SDK's shape).
	OnRequest func(*Message)

	// OnResponse observes every response, including ones that match no
	// pending call (late answers to calls abandoned through ctx) and ones
	// with a null id. It is called before the matching call is completed,
	// so by the time Call returns or CallAsync's done runs, OnResponse has
	// returned. Nil observes nothing.
	OnResponse func(*Message)

	// OnProtocolError receives each non-blank line that is not a JSON-RPC
	// 2.0 message (err is an ErrProtocol *Error), and the
	// reader then CONTINUES with the next line: ACP forbids non-ACP bytes on
	// stdout, but real adapters sometimes print junk there, and one bad line
	// must not kill a session. A final line cut off by EOF that does not
	// parse is reported here too. line is a copy the callback may keep. Nil
	// logs the line (truncated) at Warn. Blank lines (only spaces, tabs and
	// '\r') are skipped silently.
	OnProtocolError func(line []byte, err error)

	// OnIdle is called when the reader has handled every whole line it has
	// read and is about to wait for more (or the stream has ended): the
	// moment to flush what the callbacks gathered from a burst of lines,
	// at no cost in latency, since a line that arrives alone is followed
	// by OnIdle at once. Nil does nothing.
	OnIdle func()

	// SendCancelRequest makes Call send $/cancel_request {"requestId": id}
	// when its ctx is done before the response arrives. The agent must
	// still answer the request; that late answer reaches only OnResponse.
	// Off by default: older agents do not know the method, and a prompt is
	// cancelled with session/cancel (Conn.Cancel), not with this.
	SendCancelRequest bool

	// Logger receives the Conn's own diagnostics. Nil discards them.
	Logger *slog.Logger
}

// Conn is a client's JSON-RPC 2.0 connection to one ACP adapter process:
// newline-delimited messages read from r (the adapter's stdout) and written
// to w (its stdin).
//
// Reading: NewConn starts one reader goroutine, the only goroutine that
// invokes callbacks (Options, CallAsync's done). Messages are dispatched
// strictly in stream order. Because a prompt's session/update notifications
// precede its response on the stream, every notification read before a
// response has been handled before that response completes its call.
//
// Writing: every write (Call, CallAsync, Notify, Respond, RespondError,
// WriteRaw and the typed helpers) is one complete line written with a
// single w.Write under one mutex, so messages never interleave. Any number
// of goroutines may write concurrently.
//
// Ids: outgoing requests get numeric ids 0, 1, 2, ... in the order they are
// sent; responses are matched on the numeric value. Ids of incoming
// requests (numbers or strings) are kept verbatim and must be echoed back
// verbatim. The two directions have separate id spaces.
//
// Ending: the connection ends when the reader stops (EOF, a read error, an
// over-long line) or when Close is called, whichever comes first; Err then
// says why. From then on every write fails with that error, blocking Calls
// return it, and the reader completes each pending CallAsync with a
// synthesized error message before closing Done. Done closing is the signal
// for the owner to Close the Conn and reap the adapter process.
type Conn struct {
	r    io.Reader
	w    io.Writer
	opts Options
	lg   *slog.Logger

	wmu sync.Mutex // serializes writes to w

	mu      sync.Mutex
	nextID  int64
	pending map[int64]func(*Message) // outstanding calls by id; nil after the reader stops
	err     error                    // why the connection ended; nil while it runs
	closed  bool                     // Close was called

	stopped chan struct{} // closed when err is set
	done    chan struct{} // closed when the reader goroutine has finished
}

// NewConn returns a Conn reading messages from r and writing them to w, and
// starts its reader goroutine. The Conn owns r and w from now on: nothing
// else may read r or write w.
func NewConn(r io.Reader, w io.Writer, opts Options) *Conn {
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	c := &Conn{
		r:       r,
		w:       w,
		opts:    opts,
		lg:      lg,
		pending: make(map[int64]func(*Message)),
		stopped: make(chan struct{}),
		done:    make(chan struct{}),
	}
	go c.read()
	return c
}

// Done returns a channel that is closed when the reader goroutine has
// stopped and every pending CallAsync has been completed. No callback runs
// after Done is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection runs, then why it ended, as an
// *Error: of kind ErrClosed when the adapter closed its stdout (its Err is
// then io.EOF), reading failed (the read error), or Close was called; of
// kind ErrLineTooLong when a line exceeded MaxLineBytes. The first cause
// wins and never changes.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection: it records an ErrClosed "connection closed"
// error as Err (unless the connection had already ended), makes
// blocked Calls and all later writes fail with it, and closes w and then r
// when they implement io.Closer (closing the adapter's stdin, which asks it
// to exit, and unblocking the reader). It does not wait for the reader
// goroutine; wait on Done for that. A reader that cannot be closed stops
// when its next line arrives, without dispatching it. After Close, the only
// callbacks still to run are the one dispatching the current line, if any,
// and the done callbacks of pending CallAsyncs, which the reader runs with
// synthesized errors as it stops. Close returns the errors from closing w
// and r; calling it again does nothing and returns nil.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.stop(newError(ErrClosed, nil, "connection closed"))

	var errs []error
	wc, wok := c.w.(io.Closer)
	if wok {
		errs = append(errs, wc.Close())
	}
	if rc, ok := c.r.(io.Closer); ok && !(wok && sameValue(rc, wc)) {
		errs = append(errs, rc.Close())
	}
	return errors.Join(errs...)
}

// sameValue reports whether a and b hold the same comparable value (one
// io.ReadWriteCloser passed as both r and w), without panicking on
// incomparable types.
func sameValue(a, b any) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// stop records cause as the reason the connection ended, unless one is
// already recorded.
func (c *Conn) stop(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = cause
	close(c.stopped)
}

// isStopped reports whether the connection has ended.
func (c *Conn) isStopped() bool {
	select {
	case <-c.stopped:
		return true
	default:
		return false
	}
}

// read is the reader goroutine.
func (c *Conn) read() {
	defer close(c.done)
	lr := newLineReader(c.r, c.opts.MaxLineBytes)
	for !c.isStopped() {
		line, err := lr.next()
		if line != nil && !c.isStopped() {
			c.dispatch(line, err != nil)
		}
		if err != nil {
			c.stop(readError(err))
			break
		}
		if !lr.hasLine() {
			c.idle()
		}
	}
	c.idle()
	c.failPending()
}

func (c *Conn) idle() {
	if f := c.opts.OnIdle; f != nil {
		f()
	}
}

// readError turns the line reader's final error into the connection's.
func readError(err error) error {
	if errors.Is(err, ErrLineTooLong) {
		return err
	}
	if errors.Is(err, io.EOF) {
		return newError(ErrClosed, io.EOF, "adapter closed its stdout")
	}
	return newError(ErrClosed, err, "read adapter stdout")
}

// failPending completes every outstanding call with a synthesized error
// response, in id order, on the reader goroutine. No call can be added
// afterwards: the connection has ended, so CallAsync refuses.
func (c *Conn) failPending() {
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	cause := c.err
	c.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(pending)) {
		pending[id](&Message{
			ID: idBytes(id),
			Error: &RPCError{
				Code:    CodeInternalError,
				Message: "adapter connection ended before the response: " + cause.Error(),
			},
		})
	}
}

// dispatch handles one line. truncated marks a final line cut off by EOF.
func (c *Conn) dispatch(line []byte, truncated bool) {
	if len(trimSpace(line)) == 0 {
		return
	}
	m, err := Parse(line)
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok && truncated {
			err = protocolError("final line cut off at EOF: %s", e.Message)
		}
		if f := c.opts.OnProtocolError; f != nil {
			f(line, err)
		} else {
			c.lg.Warn("adapter wrote a line that is not ACP", logKeyErr, err, logKeyLine, preview(line))
		}
		return
	}
	switch m.Kind() {
	case KindNotification:
		if f := c.opts.OnNotification; f != nil {
			f(m)
		}
	case KindRequest:
		if f := c.opts.OnRequest; f != nil {
			f(m)
			return
		}
		data := append(append([]byte(`{"method":`), appendString(nil, m.Method)...), '}')
		err := c.RespondError(m.ID, &RPCError{Code: CodeMethodNotFound, Message: "Method not found", Data: data})
		if err != nil {
			c.lg.Warn("cannot answer an unhandled request", logKeyMethod, m.Method, logKeyErr, err)
		}
	case KindResponse:
		c.complete(m)
	}
}

// complete hands a response to OnResponse and then to its pending call.
func (c *Conn) complete(m *Message) {
	if f := c.opts.OnResponse; f != nil {
		f(m)
	}
	var done func(*Message)
	if id, ok := integer(m.ID); ok {
		c.mu.Lock()
		done = c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
	}
	if done == nil {
		c.lg.Debug("response matches no pending call", logKeyID, string(m.ID))
		return
	}
	done(m)
}

// preview returns the start of line for a log record.
func preview(line []byte) string {
	const limit = 200
	if len(line) > limit {
		return string(line[:limit]) + "..."
	}
	return string(line)
}
