package testagent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/testagent"
)

// binPath is the skein-testagent binary TestMain builds.
var binPath string

func TestMain(m *testing.M) {
	testutil.Main(m, func(dir string) (err error) {
		binPath, err = testagent.Build(dir)
		return err
	})
}

// readTimeout guards every wait for the agent. It is a failure bound, never
// the expected duration: everything the tests wait for happens at once.
const readTimeout = 10 * time.Second

// opts configure one agent under test.
type opts struct {
	args []string
	env  map[string]string
	ctx  context.Context // cancelling it is the "signal"; default t.Context()
}

// proc is one running agent, in-process or as a child process, seen from
// the client side.
type proc struct {
	t      testing.TB
	stdin  io.WriteCloser
	lines  chan []byte // stdout lines; closed at stdout EOF
	stderr *testutil.Buffer
	exited chan struct{} // closed once the exit code is known
	code   int
	nextID int
}

// startFunc starts an agent; mode runs each test against both.
type startFunc func(t testing.TB, o opts) *proc

var modes = []struct {
	name  string
	start startFunc
}{
	{"inproc", startInProcess},
	{"exec", startExec},
}

// forEachMode runs f once driving Main over io.Pipe and once driving the
// built binary over os/exec.
func forEachMode(t *testing.T, f func(t *testing.T, start startFunc)) {
	t.Helper()
	for _, m := range modes {
		t.Run("mode="+m.name, func(t *testing.T) {
			t.Parallel()
			f(t, m.start)
		})
	}
}

func newProc(t testing.TB) *proc {
	return &proc{t: t, lines: make(chan []byte, 1024), stderr: &testutil.Buffer{}, exited: make(chan struct{})}
}

func startInProcess(t testing.TB, o opts) *proc {
	t.Helper()
	ctx := o.ctx
	if ctx == nil {
		ctx = t.Context()
	}
	p := newProc(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p.stdin = inW
	getenv := func(k string) string { return o.env[k] }
	go func() {
		p.code = testagent.Main(ctx, o.args, inR, outW, p.stderr, getenv)
		// Like a process exit: stdout ends, and stdin stops accepting.
		outW.Close()
		inR.CloseWithError(io.ErrClosedPipe)
	}()
	go func() {
		p.readLines(outR)
		close(p.exited)
	}()
	t.Cleanup(func() {
		inW.Close()
		p.waitExit()
	})
	return p
}

func startExec(t testing.TB, o opts) *proc {
	t.Helper()
	ctx := o.ctx
	if ctx == nil {
		ctx = t.Context()
	}
	p := newProc(t)
	cmd := exec.CommandContext(ctx, binPath, o.args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = readTimeout
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SKEIN_TESTAGENT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range o.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	go func() {
		p.readLines(stdout) // Wait closes stdout, so read it to EOF first
		err := cmd.Wait()
		// After a cancel (our SIGTERM) Wait reports the context error even
		// for a clean exit, so the code comes from the process state.
		p.code = -1
		if cmd.ProcessState != nil {
			p.code = cmd.ProcessState.ExitCode()
		} else {
			p.t.Errorf("wait for agent: %v", err)
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		p.waitExit()
	})
	return p
}

func (p *proc) readLines(r io.Reader) {
	defer close(p.lines)
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			p.lines <- bytes.TrimSuffix(line, []byte("\n"))
		}
		if err != nil {
			return
		}
	}
}

// waitExit waits for the agent to exit and returns its exit code.
func (p *proc) waitExit() int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(readTimeout):
		p.t.Fatalf("agent did not exit within %v", readTimeout)
		return -1
	}
}

// closeStdin closes the agent's stdin.
func (p *proc) closeStdin() {
	p.t.Helper()
	if err := p.stdin.Close(); err != nil {
		p.t.Fatal(err)
	}
}

// message is any inbound JSON-RPC message.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (m message) isResponse(id int) bool {
	return m.Method == "" && string(m.ID) == fmt.Sprint(id)
}

// update is a session/update notification's update object.
type update map[string]any

func (u update) kind() string { return fmt.Sprint(u["sessionUpdate"]) }

// text returns the text of a content chunk.
func (u update) text() string {
	c, _ := u["content"].(map[string]any)
	s, _ := c["text"].(string)
	return s
}

func (u update) messageID() string { s, _ := u["messageId"].(string); return s }

// nextLine returns the next stdout line, failing the test at EOF or after
// readTimeout.
func (p *proc) nextLine() []byte {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("agent stdout closed; stderr:\n%s", p.stderr)
		}
		return line
	case <-time.After(readTimeout):
		p.t.Fatalf("no line from agent within %v; stderr:\n%s", readTimeout, p.stderr)
		return nil
	}
}

// next returns the next message.
func (p *proc) next() message {
	p.t.Helper()
	line := p.nextLine()
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		p.t.Fatalf("agent wrote non-JSON line %q: %v", line, err)
	}
	if m.JSONRPC != "2.0" {
		p.t.Fatalf("agent wrote %q without jsonrpc 2.0", line)
	}
	return m
}

// expectEOF waits for stdout to end with no further line.
func (p *proc) expectEOF() {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if ok {
			p.t.Fatalf("agent wrote %q, want stdout closed", line)
		}
	case <-time.After(readTimeout):
		p.t.Fatalf("agent stdout still open after %v", readTimeout)
	}
}

