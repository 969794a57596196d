package acpwire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"skein.dev/pkg/acp"
	"skein.dev/pkg/acp/acpwire"
)

// errAgent stands for "an *RPCError" in tables of expected errors.
var errAgent = errors.New("the agent's *RPCError")

// isKind reports whether err is an *acpwire.Error of that kind, or, for
// errAgent, an *acpwire.RPCError.
func isKind(err, kind error) bool {
	if kind == errAgent {
		_, ok := errors.AsType[*acpwire.RPCError](err)
		return ok
	}
	e, ok := errors.AsType[*acpwire.Error](err)
	return ok && e.Kind == kind && errors.Is(err, kind)
}

// runLines runs a Conn over input until EOF and returns what reached the
// callbacks and what the Conn wrote.
func runLines(t *testing.T, input string, opts acpwire.Options) ([]event, *acpwire.Conn, string) {
	t.Helper()
	rec := &recorder{}
	o := rec.options()
	o.MaxLineBytes = opts.MaxLineBytes
	var out syncBuffer
	c := acpwire.NewConn(strings.NewReader(input), &out, o)
	waitDone(t, c)
	return rec.all(), c, out.String()
}

// syncBuffer is a bytes.Buffer safe for the reader and test goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const (
	notif1 = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}}}`
	notif2 = `{"jsonrpc":"2.0","method":"_vendor/ping","params":{"_meta":{"x":1}}}`
)

// TestFraming covers what the reader makes of the byte stream: blank lines,
// garbage, a final line without a newline, over-long lines.
func TestFraming(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		max     int
		want    []event
		wantErr error
	}{
		{
			name:    "two messages",
			input:   notif1 + "\n" + notif2 + "\n",
			want:    []event{{"notification", notif1}, {"notification", notif2}},
			wantErr: acpwire.ErrClosed,
		},
		{
			name:    "blank lines are skipped",
			input:   "\n  \t\r\n" + notif1 + "\r\n\n",
			want:    []event{{"notification", notif1 + "\r"}},
			wantErr: acpwire.ErrClosed,
		},
		{
			name:  "garbage is reported and reading continues",
			input: "Debugger attached.\n" + notif1 + "\n[" + notif2 + "]\n\"str\"\n{\"jsonrpc\":\"1.0\",\"method\":\"x\"}\n" + notif2 + "\n",
			want: []event{
				{"protocol-error", "Debugger attached."},
				{"notification", notif1},
				{"protocol-error", "[" + notif2 + "]"},
				{"protocol-error", `"str"`},
				{"protocol-error", `{"jsonrpc":"1.0","method":"x"}`},
				{"notification", notif2},
			},
			wantErr: acpwire.ErrClosed,
		},
		{
			name:    "complete final line without newline is delivered",
			input:   notif1 + "\n" + notif2,
			want:    []event{{"notification", notif1}, {"notification", notif2}},
			wantErr: acpwire.ErrClosed,
		},
		{
			name:    "cut-off final line is a protocol error",
			input:   notif1 + "\n" + notif2[:20],
			want:    []event{{"notification", notif1}, {"protocol-error", notif2[:20]}},
			wantErr: acpwire.ErrClosed,
		},
		{
			name:    "line at the limit",
			input:   notif2 + "\n",
			max:     len(notif2),
			want:    []event{{"notification", notif2}},
			wantErr: acpwire.ErrClosed,
		},
		{
			name:    "line over the limit ends the connection",
			input:   notif2 + "\n" + notif1 + "\n" + notif2 + "\n",
			max:     len(notif2),
			want:    []event{{"notification", notif2}},
			wantErr: acpwire.ErrLineTooLong,
		},
		{
			name:    "final line over the limit without newline",
			input:   notif2 + "\n" + notif1,
			max:     len(notif2),
			want:    []event{{"notification", notif2}},
			wantErr: acpwire.ErrLineTooLong,
		},
		{
			name:    "line longer than the read buffer",
			input:   notif1[:len(notif1)-1] + `,"pad":"` + strings.Repeat("x", 200<<10) + `"}` + "\n" + notif2 + "\n",
			want:    []event{{"notification", notif1[:len(notif1)-1] + `,"pad":"` + strings.Repeat("x", 200<<10) + `"}`}, {"notification", notif2}},
			wantErr: acpwire.ErrClosed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, c, _ := runLines(t, tt.input, acpwire.Options{MaxLineBytes: tt.max})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("callbacks (-want +got):\n%s", diff)
			}
			if err := c.Err(); !isKind(err, tt.wantErr) {
				t.Errorf("Err() = %v, want %s", err, tt.wantErr)
			}
		})
	}
}

// TestProtocolErrorDetails checks the error handed to OnProtocolError and
// the log record written when there is no handler.
func TestProtocolErrorDetails(t *testing.T) {
	var gotErr error
	c := acpwire.NewConn(strings.NewReader(notif1[:30]), io.Discard, acpwire.Options{
		OnProtocolError: func(_ []byte, err error) { gotErr = err },
	})
	waitDone(t, c)
	if !isKind(gotErr, acpwire.ErrProtocol) || !strings.Contains(gotErr.Error(), "cut off at EOF") {
		t.Errorf("OnProtocolError(cut-off line) err = %v, want %s mentioning the cut", gotErr, acpwire.ErrProtocol)
	}

	var logs syncBuffer
	c = acpwire.NewConn(strings.NewReader("junk on stdout\n"), io.Discard, acpwire.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	waitDone(t, c)
	if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "junk on stdout") {
		t.Errorf("log without OnProtocolError = %q, want a WARN record with the line", s)
	}
}

// endless is an adapter that writes one line forever.
type endless struct{ n atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	e.n.Add(int64(len(p)))
	return len(p), nil
}

// TestEndlessLine checks that a line without end fails at the limit instead
// of being buffered without bound.
func TestEndlessLine(t *testing.T) {
	const limit = 1 << 20
	var r endless
	c := acpwire.NewConn(&r, io.Discard, acpwire.Options{MaxLineBytes: limit})
	waitDone(t, c)
	if err := c.Err(); !isKind(err, acpwire.ErrLineTooLong) {
		t.Errorf("Err() = %v, want %s", err, acpwire.ErrLineTooLong)
	}
	if n := r.n.Load(); n > limit+128<<10 {
		t.Errorf("read %d bytes of an endless line, want at most %d", n, limit+128<<10)
	}
}

// TestEndFailsPendingCalls checks what pending calls see when the
// connection ends under them, for each way it can end.
func TestEndFailsPendingCalls(t *testing.T) {
	tests := []struct {
		name    string
		end     func(t *testing.T, c *acpwire.Conn, a *agentSide)
		wantErr error
	}{
		{"line too long", func(t *testing.T, _ *acpwire.Conn, a *agentSide) { a.send(t, []byte(strings.Repeat("x", 100))) }, acpwire.ErrLineTooLong},
		{"EOF", func(_ *testing.T, _ *acpwire.Conn, a *agentSide) { a.out.Close() }, acpwire.ErrClosed},
		{"Close", func(_ *testing.T, c *acpwire.Conn, _ *agentSide) { c.Close() }, acpwire.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{ch: make(chan event, 16)}
			opts := rec.options()
			opts.MaxLineBytes = 64
			c, a := newPipeConn(t, opts)

			callErr := make(chan error, 1)
			go func() {
				_, err := c.Call(t.Context(), "session/prompt", nil)
				callErr <- err
			}()
			a.recv(t) // the call is pending once its line is out
			id, err := c.CallAsync("session/new", nil, rec.done())
			if err != nil {
				t.Fatal(err)
			}
			a.recv(t)

			tt.end(t, c, a)
			if err := <-callErr; !isKind(err, tt.wantErr) {
				t.Errorf("Call = %v, want %s", err, tt.wantErr)
			}
			waitDone(t, c)
			expect(t, rec.ch, event{"done-ended", string(id)})
			if err := c.Err(); !isKind(err, tt.wantErr) {
				t.Errorf("Err() = %v, want %s", err, tt.wantErr)
			}
			if err := c.Notify(acpwire.MethodSessionCancel, nil); !isKind(err, tt.wantErr) {
				t.Errorf("Notify after the end = %v, want %s", err, tt.wantErr)
			}
			if _, err := c.CallAsync("x", nil, func(*acpwire.Message) { t.Error("done called after CallAsync failed") }); !isKind(err, tt.wantErr) {
				t.Errorf("CallAsync after the end = %v, want %s", err, tt.wantErr)
			}
		})
	}
}

// TestSynthesizedResponse checks the message CallAsync's done gets when the
// adapter goes away.
func TestSynthesizedResponse(t *testing.T) {
	c, a := newPipeConn(t, acpwire.Options{})
	got := make(chan *acpwire.Message, 1)
	if _, err := c.CallAsync("session/prompt", nil, func(m *acpwire.Message) { got <- m }); err != nil {
		t.Fatal(err)
	}
	a.recv(t)
	a.out.Close()
	m := <-got
	if m.Raw != nil || string(m.ID) != "0" || m.Error == nil || m.Error.Code != acpwire.CodeInternalError ||
		!strings.Contains(m.Error.Message, "adapter closed its stdout") {
		t.Errorf("done(%+v, error %+v), want Raw nil, ID 0, code %d naming the EOF", m, m.Error, acpwire.CodeInternalError)
	}
}

// TestIDs checks id handling in both directions: verbatim echo of number
// and string ids, automatic -32601 answers, and response matching by
// numeric value only.
func TestIDs(t *testing.T) {
	t.Run("unhandled requests get -32601", func(t *testing.T) {
		for _, id := range []string{`7`, `"582aff9a-9eef-4a33-aac4-f96fa87bda8f"`, `null`, `1.5`} {
			c, a := newPipeConn(t, acpwire.Options{})
			a.send(t, []byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/etc/passwd"}}`))
			want := `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32601,"message":"Method not found","data":{"method":"fs/read_text_file"}}}`
			if got := string(a.recv(t)); got != want {
				t.Errorf("answer to request id %s = %s, want %s", id, got, want)
			}
			c.Close()
		}
	})
	t.Run("handler answers later from another goroutine", func(t *testing.T) {
		var c *acpwire.Conn
		var wg sync.WaitGroup
		c, a := newPipeConn(t, acpwire.Options{OnRequest: func(m *acpwire.Message) {
			wg.Go(func() {
				if err := c.Respond(m.ID, acp.PermissionSelected("abort")); err != nil {
					t.Error(err)
				}
			})
		}})
		a.send(t, []byte(`{"jsonrpc":"2.0","method":"session/request_permission","params":{},"id":"582aff9a"}`))
		want := `{"jsonrpc":"2.0","id":"582aff9a","result":{"outcome":{"outcome":"selected","optionId":"abort"}}}`
		if got := string(a.recv(t)); got != want {
			t.Errorf("Respond wrote %s, want %s", got, want)
		}
		wg.Wait()
	})
	t.Run("responses match by numeric value", func(t *testing.T) {
		rec := &recorder{ch: make(chan event, 16)}
		c, a := newPipeConn(t, rec.options())
		for range 2 {
			if _, err := c.CallAsync("x", nil, rec.done()); err != nil {
				t.Fatal(err)
			}
			a.recv(t)
		}
		for _, resp := range []string{
			`{"jsonrpc":"2.0","id":"0","result":{}}`, // a string never matches a numeric id
			`{"jsonrpc":"2.0","id":7,"result":{}}`,   // no such call
			`{"jsonrpc":"2.0","result":{},"id":1.0}`, // 1.0 is 1
			`{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"Internal error"}}`,
		} {
			a.send(t, []byte(resp))
		}
		expect(t, rec.ch, event{"response", `{"jsonrpc":"2.0","id":"0","result":{}}`})
		expect(t, rec.ch, event{"response", `{"jsonrpc":"2.0","id":7,"result":{}}`})
		expect(t, rec.ch, event{"response", `{"jsonrpc":"2.0","result":{},"id":1.0}`})
		expect(t, rec.ch, event{"done", `{"jsonrpc":"2.0","result":{},"id":1.0}`})
		expect(t, rec.ch, event{"response", `{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"Internal error"}}`})
		expect(t, rec.ch, event{"done", `{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"Internal error"}}`})
	})
}

