package acpwire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"skein.dev/pkg/acp"
	"skein.dev/pkg/acp/acpwire"
)

// transcriptNamed returns the transcript with that file name.
func transcriptNamed(tb testing.TB, name string) transcript {
	tb.Helper()
	for _, tr := range readTranscripts(tb) {
		if tr.Name == name {
			return tr
		}
	}
	tb.Fatalf("no transcript %s", name)
	return transcript{}
}

// playAgent plays the adapter of a transcript on a: it writes each A->C
// line and checks that the Conn wrote each C->A line, byte for byte, in
// order. The returned channel is closed when the script is done.
func playAgent(t *testing.T, a *agentSide, lines []wireLine) <-chan struct{} {
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for _, l := range lines {
			if l.Dir == "A->C" {
				if _, err := a.out.Write(append(bytes.Clone(l.JSON), '\n')); err != nil {
					t.Errorf("%v: adapter write: %v", l, err)
					return
				}
				continue
			}
			select {
			case got := <-a.lines:
				if !bytes.Equal(got, l.JSON) {
					t.Errorf("%v: client wrote\n%s\nwant\n%s", l, got, l.JSON)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("%v: client wrote nothing after 10s", l)
				return
			}
		}
	}()
	return finished
}

// recordedClient is the initialize params of the recording client.
var recordedClient = acpwire.InitializeParams{
	ProtocolVersion:    1,
	ClientCapabilities: raw(`{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}`),
	ClientInfo:         &acpwire.Implementation{Name: "raw-test-client", Version: "0.0.1"},
}