// idle reports whether no stdout line is waiting right now. It never waits,
// so it can only catch a line that should not exist, not prove its absence.
func (p *proc) idle() bool {
	select {
	case line := <-p.lines:
		p.t.Errorf("unexpected line from agent: %s", line)
		return false
	default:
		return true
	}
}

func (p *proc) sendRaw(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("write to agent: %v", err)
	}
}

func (p *proc) send(v any) {
	p.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		p.t.Fatal(err)
	}
	p.sendRaw(string(b))
}

// request sends a request and returns its id.
func (p *proc) request(method string, params any) int {
	p.t.Helper()
	id := p.nextID
	p.nextID++
	p.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return id
}

func (p *proc) notify(method string, params any) {
	p.t.Helper()
	p.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// until reads up to the response to id and returns the updates before it.
// Any other message before the response fails the test.
func (p *proc) until(id int) ([]update, message) {
	p.t.Helper()
	var ups []update
	for {
		m := p.next()
		switch {
		case m.isResponse(id):
			return ups, m
		case m.Method == "session/update":
			ups = append(ups, decodeUpdate(p.t, m))
		default:
			p.t.Fatalf("unexpected message while waiting for response %d: %+v", id, m)
		}
	}
}

// call sends a request and returns its response, failing on any update.
func (p *proc) call(method string, params any) message {
	p.t.Helper()
	ups, resp := p.until(p.request(method, params))
	if len(ups) > 0 {
		p.t.Fatalf("%s: unexpected updates before the response: %v", method, ups)
	}
	return resp
}

// result unmarshals a successful response's result.
func result[T any](t testing.TB, m message) T {
	t.Helper()
	var v T
	if m.Error != nil {
		t.Fatalf("response %s is error %d %q (data %s), want a result", m.ID, m.Error.Code, m.Error.Message, m.Error.Data)
	}
	if err := json.Unmarshal(m.Result, &v); err != nil {
		t.Fatalf("decode result %s: %v", m.Result, err)
	}
	return v
}

// wantError checks that m is an error response with code.
func wantError(t testing.TB, m message, code int) {
	t.Helper()
	if m.Error == nil {
		t.Fatalf("response %s = result %s, want error %d", m.ID, m.Result, code)
	}
	if m.Error.Code != code {
		t.Fatalf("response %s = error %d %q (data %s), want code %d", m.ID, m.Error.Code, m.Error.Message, m.Error.Data, code)
	}
}

func decodeUpdate(t testing.TB, m message) update {
	t.Helper()
	var p struct {
		SessionID string `json:"sessionId"`
		Update    update `json:"update"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatalf("decode session/update %s: %v", m.Params, err)
	}
	if p.SessionID == "" || p.Update.kind() == "" {
		t.Fatalf("session/update %s lacks sessionId or sessionUpdate", m.Params)
	}
	return p.Update
}

func (p *proc) initialize() map[string]any {
	p.t.Helper()
	return result[map[string]any](p.t, p.call("initialize", map[string]any{
		"protocolVersion":    1,
		"clientCapabilities": map[string]any{"fs": map[string]any{"readTextFile": false, "writeTextFile": false}, "terminal": false},
		"clientInfo":         map[string]any{"name": "testagent-test", "version": "0"},
	}))
}

// newSession initializes and creates a session; it returns the session id
// and the full session/new result.
func (p *proc) newSession() (string, map[string]any) {
	p.t.Helper()
	p.initialize()
	res := result[map[string]any](p.t, p.call("session/new", map[string]any{"cwd": "/tmp", "mcpServers": []any{}}))
	id, _ := res["sessionId"].(string)
	if !strings.HasPrefix(id, "sess_") {
		p.t.Fatalf("session/new sessionId = %q, want sess_…", id)
	}
	return id, res
}

func (p *proc) prompt(sessionID, text string) int {
	p.t.Helper()
	return p.request("session/prompt", map[string]any{
		"sessionId": sessionID,
		"prompt":    []any{map[string]any{"type": "text", "text": text}},
	})
}

// turn runs one prompt without client interaction and returns its updates
// and stop reason.
func (p *proc) turn(sessionID, text string) ([]update, string) {
	p.t.Helper()
	ups, resp := p.until(p.prompt(sessionID, text))
	return ups, result[struct{ StopReason string }](p.t, resp).StopReason
}

// chunkSummary renders content chunks as "kind/messageId/text" for compact
// comparisons.
func chunkSummary(ups []update) []string {
	var out []string
	for _, u := range ups {
		if strings.HasSuffix(u.kind(), "_chunk") {
			out = append(out, u.kind()+"/"+u.messageID()+"/"+u.text())
		}
	}
	return out
}

// agentText concatenates the agent_message_chunk texts.
func agentText(ups []update) string {
	var b strings.Builder
	for _, u := range ups {
		if u.kind() == "agent_message_chunk" {
			b.WriteString(u.text())
		}
	}
	return b.String()
}

// waitCtx returns a context bounded by readTimeout for control-dir waits.
func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), readTimeout)
	t.Cleanup(cancel)
	return ctx
}