// TestCallOrdering checks the barrier: notifications read before a response
// have been delivered, and OnResponse has run, when Call returns.
func TestCallOrdering(t *testing.T) {
	rec := &recorder{}
	c, a := newPipeConn(t, rec.options())
	go func() {
		a.recv(t)
		a.send(t, []byte(notif1))
		a.send(t, []byte(notif2))
		a.send(t, []byte(`{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}`))
	}()
	res, err := c.Call(t.Context(), acpwire.MethodSessionPrompt, nil)
	if err != nil || string(res) != `{"stopReason":"end_turn"}` {
		t.Fatalf("Call = %s, %v, want the result", res, err)
	}
	want := []event{
		{"notification", notif1},
		{"notification", notif2},
		{"response", `{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}`},
	}
	if diff := cmp.Diff(want, rec.all()); diff != "" {
		t.Errorf("callbacks when Call returned (-want +got):\n%s", diff)
	}
}

// TestCallErrors checks that an agent's error comes back as *RPCError.
func TestCallErrors(t *testing.T) {
	c, a := newPipeConn(t, acpwire.Options{})
	go func() {
		a.recv(t)
		a.send(t, []byte(`{"jsonrpc":"2.0","id":0,"error":{"code":-32000,"message":"Authentication required"}}`))
	}()
	_, err := c.Call(t.Context(), acpwire.MethodSessionNew, nil)
	var rpcErr *acpwire.RPCError
	if !errors.As(err, &rpcErr) || rpcErr.Code != acpwire.CodeAuthRequired {
		t.Fatalf("Call = %v, want *RPCError with code %d", err, acpwire.CodeAuthRequired)
	}
	if _, ok := errors.AsType[*acpwire.Error](err); ok {
		t.Errorf("Call = %v, an *acpwire.Error: the agent's error must not look like the package's", err)
	}
}

