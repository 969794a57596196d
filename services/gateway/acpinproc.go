package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"

	"skein.dev/internal/lifecycle"
	"skein.dev/pkg/events"
)

// The ACP bridge is a client of the public HTTP API (package acpbridge).
// Inside the gateway it reaches that API through inProcess, an
// http.RoundTripper that serves each request with the gateway's own
// handler, in this process, with no socket: the request is authenticated,
// rate-limited, bounded and routed exactly as it would be had the client
// sent it itself, with the caller's own Authorization, and nothing of it
// goes through the network or a second copy of the rules.
//
// The response streams. RoundTrip returns as soon as the handler has
// written its status (WriteHeader, a first Write or a Flush), and the body
// is a pipe the handler writes into as the bridge reads: an event stream
// (SSE) reaches the bridge event by event, and a bridge that stops reading
// holds the handler at its next write, as a client's TCP window would.
// The handler's context ends when the request's does, or when the bridge
// closes the body, so that a stream the bridge leaves ends.
//
// Each handler runs in a goroutine of work, so that whoever closes work
// (the gateway's Run) waits for it; a request after that is refused.

// inProcess is the RoundTripper of the bridge's API client.
type inProcess struct {
	h    http.Handler
	work *lifecycle.Group
	lg   *slog.Logger
	// remoteAddr is the address of the ACP client the bridge serves: the
	// inner requests are its requests (an address's authentication
	// backoff counts them).
	remoteAddr string
}

// errInProcessStopped refuses a request made once the gateway stopped.
var errInProcessStopped = events.Errorf(events.CodeUnavailable, "the gateway is shutting down")

// RoundTrip serves req with t.h and returns the response once its status is
// written. It never reads req's body itself: the handler does, and it is
// closed when the handler returns.
func (t *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// The handler's context is a fresh one, as a server's would be: it
	// carries none of the caller's values, only its end.
	hctx, cancel := context.WithCancel(context.Background())
	sreq := serverRequest(hctx, req, t.remoteAddr)
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	body := &pipeBody{pr: pr, cancel: cancel, gone: &w.readerGone}
	// The request's end ends the handler, and its writes too: a write
	// waits for a reader, not for a context.
	stopCancel := context.AfterFunc(ctx, func() { body.abort(ctx.Err()) })
	started := t.work.Go(func() {
		defer stopCancel()
		defer cancel()
		defer func() {
			if req.Body != nil {
				_ = req.Body.Close()
			}
		}()
		defer func() {
			p := recover()
			if p == nil {
				w.finish(nil)
				return
			}
			// As http.Server does: a panic ends this response, not the
			// process; ErrAbortHandler is the handler's way to abort it.
			if p != http.ErrAbortHandler {
				t.lg.Error("panic serving an in-process request", "method", req.Method, "path", req.URL.Path,
					events.LogKeyErr, fmt.Sprint(p), "stack", string(debug.Stack()))
			}
			w.finish(fmt.Errorf("in-process %s %s: the handler panicked: %v", req.Method, req.URL.Path, p))
		}()
		t.h.ServeHTTP(w, sreq)
	})
	if !started {
		stopCancel()
		cancel()
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, errInProcessStopped
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
		// The handler ends with its context (abort, above).
		return nil, ctx.Err()
	}
	if w.failed != nil {
		return nil, w.failed
	}
	resp := &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          body,
		ContentLength: -1,
		Request:       req,
	}
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		resp.ContentLength = n
	}
	return resp, nil
}

// serverRequest returns req as a server receives it: its URL reduced to
// the path and query, RequestURI set, from remoteAddr, on ctx.
func serverRequest(ctx context.Context, req *http.Request, remoteAddr string) *http.Request {
	s := req.Clone(ctx)
	s.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	s.RequestURI = s.URL.RequestURI()
	if s.Host == "" {
		s.Host = req.URL.Host
	}
	s.RemoteAddr = remoteAddr
	s.Proto, s.ProtoMajor, s.ProtoMinor = "HTTP/1.1", 1, 1
	s.Close = false
	s.TLS = nil
	if s.Body == nil {
		s.Body = http.NoBody
	}
	return s
}

// pipeWriter is the http.ResponseWriter of an in-process request: the
// status and headers are handed to RoundTrip when they are written, and
// the body goes into a pipe that the response's body reads.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter

	mu         sync.Mutex
	wrote      bool
	status     int
	sent       http.Header   // the header as it was when the status was written
	failed     error         // the handler failed before it wrote a status
	ready      chan struct{} // closed once status and sent, or failed, are set
	readerGone atomic.Bool   // the response's body was closed, or its request ended
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(code)
}

func (w *pipeWriter) writeHeaderLocked(code int) {
	if w.wrote || code < http.StatusOK {
		return // a second status is ignored, as by http.Server; so are informational ones
	}
	w.wrote = true
	w.status = code
	w.sent = w.header.Clone()
	close(w.ready)
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if !w.wrote {
		if w.header.Get("Content-Type") == "" {
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
		w.writeHeaderLocked(http.StatusOK)
	}
	w.mu.Unlock()
	return w.pw.Write(p)
}

// Flush sends the status, if none was: the body needs no flushing, since
// every Write waits for its reader.
func (w *pipeWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush, which fails once the response's reader is gone: a
// stream learns so that its client left.
func (w *pipeWriter) FlushError() error {
	w.WriteHeader(http.StatusOK)
	if w.readerGone.Load() {
		return io.ErrClosedPipe
	}
	return nil
}

// finish ends the response when its handler returned: a handler that
// wrote nothing answered 200 with no body; err, a panic, breaks the body
// (or, before any status, the round trip).
func (w *pipeWriter) finish(err error) {
	w.mu.Lock()
	if !w.wrote && err != nil {
		w.wrote = true
		w.failed = err
		close(w.ready)
	}
	w.writeHeaderLocked(http.StatusOK)
	w.mu.Unlock()
	if err != nil {
		_ = w.pw.CloseWithError(err)
		return
	}
	_ = w.pw.Close()
}

// pipeBody is the body of an in-process response. Closing it, or the end
// of its request, ends the handler's context and fails its writes.
type pipeBody struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
	gone   *atomic.Bool
}

func (b *pipeBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *pipeBody) Close() error {
	b.abort(io.ErrClosedPipe)
	return nil
}

// abort ends the handler and makes further reads fail with err.
func (b *pipeBody) abort(err error) {
	b.gone.Store(true)
	b.cancel()
	_ = b.pr.CloseWithError(err)
}
