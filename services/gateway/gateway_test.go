package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
	"skein.dev/testagent"
)

func TestMain(m *testing.M) {
	testutil.Main(m, func(dir string) (err error) {
		testAgent, err = testagent.Build(dir)
		return err
	})
}

const ns = events.DefaultNamespace

// env is one gateway, served by Run on a loopback port, in front of the
// real session, history and runner services (stack) on a fresh embedded
// NATS server.
type env struct {
	t       *testing.T
	nc      *nats.Conn
	backend *stack
	gw      *gateway.Gateway
	reg     *prometheus.Registry
	url     string
	client  *http.Client
	logs    *testutil.Buffer
	stop    func() error // ends Run and returns its error; idempotent
}

type envOptions struct {
	noBackend bool
	backend   []stacktest.Option
	config    func(*gateway.Config)
	// server, when set, runs the NATS server and makes the gateway's
	// connection to it, instead of a fresh server and an in-process
	// connection.
	server func(t *testing.T) (*server.Server, *nats.Conn)
	// gateway, when set, changes the gateway before it runs.
	gateway func(*gateway.Gateway)
}

func newEnv(t *testing.T, opts ...func(*envOptions)) *env {
	t.Helper()
	var o envOptions
	for _, opt := range opts {
		opt(&o)
	}
	var srv *server.Server
	var gwConn *nats.Conn
	if o.server != nil {
		srv, gwConn = o.server(t)
	} else {
		srv = natstest.Run(t)
		gwConn = natstest.Connect(t, srv, nats.Timeout(stacktest.ConnectTimeout))
	}
	e := &env{t: t, nc: gwConn, reg: prometheus.NewRegistry(), logs: &testutil.Buffer{}}
	if !o.noBackend {
		e.backend = startStack(t, srv, o.backend...)
	}
	cfg := gateway.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	if o.config != nil {
		o.config(&cfg)
	}
	lg := slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), e.logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	gw, err := gateway.New(cfg, lg, e.nc, e.reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.gw = gw
	if o.gateway != nil {
		o.gateway(gw)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	var once sync.Once
	var runErr error
	e.stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := e.stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	select {
	case <-gw.Ready():
	case err := <-done:
		t.Fatalf("Run = %v before ready", err)
	}
	e.url = "http://" + gw.Addr()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	e.client = &http.Client{Transport: tr}
	return e
}

func withConfig(f func(*gateway.Config)) func(*envOptions) {
	return func(o *envOptions) { o.config = f }
}

func withoutBackend(o *envOptions) { o.noBackend = true }

// withMaxEvents makes ACP_LOG keep at most n records per subject: older
// events are pruned, and history answers cursor_expired before them.
func withMaxEvents(n int64) func(*envOptions) {
	return func(o *envOptions) { o.backend = append(o.backend, stacktest.WithMaxEvents(n)) }
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(method, path, body string, hdr ...string) response {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.url+path, r)
	if err != nil {
		e.t.Fatalf("NewRequest: %v", err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// apiError is the error body.
type apiError struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"requestId"`
	} `json:"error"`
}

// wantError checks that r failed with status and code and returns the body.
func wantError(t *testing.T, r response, status int, code events.Code) apiError {
	t.Helper()
	var body apiError
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	if r.status != status || body.Error.Code != string(code) {
		t.Fatalf("got %d %s (%s), want %d %s", r.status, body.Error.Code, body.Error.Message, status, code)
	}
	if body.Error.RequestID == "" || body.Error.RequestID != r.header.Get(gateway.HeaderRequestID) {
		t.Errorf("requestId = %q, header %q: want the same, non-empty", body.Error.RequestID, r.header.Get(gateway.HeaderRequestID))
	}
	return body
}

// sseEvent is one parsed SSE event, or a comment.
type sseEvent struct {
	ID, Event, Data, Comment string
}

// sseStream reads an event stream in a goroutine of its own.
type sseStream struct {
	t      *testing.T
	header http.Header
	ch     chan sseEvent
	done   chan struct{}
	resume chan struct{}
	states bool // keep state events (withStates)
}

type streamOptions struct {
	client *http.Client
	header http.Header
	paused bool // read nothing until resume
	// states keeps the stream's state events; without it they are
	// dropped as they are read, so that a test of the durable and
	// ephemeral events sees those alone.
	states bool
}

// withStates keeps the stream's state events.
func withStates(o *streamOptions) { o.states = true }

// stream opens path, which must answer 200 text/event-stream.
func (e *env) stream(path string, opts ...func(*streamOptions)) *sseStream {
	e.t.Helper()
	o := streamOptions{client: e.client}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithCancel(e.t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if err != nil {
		cancel()
		e.t.Fatalf("NewRequest: %v", err)
	}
	maps.Copy(req.Header, o.header)
	resp, err := o.client.Do(req)
	if err != nil {
		cancel()
		e.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		e.t.Fatalf("GET %s = %d %s %s, want 200 text/event-stream", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	s := &sseStream{t: e.t, header: resp.Header, ch: make(chan sseEvent, 4096), done: make(chan struct{}), resume: make(chan struct{}), states: o.states}
	if !o.paused {
		close(s.resume)
	}
	go s.read(ctx, resp.Body)
	e.t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-s.done
	})
	return s
}

func withHeader(k, v string) func(*streamOptions) {
	return func(o *streamOptions) {
		if o.header == nil {
			o.header = http.Header{}
		}
		o.header.Set(k, v)
	}
}

func (s *sseStream) read(ctx context.Context, body io.Reader) {
	defer close(s.done)
	select {
	case <-s.resume:
	case <-ctx.Done():
		return
	}
	br := bufio.NewReader(body)
	var ev sseEvent
	var data []string
	has := false
	send := func(ev sseEvent) bool {
		select {
		case s.ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case line == "":
			if has && (ev.Event != "state" || s.states) {
				ev.Data = strings.Join(data, "\n")
				if !send(ev) {
					return
				}
			}
			ev, data, has = sseEvent{}, nil, false
		case strings.HasPrefix(line, ":"):
			if !send(sseEvent{Comment: strings.TrimSpace(line[1:])}) {
				return
			}
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			has = true
			switch field {
			case "id":
				ev.ID = value
			case "event":
				ev.Event = value
			case "data":
				data = append(data, value)
			}
		}
	}
}

// next returns the next event, skipping comments.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	for {
		select {
		case ev := <-s.ch:
			if ev.Comment != "" {
				continue
			}
			return ev
		case <-s.done:
			select {
			case ev := <-s.ch:
				if ev.Comment != "" {
					continue
				}
				return ev
			default:
			}
			s.t.Fatal("event stream ended, want another event")
		case <-time.After(streamWait):
			s.t.Fatalf("no event in %v", streamWait)
		}
	}
}

// streamWait bounds the wait for a stream's next event or its end: a
// deadline for a test that went wrong, long enough for a loaded machine
// running the race detector behind real services.
const streamWait = 30 * time.Second

// nextDurable returns the next durable event, skipping the deltas of a
// turn (which the session service publishes as it goes, best effort).
func (s *sseStream) nextDurable() sseEvent {
	s.t.Helper()
	for {
		if ev := s.next(); ev.Event != "ephemeral" {
			return ev
		}
	}
}

// wantDurables checks that the stream's next durable events are seqs,
// deltas skipped.
func (s *sseStream) wantDurables(seqs ...uint64) {
	s.t.Helper()
	for _, seq := range seqs {
		wantDurable(s.t, s.nextDurable(), seq)
	}
}

// comment returns the next comment, skipping events.
func (s *sseStream) comment() string {
	s.t.Helper()
	for {
		select {
		case ev := <-s.ch:
			if ev.Comment != "" {
				return ev.Comment
			}
		case <-s.done:
			s.t.Fatal("event stream ended, want a comment")
		case <-time.After(streamWait):
			s.t.Fatalf("no comment in %v", streamWait)
		}
	}
}

// ended waits for the stream to end and returns the events it still
// carried, comments dropped.
func (s *sseStream) ended() []sseEvent {
	s.t.Helper()
	var out []sseEvent
	// One bound for the whole wait: keepalive comments keep arriving on
	// a stream that never ends.
	bound := time.After(streamWait)
	for {
		select {
		case ev := <-s.ch:
			if ev.Comment == "" {
				out = append(out, ev)
			}
		case <-s.done:
			for {
				select {
				case ev := <-s.ch:
					if ev.Comment == "" {
						out = append(out, ev)
					}
				default:
					return out
				}
			}
		case <-bound:
			s.t.Fatalf("event stream still open after %v", streamWait)
		}
	}
}

// publicEvent is the part of the public JSON the tests look at.
type publicEvent struct {
	SessionID     string          `json:"sessionId"`
	Sequence      uint64          `json:"sequence"`
	EventNo       uint64          `json:"eventNo"`
	AfterSequence *uint64         `json:"afterSequence"`
	Durability    string          `json:"durability"`
	Type          string          `json:"type"`
	Content       json.RawMessage `json:"content"`
	Status        string          `json:"status"`
}

func decodeEvent(t testing.TB, data string) publicEvent {
	t.Helper()
	var p publicEvent
	if err := json.Unmarshal([]byte(data), &p); err != nil {
		t.Fatalf("event data %q: %v", data, err)
	}
	return p
}

// smallBuffers serves h with tiny socket buffers on both ends, so that a
// client that stops reading blocks the handler after a few kilobytes
// instead of megabytes. It returns the server's URL and a client.
func smallBuffers(t *testing.T, h http.Handler) (string, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(4096) // best effort; the test only gets slower
		}
		return ctx
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		return c, err
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return srv.URL, &http.Client{Transport: tr}
}