// TestConcurrentCalls answers many concurrent calls in reverse order and
// checks that each gets its own result.
func TestConcurrentCalls(t *testing.T) {
	const n = 64
	c, a := newPipeConn(t, acpwire.Options{})
	go func() {
		var reqs []*acpwire.Message
		for range n {
			m, err := acpwire.Parse(a.recv(t))
			if err != nil {
				t.Error(err)
				return
			}
			reqs = append(reqs, m)
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			a.send(t, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`, reqs[i].ID, reqs[i].Params))
		}
	}()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			params := fmt.Sprintf(`{"call":%d,"text":"<%d>"}`, i, i)
			got, err := c.Call(t.Context(), "_test/echo", json.RawMessage(params))
			if err != nil || string(got) != params {
				t.Errorf("Call(%s) = %s, %v, want its params back", params, got, err)
			}
		})
	}
	wg.Wait()
}

// TestCallContext checks abandoning a call through its context, with and
// without $/cancel_request.
func TestCallContext(t *testing.T) {
	for _, send := range []bool{false, true} {
		t.Run(fmt.Sprintf("send=%t", send), func(t *testing.T) {
			rec := &recorder{ch: make(chan event, 16)}
			opts := rec.options()
			opts.SendCancelRequest = send
			c, a := newPipeConn(t, opts)
			ctx, cancel := context.WithCancel(t.Context())
			callErr := make(chan error, 1)
			go func() {
				_, err := c.Call(ctx, acpwire.MethodSessionPrompt, nil)
				callErr <- err
			}()
			a.recv(t)
			cancel()
			if err := <-callErr; !errors.Is(err, context.Canceled) {
				t.Errorf("Call after cancel = %v, want context.Canceled", err)
			}
			if err := c.Notify("_test/marker", nil); err != nil {
				t.Fatal(err)
			}
			next := string(a.recv(t))
			if cancelLine := `{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}`; send {
				if next != cancelLine {
					t.Errorf("line after cancel = %s, want %s", next, cancelLine)
				}
				next = string(a.recv(t))
			}
			if want := `{"jsonrpc":"2.0","method":"_test/marker","params":{}}`; next != want {
				t.Errorf("next line = %s, want %s", next, want)
			}
			// The late answer is observed, and completes nothing.
			late := `{"jsonrpc":"2.0","id":0,"error":{"code":-32800,"message":"Request cancelled"}}`
			a.send(t, []byte(late))
			expect(t, rec.ch, event{"response", late})
		})
	}
	t.Run("already done", func(t *testing.T) {
		c, a := newPipeConn(t, acpwire.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := c.Call(ctx, "x", nil); !errors.Is(err, context.Canceled) {
			t.Errorf("Call(done ctx) = %v, want context.Canceled", err)
		}
		c.Notify("_test/marker", nil)
		if got := string(a.recv(t)); !strings.Contains(got, "_test/marker") {
			t.Errorf("first line = %s, want the marker: a call with a done ctx must send nothing", got)
		}
	})
}

// signalWriter discards what is written and signals each write.
type signalWriter chan struct{}

func (s signalWriter) Write(p []byte) (int, error) {
	s <- struct{}{}
	return len(p), nil
}

// opaqueReader hides a reader's Close method.
type opaqueReader struct{ r io.Reader }

func (o opaqueReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestCloseUnclosableReader checks Close when the reader cannot be closed:
// Calls return at once, and the reader stops at its next line without
// dispatching it.
func TestCloseUnclosableReader(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	var calls atomic.Int32
	count := func(*acpwire.Message) { calls.Add(1) }
	w := signalWriter(make(chan struct{}, 1))
	c := acpwire.NewConn(opaqueReader{pr}, w, acpwire.Options{OnNotification: count, OnResponse: count})
	callErr := make(chan error, 1)
	go func() {
		_, err := c.Call(t.Context(), "x", nil)
		callErr <- err
	}()
	<-w // the call is pending once its line is written
	if err := c.Close(); err != nil {
		t.Errorf("Close() = %v, want nil", err)
	}
	if err := <-callErr; !isKind(err, acpwire.ErrClosed) {
		t.Errorf("Call after Close = %v, want %s", err, acpwire.ErrClosed)
	}
	// The reader may be blocked in Read (this line unblocks it) or may not
	// have started at all; either way it must stop without a callback.
	go pw.Write([]byte(notif1 + "\n")) // unblocked by the deferred Close if never read
	waitDone(t, c)
	if n := calls.Load(); n != 0 {
		t.Errorf("%d callbacks after Close, want 0", n)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
}

// TestOnIdle: lines read at once are handled one by one and OnIdle follows
// the last of them, once; a line that arrives alone is followed by OnIdle
// at once; the end of the stream calls it too.
func TestOnIdle(t *testing.T) {
	pr, pw := io.Pipe()
	var (
		mu  sync.Mutex
		got []string
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, s)
	}
	idle := make(chan struct{}, 8)
	c := acpwire.NewConn(pr, io.Discard, acpwire.Options{
		OnNotification: func(m *acpwire.Message) { note(m.Method) },
		OnIdle:         func() { note("idle"); idle <- struct{}{} },
	})
	// One Write reaches the reader in one read: three lines, then half of
	// a fourth, which the reader must wait for.
	burst := notif1 + "\n" + notif2 + "\n" + notif1 + "\n" + notif2[:10]
	if _, err := io.WriteString(pw, burst); err != nil {
		t.Fatal(err)
	}
	<-idle
	if _, err := io.WriteString(pw, notif2[10:]+"\n"); err != nil {
		t.Fatal(err)
	}
	<-idle
	pw.Close()
	waitDone(t, c)
	<-idle
	want := []string{"session/update", "_vendor/ping", "session/update", "idle", "_vendor/ping", "idle", "idle"}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("callbacks (-want +got):\n%s", diff)
	}
}