// TestHelpersClaudeTurn drives a recorded claude-agent-acp session with the
// typed helpers: initialize, session/new, one prompt turn.
func TestHelpersClaudeTurn(t *testing.T) {
	tr := transcriptNamed(t, "run-caa-before-load.log")
	var updates atomic.Int32
	c, a := newPipeConn(t, acpwire.Options{OnNotification: func(m *acpwire.Message) {
		if m.Method == acpwire.MethodSessionUpdate {
			updates.Add(1)
		}
	}})
	finished := playAgent(t, a, tr.Lines)

	init, err := c.Initialize(t.Context(), recordedClient)
	if err != nil {
		t.Fatal(err)
	}
	if init.ProtocolVersion != 1 || !strings.Contains(string(init.AgentInfo), "claude-agent-acp") ||
		string(init.AuthMethods) != "[]" || !bytes.HasPrefix(init.AgentCapabilities, []byte(`{"_meta":{"claudeCode"`)) {
		t.Errorf("Initialize = %+v, want version 1, claude-agent-acp info, [] auth methods, raw capabilities", init)
	}
	sess, err := c.NewSession(t.Context(), acpwire.NewSessionParams{Cwd: "/srv/acp/caa/work"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.SessionID != "cf6294ee-d558-43bf-b9f0-616cc3031a37" || sess.Modes == nil || sess.ConfigOptions == nil || sess.Models != nil {
		t.Errorf("NewSession = %+v, want the recorded id, modes and configOptions, no models", sess)
	}
	res, err := c.Prompt(t.Context(), sess.SessionID, raw(`[{"type":"text","text":"say hi"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != acp.StopReasonEndTurn || !bytes.Contains(res.Raw, []byte(`"usage"`)) {
		t.Errorf("Prompt = %+v, want end_turn with the raw usage kept", res)
	}
	// Every update was written before the response, so all were handled
	// before Prompt returned.
	if got := updates.Load(); got != 8 {
		t.Errorf("session/update notifications handled when Prompt returned = %d, want 8", got)
	}
	<-finished
}

// TestHelpersCodexPermission drives a recorded codex-acp turn in which the
// client rejects a permission request that carries a UUID string id.
func TestHelpersCodexPermission(t *testing.T) {
	tr := transcriptNamed(t, "run-codex-acp-mock-tool-reject.log")
	var c *acpwire.Conn
	var wg sync.WaitGroup
	c, a := newPipeConn(t, acpwire.Options{OnRequest: func(m *acpwire.Message) {
		req, err := acpwire.ParsePermissionRequest(m.Params)
		if err != nil {
			t.Error(err)
			return
		}
		wg.Go(func() { // answer later, from another goroutine
			for _, o := range req.Options {
				if o.Kind == acp.PermissionRejectOnce {
					if err := c.Respond(m.ID, acp.PermissionSelected(o.OptionID)); err != nil {
						t.Error(err)
					}
					return
				}
			}
			t.Errorf("no reject_once option in %s", m.Params)
		})
	}})
	finished := playAgent(t, a, tr.Lines)

	if _, err := c.Initialize(t.Context(), recordedClient); err != nil {
		t.Fatal(err)
	}
	if err := c.Authenticate(t.Context(), "openai-api-key"); err != nil {
		t.Fatal(err)
	}
	sess, err := c.NewSession(t.Context(), acpwire.NewSessionParams{Cwd: "/srv/acp/codex-bin/work"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Prompt(t.Context(), sess.SessionID, raw(`[{"type":"text","text":"say hi"}]`))
	if err != nil || res.StopReason != acp.StopReasonCancelled {
		t.Errorf("Prompt = %+v, %v, want stopReason cancelled", res, err)
	}
	<-finished
	wg.Wait()
}

// TestHelpersGeminiErrors drives recorded gemini-cli errors.
func TestHelpersGeminiErrors(t *testing.T) {
	tr := transcriptNamed(t, "run-gemini-0.61.0.log")
	c, a := newPipeConn(t, acpwire.Options{})
	finished := playAgent(t, a, tr.Lines)

	if _, err := c.Initialize(t.Context(), recordedClient); err != nil {
		t.Fatal(err)
	}
	_, err := c.NewSession(t.Context(), acpwire.NewSessionParams{Cwd: "/srv/acp/gem/work"})
	if e, ok := errors.AsType[*acpwire.RPCError](err); !ok || e.Code != acpwire.CodeAuthRequired {
		t.Errorf("NewSession = %v, want *RPCError %d", err, acpwire.CodeAuthRequired)
	}
	_, err = c.Prompt(t.Context(), "none", raw(`[{"type":"text","text":"say hi"}]`))
	if !acpwire.IsUnknownSession(err) {
		t.Errorf("IsUnknownSession(Prompt = %v) = false, want true", err)
	}
	<-finished
}

// TestHelpersCancel drives a recorded cancellation: session/cancel while
// the prompt runs, answered with stopReason cancelled.
func TestHelpersCancel(t *testing.T) {
	tr := transcriptNamed(t, "run-example-cancel.log")
	third := make(chan struct{})
	var n atomic.Int32
	c, a := newPipeConn(t, acpwire.Options{OnNotification: func(*acpwire.Message) {
		if n.Add(1) == 3 {
			close(third)
		}
	}})
	finished := playAgent(t, a, tr.Lines)

	if _, err := c.Initialize(t.Context(), recordedClient); err != nil {
		t.Fatal(err)
	}
	sess, err := c.NewSession(t.Context(), acpwire.NewSessionParams{Cwd: "/srv/acp/peer190"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res *acpwire.PromptResult
		err error
	}
	prompt := make(chan result, 1)
	go func() {
		res, err := c.Prompt(t.Context(), sess.SessionID, raw(`[{"type":"text","text":"Hello agent"}]`))
		prompt <- result{res, err}
	}()
	<-third
	if err := c.Cancel(sess.SessionID); err != nil {
		t.Fatal(err)
	}
	if r := <-prompt; r.err != nil || r.res.StopReason != acp.StopReasonCancelled {
		t.Errorf("Prompt after Cancel = %+v, %v, want stopReason cancelled", r.res, r.err)
	}
	<-finished
}

// TestHelpersWire checks each helper's line and its reading of the answer.
func TestHelpersWire(t *testing.T) {
	tests := []struct {
		name     string
		call     func(context.Context, *acpwire.Conn) (any, error)
		wantLine string // "" when nothing may be sent
		reply    string // "" for notifications
		want     any
		wantErr  error
	}{
		{
			name: "initialize defaults the version",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.Initialize(ctx, acpwire.InitializeParams{ClientInfo: &acpwire.Implementation{Name: "skein", Title: "<Skein>", Version: "1"}})
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientInfo":{"name":"skein","title":"<Skein>","version":"1"}}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":null}}`,
			want:     &acpwire.InitializeResult{ProtocolVersion: 1, Raw: raw(`{"protocolVersion":1,"agentCapabilities":null}`)},
		},
		{
			name: "initialize result without a version",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.Initialize(ctx, acpwire.InitializeParams{})
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{"agentInfo":{}}}`,
			wantErr:  acpwire.ErrProtocol,
		},
		{
			name: "session/new with directories and MCP servers",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.NewSession(ctx, acpwire.NewSessionParams{Cwd: "/w", AdditionalDirectories: []string{"/d"},
					McpServers: raw(`[{"name":"fs","command":"/bin/fs","args":[],"env":[]}]`)})
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/new","params":{"cwd":"/w","additionalDirectories":["/d"],"mcpServers":[{"name":"fs","command":"/bin/fs","args":[],"env":[]}]}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{"sessionId":"s1","models":{"currentModelId":"m1"},"modes":null,"_meta":{"x":1}}}`,
			want: &acpwire.SessionResult{SessionID: "s1", Models: raw(`{"currentModelId":"m1"}`),
				Raw: raw(`{"sessionId":"s1","models":{"currentModelId":"m1"},"modes":null,"_meta":{"x":1}}`)},
		},
		{
			name: "session/new result without a session id",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.NewSession(ctx, acpwire.NewSessionParams{Cwd: "/w"})
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{}}`,
			wantErr:  acpwire.ErrProtocol,
		},
		{
			name: "session/load with a null result",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.LoadSession(ctx, acpwire.LoadSessionParams{SessionID: "s1", Cwd: "/w"})
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/load","params":{"sessionId":"s1","cwd":"/w","mcpServers":[]}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":null}`,
			want:     &acpwire.SessionResult{SessionID: "s1", Raw: raw(`null`)},
		},
		{
			name: "session/resume without MCP servers",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.ResumeSession(ctx, acpwire.ResumeSessionParams{SessionID: "s1", Cwd: "/w"})
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/resume","params":{"sessionId":"s1","cwd":"/w"}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{"configOptions":[]}}`,
			want:     &acpwire.SessionResult{SessionID: "s1", ConfigOptions: raw(`[]`), Raw: raw(`{"configOptions":[]}`)},
		},
		{
			name: "prompt without a stop reason",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.Prompt(ctx, "s1", raw(`[{"type":"text","text":"a <b> & c"}]`))
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"a <b> & c"}]}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{}}`,
			want:     &acpwire.PromptResult{Raw: raw(`{}`)},
		},
		{
			name: "prompt that is not JSON",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.Prompt(ctx, "s1", raw(`[{"type":"text"`))
			},
			wantErr: acpwire.ErrInvalidArgument,
		},
		{
			name: "pretty-printed raw params",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.Call(ctx, "x", raw("{\n}"))
			},
			wantErr: acpwire.ErrInvalidArgument,
		},
		{
			name: "select config option",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.SetConfigOption(ctx, "s1", "mode", raw(`"acceptEdits"`))
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/set_config_option","params":{"sessionId":"s1","configId":"mode","value":"acceptEdits"}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{"configOptions":[{"id":"mode","currentValue":"acceptEdits"}]}}`,
			want:     json.RawMessage(`[{"id":"mode","currentValue":"acceptEdits"}]`),
		},
		{
			name: "boolean config option",
			call: func(ctx context.Context, c *acpwire.Conn) (any, error) {
				return c.SetConfigOption(ctx, "s1", "fast", raw(`true`))
			},
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/set_config_option","params":{"sessionId":"s1","configId":"fast","type":"boolean","value":true}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":null}`,
			want:     json.RawMessage(nil),
		},
		{
			name:     "set mode",
			call:     func(ctx context.Context, c *acpwire.Conn) (any, error) { return nil, c.SetMode(ctx, "s1", "plan") },
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/set_mode","params":{"sessionId":"s1","modeId":"plan"}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{}}`,
		},
		{
			name:     "set model",
			call:     func(ctx context.Context, c *acpwire.Conn) (any, error) { return nil, c.SetModel(ctx, "s1", "opus") },
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/set_model","params":{"sessionId":"s1","modelId":"opus"}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"Method not found"}}`,
			wantErr:  errAgent,
		},
		{
			name:     "close session",
			call:     func(ctx context.Context, c *acpwire.Conn) (any, error) { return nil, c.CloseSession(ctx, "s1") },
			wantLine: `{"jsonrpc":"2.0","id":0,"method":"session/close","params":{"sessionId":"s1"}}`,
			reply:    `{"jsonrpc":"2.0","id":0,"result":{}}`,
		},
		{
			name:     "cancel",
			call:     func(_ context.Context, c *acpwire.Conn) (any, error) { return nil, c.Cancel("s1") },
			wantLine: `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, a := newPipeConn(t, acpwire.Options{})
			type result struct {
				v   any
				err error
			}
			done := make(chan result, 1)
			go func() {
				v, err := tt.call(t.Context(), c)
				done <- result{v, err}
			}()
			if tt.wantLine != "" {
				if got := string(a.recv(t)); got != tt.wantLine {
					t.Errorf("wrote\n%s\nwant\n%s", got, tt.wantLine)
				}
				if tt.reply != "" {
					a.send(t, []byte(tt.reply))
				}
			}
			r := <-done
			if tt.wantErr != nil {
				if !isKind(r.err, tt.wantErr) {
					t.Errorf("error = %v, want %s", r.err, tt.wantErr)
				}
			} else if r.err != nil {
				t.Errorf("error = %v, want nil", r.err)
			} else if diff := cmp.Diff(tt.want, r.v); tt.want != nil && diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if tt.wantLine == "" { // nothing may have been written
				c.Notify("_test/marker", nil)
				if got := string(a.recv(t)); !strings.Contains(got, "_test/marker") {
					t.Errorf("first line = %s, want the marker", got)
				}
			}
		})
	}
}

// TestWriteValidation checks the checks on what callers ask to write.
func TestWriteValidation(t *testing.T) {
	c, a := newPipeConn(t, acpwire.Options{})
	bad := map[string]error{
		"WriteRaw with a newline":    c.WriteRaw([]byte("{\"jsonrpc\":\"2.0\",\n\"method\":\"x\"}")),
		"WriteRaw of a non-message":  c.WriteRaw([]byte(`{"method":"x"}`)),
		"Respond to an object id":    c.Respond(raw(`{}`), nil),
		"Respond to no id":           c.Respond(nil, nil),
		"RespondError with nil":      c.RespondError(raw(`1`), nil),
		"RespondError with bad data": c.RespondError(raw(`1`), &acpwire.RPCError{Code: 1, Data: raw(`{`)}),
		"Notify without a method":    c.Notify("", nil),
		"Notify unmarshalable":       c.Notify("x", func() {}),
	}
	for name, err := range bad {
		if !isKind(err, acpwire.ErrInvalidArgument) {
			t.Errorf("%s = %v, want %s", name, err, acpwire.ErrInvalidArgument)
		}
	}
	for _, tt := range []struct {
		write func() error
		want  string
	}{
		{func() error { return c.WriteRaw([]byte(` {"id":"fwd-1","jsonrpc":"2.0","method":"_x/y"} `)) }, ` {"id":"fwd-1","jsonrpc":"2.0","method":"_x/y"} `},
		{func() error {
			return c.RespondError(raw(`"r1"`), &acpwire.RPCError{Code: acpwire.CodeRequestCancelled, Message: "Request \"cancelled\"", Data: raw(`{"k":[1]}`)})
		}, `{"jsonrpc":"2.0","id":"r1","error":{"code":-32800,"message":"Request \"cancelled\"","data":{"k":[1]}}}`},
		{func() error { return c.Respond(raw(`3`), map[string]string{"path": "<a&b>"}) }, `{"jsonrpc":"2.0","id":3,"result":{"path":"<a&b>"}}`},
		{func() error { return c.Notify("_x/é", nil) }, `{"jsonrpc":"2.0","method":"_x/é","params":{}}`},
	} {
		if err := tt.write(); err != nil {
			t.Errorf("write of %s = %v", tt.want, err)
			continue
		}
		if got := string(a.recv(t)); got != tt.want {
			t.Errorf("wrote %s, want %s", got, tt.want)
		}
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestWriteFailure checks that a failed write fails the call and never
// calls done.
func TestWriteFailure(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	c := acpwire.NewConn(pr, failWriter{}, acpwire.Options{})
	defer c.Close()
	_, err := c.CallAsync("x", nil, func(*acpwire.Message) { t.Error("done called after a failed write") })
	if !isKind(err, acpwire.ErrClosed) || !strings.Contains(err.Error(), "broken pipe") {
		t.Errorf("CallAsync over a broken writer = %v, want %s naming the cause", err, acpwire.ErrClosed)
	}
	if c.Err() != nil {
		t.Errorf("Err() after a failed write = %v, want nil: the reader decides when the connection ends", c.Err())
	}
}
