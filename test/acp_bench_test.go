package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"skein.dev/internal/acpbridge"
	"skein.dev/internal/memstat"
	"skein.dev/internal/natstest"
	"skein.dev/pkg/acp/acpwire"
)

// Benchmarks of Skein's ACP front door (docs/EDITORS.md): an ACP client's
// prompt to its first agent_message_chunk, beside the same agent over a
// direct pipe, in the same run.
//
//	BenchmarkACPFirstChunk/via=pipe: the test agent's stdio, no Skein
//	BenchmarkACPFirstChunk/via=skein-acp: skein acp's stdio, the whole stack behind it
//	BenchmarkACPFirstChunk/via=acp-ws: the gateway's /acp over a WebSocket
//	BenchmarkACPConnectionMemory/conns=N: what N connections that follow one session cost

// firstChunk measures, each loop, a prompt sent on conn to the first
// agent_message_chunk notification of its turn (chunks), and waits for the
// turn's end before the next.
func firstChunk(b *testing.B, conn *acpwire.Conn, sid string, chunks <-chan struct{}) {
	b.Helper()
	prompt := json.RawMessage(`[{"type":"text","text":"say hi"}]`)
	var lat []time.Duration
	run := func() time.Duration {
		done := make(chan error, 1)
		start := time.Now()
		if err := conn.PromptAsync(sid, prompt, func(_ *acpwire.PromptResult, err error) { done <- err }); err != nil {
			b.Fatal(err)
		}
		var d time.Duration
		select {
		case <-chunks:
			d = time.Since(start)
		case err := <-done:
			// The chunk's notification may be read just before the answer,
			// and the select take the answer.
			select {
			case <-chunks:
				d = time.Since(start)
			default:
				b.Fatalf("the turn ended without a chunk: %v", err)
			}
			done <- err
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return d
	}
	run() // warm up
	for b.Loop() {
		lat = append(lat, run())
	}
	report(b, lat)
}

// report reports the p50 and p99 of lat.
func report(b *testing.B, lat []time.Duration) {
	b.Helper()
	s := samples{lat: lat}
	s.report(b)
}

// chunkNotifications returns an OnNotification that signals each
// agent_message_chunk update on the channel.
func chunkNotifications() (func(*acpwire.Message), chan struct{}) {
	ch := make(chan struct{}, 64)
	return func(m *acpwire.Message) {
		if m.Method != "session/update" {
			return
		}
		var p struct {
			Update struct {
				Kind string `json:"sessionUpdate"`
			} `json:"update"`
		}
		if json.Unmarshal(m.Params, &p) == nil && p.Update.Kind == "agent_message_chunk" {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}, ch
}

// acpBenchToken is the bearer token of startACPStack's gateway.
const acpBenchToken = "bench-token"

// startACPStack starts the four services, unlimited, the gateway taking
// acpBenchToken, as an ACP client's token is always checked.
func startACPStack(b *testing.B) *testStack {
	b.Helper()
	return startStackTB(b, natstest.Run(b), b.TempDir(), unlimited, func(c *stackConfig) { c.Gateway.Auth.Tokens = devTokens(acpBenchToken) })
}

func BenchmarkACPFirstChunk(b *testing.B) {
	b.Run("via=pipe", func(b *testing.B) {
		on, chunks := chunkNotifications()
		conn := startAgent(b, on)
		sess, err := conn.NewSession(b.Context(), acpwire.NewSessionParams{Cwd: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		firstChunk(b, conn, sess.SessionID, chunks)
	})
	b.Run("via=skein-acp", func(b *testing.B) {
		st := startACPStack(b)
		cmd := exec.CommandContext(b.Context(), skeinBin(b), "acp", "--server", st.url, "--agent", "test", "--policy", "allow_all")
		cmd.Env = append(os.Environ(), "SKEIN_TOKEN="+acpBenchToken)
		cmd.Stderr = os.Stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
		on, chunks := chunkNotifications()
		conn := acpwire.NewConn(stdout, stdin, acpwire.Options{OnNotification: on})
		if _, err := conn.Initialize(b.Context(), acpwire.InitializeParams{}); err != nil {
			b.Fatal(err)
		}
		sess, err := conn.NewSession(b.Context(), acpwire.NewSessionParams{Cwd: ""})
		if err != nil {
			b.Fatal(err)
		}
		firstChunk(b, conn, sess.SessionID, chunks)
	})
	b.Run("via=acp-ws", func(b *testing.B) {
		st := startACPStack(b)
		ws, _, err := websocket.Dial(b.Context(), "ws"+strings.TrimPrefix(st.url, "http")+"/acp?agent=test&policy=allow_all",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + acpBenchToken}}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = ws.CloseNow() })
		ws.SetReadLimit(acpbridge.MaxMessageBytes)
		r, w := wsLines(b, ws)
		on, chunks := chunkNotifications()
		conn := acpwire.NewConn(r, w, acpwire.Options{OnNotification: on})
		if _, err := conn.Initialize(b.Context(), acpwire.InitializeParams{}); err != nil {
			b.Fatal(err)
		}
		sess, err := conn.NewSession(b.Context(), acpwire.NewSessionParams{Cwd: ""})
		if err != nil {
			b.Fatal(err)
		}
		firstChunk(b, conn, sess.SessionID, chunks)
	})
}

// wsLines carries newline-delimited JSON-RPC, as acpwire speaks it, over a
// WebSocket of one message a text frame: the reader yields each frame
// read as a line, and each line written goes as a frame.
func wsLines(b *testing.B, ws *websocket.Conn) (io.Reader, io.Writer) {
	pr, pw := io.Pipe()
	go func() {
		for {
			_, data, err := ws.Read(context.Background())
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
			if _, err := pw.Write(append(data, '\n')); err != nil {
				return
			}
		}
	}()
	b.Cleanup(func() { _ = pr.Close() })
	return pr, frameWriter{ws}
}

// frameWriter sends what acpwire writes, one line a call, as one frame.
type frameWriter struct{ ws *websocket.Conn }

func (f frameWriter) Write(p []byte) (int, error) {
	if err := f.ws.Write(context.Background(), websocket.MessageText, bytes.TrimSuffix(p, []byte("\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// BenchmarkACPConnectionMemory measures what ACP connections that follow
// one session cost the process that serves them (the bridges and the
// gateway's event streams beneath them; the stack runs in this process
// too, so its share of a connection is counted).
func BenchmarkACPConnectionMemory(b *testing.B) {
	const conns = 100
	b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
		st := startACPStack(b)
		mustDoToken(b, acpBenchToken, http.MethodPut, st.url+"/v1/sessions/mem", `{"agent":"test"}`)
		cfg := acpbridge.Config{BaseURL: st.url, Header: http.Header{"Authorization": {"Bearer " + acpBenchToken}}, Agent: "test",
			Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}}
		for b.Loop() {
			before := memstat.Read(b)
			ctx, cancel := context.WithCancel(b.Context())
			done := make(chan struct{}, conns)
			var clients []io.Closer
			for range conns {
				cr, cw := io.Pipe() // the client's writes
				sr, sw := io.Pipe() // the bridge's writes
				go func() {
					_ = acpbridge.Serve(ctx, cfg, acpbridge.NewStdio(cr, sw))
					_ = sw.Close()
					done <- struct{}{}
				}()
				conn := acpwire.NewConn(sr, cw, acpwire.Options{})
				if _, err := conn.Initialize(ctx, acpwire.InitializeParams{}); err != nil {
					b.Fatal(err)
				}
				if _, err := conn.ResumeSession(ctx, acpwire.ResumeSessionParams{SessionID: "mem", Cwd: ""}); err != nil {
					b.Fatal(err)
				}
				clients = append(clients, cw)
			}
			after := memstat.Read(b)
			b.ReportMetric((float64(after.Heap+after.Stacks)-float64(before.Heap+before.Stacks))/conns, "B/conn")
			b.ReportMetric(float64(after.Goroutines-before.Goroutines)/conns, "goroutines/conn")
			// A client that goes away ends its connection: the stdio
			// transport reads the end of its input.
			cancel()
			for _, c := range clients {
				_ = c.Close()
			}
			for range conns {
				<-done
			}
			runtime.GC()
		}
	})
}
