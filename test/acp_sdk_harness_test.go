package test

import (
	"bufio"
	"cmp"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// The ACP door's tests drive Skein with a client no one here wrote: the
// official TypeScript SDK (@agentclientprotocol/sdk), pinned in
// testdata/acp-sdk and installed by make acp-sdk. testdata/acp-sdk/client.mjs
// runs one client and reports what it saw as JSON; these helpers start it
// and read its report.

// envACPSDK names the directory make acp-sdk installs the SDK in.
const envACPSDK = "SKEIN_ACP_SDK"

// acpTransport is a way an ACP client reaches Skein: skein acp on stdio, or
// the gateway's /acp by WebSocket or Streamable HTTP.
type acpTransport string

const (
	acpStdio acpTransport = "stdio"
	acpWS    acpTransport = "ws"
	acpHTTP  acpTransport = "http"
)

var acpTransports = []acpTransport{acpStdio, acpWS, acpHTTP}

// JSON-RPC codes the ACP door answers with (ACP's schema; pkg/acp/acpwire
// names the same for the agent side).
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcNotFound       = -32002 // ACP's resource not found: an unknown session
	rpcCancelled      = -32800 // $/cancel_request's
)

// The demo agent (skein dev's scripted test agent) and what it offers.
const (
	acpAgent = "demo"
)

// acpSDKDir returns where the SDK is installed, or skips the test, saying
// why.
func acpSDKDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts skein dev and node clients; skipped in -short")
	}
	dir := os.Getenv(envACPSDK)
	if dir == "" {
		t.Skipf("%s is not set: `make acp-sdk` installs the ACP TypeScript SDK and `make test` sets it", envACPSDK)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@agentclientprotocol", "sdk", "package.json")); err != nil {
		t.Skipf("the ACP TypeScript SDK is not installed in %s (%v): run `make acp-sdk`", dir, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("no node on the PATH (%v): the ACP SDK's client runs on Node.js 20 or later", err)
	}
	return dir
}

// acpEnv is skein dev with two tokens, and where the clients work.
type acpEnv struct {
	dev     *devProcess
	sdk     string // the SDK's install directory
	data    string // skein dev's data directory: its dev-token is admin's
	project string // skein dev's directory, granted to namespace default: the sessions' cwd
	admin   string // a token with role admin, also the dev token
	reader  string // a token with role read
	script  string // client.mjs
}

// startACPEnv starts skein dev with a tokens file of two tokens, an admin
// (also written as the dev token, which skein acp reads by default) and a
// reader.
func startACPEnv(t *testing.T) *acpEnv {
	t.Helper()
	sdk := acpSDKDir(t)
	script, err := filepath.Abs(filepath.Join("testdata", "acp-sdk", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := filepath.EvalSymlinks(testutil.TempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	e := &acpEnv{sdk: sdk, data: testutil.TempDir(t), project: project, admin: rand.Text(), reader: rand.Text(), script: script}
	if err := os.WriteFile(filepath.Join(e.data, devTokenFile), []byte(e.admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, _ := json.Marshal([]gateway.Token{
		{SHA256: gateway.HashToken(e.admin), Principal: "dev", Namespaces: []string{string(events.DefaultNamespace)}, Role: gateway.RoleAdmin},
		{SHA256: gateway.HashToken(e.reader), Principal: "viewer", Namespaces: []string{string(events.DefaultNamespace)}, Role: gateway.RoleRead},
	})
	tokensFile := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokensFile, tokens, 0o600); err != nil {
		t.Fatal(err)
	}
	// The unauthenticated scenarios fail authentication on purpose, all
	// from loopback: past a few failures an address waits (429), which
	// would answer them in place of the 401 they check.
	e.dev = mustStartDev(t, devOptions{data: e.data, dir: project, auth: true,
		flags: []string{"--gateway.tokens-file", tokensFile, "--gateway.auth-failures-free", "1000", "--log-level", "warn"}})
	t.Cleanup(func() { e.dev.stop(t) })
	return e
}

// acpStep is one step of a client's run (client.mjs lists the ops).
type acpStep map[string]any

// acpPermission says how a client answers session/request_permission.
type acpPermission struct {
	Answer   string `json:"answer"` // select, cancel, hold
	OptionID string `json:"optionId,omitempty"`
}

// acpClientConfig is client.mjs's configuration.
type acpClientConfig struct {
	SDK        string            `json:"sdk"`
	Transport  acpTransport      `json:"transport"`
	Skein      string            `json:"skein,omitempty"`
	Args       []string          `json:"args,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	URL        string            `json:"url,omitempty"`
	Token      string            `json:"token,omitempty"`
	Cwd        string            `json:"cwd"`
	Permission *acpPermission    `json:"permission,omitempty"`
	Steps      []acpStep         `json:"steps,omitempty"`
	// ContinueOnError runs every step: by default the first that fails
	// ends the run.
	ContinueOnError bool     `json:"continueOnError,omitempty"`
	Raw             []string `json:"raw,omitempty"`
	TimeoutMs       int      `json:"timeoutMs"`
}

// acpAuth is who a client is: a token, or none.
type acpAuth struct {
	token string
	none  bool // no token at all (stdio: none in the environment nor the data directory)
}

// config returns a client's configuration on transport tr, as the token
// (admin's by default) authenticates it: stdio runs skein acp against the
// gateway with the dev token of skein dev's data directory, or with
// SKEIN_TOKEN when another token is given.
func (e *acpEnv) config(t *testing.T, tr acpTransport, auth acpAuth, steps ...acpStep) acpClientConfig {
	t.Helper()
	c := acpClientConfig{SDK: e.sdk, Transport: tr, Cwd: e.project, Steps: steps, TimeoutMs: 60000}
	switch tr {
	case acpStdio:
		c.Skein = skeinBin(t)
		c.Args = []string{"--server", e.dev.url}
		c.Env = map[string]string{envData: e.data}
		switch {
		case auth.none:
			c.Env[envData] = t.TempDir() // no dev-token there
		case auth.token != "":
			c.Env["SKEIN_TOKEN"] = auth.token
		}
	case acpWS:
		c.URL = "ws" + strings.TrimPrefix(e.dev.url, "http") + "/acp"
	case acpHTTP:
		c.URL = e.dev.url + "/acp"
	}
	if tr != acpStdio && !auth.none {
		c.Token = cmp.Or(auth.token, e.admin)
	}
	return c
}

// acpClient is client.mjs running.
type acpClient struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  interface{ Write([]byte) (int, error) }
	events chan acpEvent
	done   chan struct{}
	result *acpResult // once done is closed
	stderr *lockedBuffer
	err    error // how node ended, once done is closed
	seen   []acpEvent
}

// acpEvent is one {"event": …} line of client.mjs.
type acpEvent struct {
	Event     string          `json:"event"`
	SessionID string          `json:"sessionId"`
	PID       int             `json:"pid"`
	ID        any             `json:"id"`
	Async     string          `json:"async"` // settled: the async prompt
	Result    json.RawMessage `json:"result"`
	Error     *acpError       `json:"error"`
}

// start starts client.mjs with c; its stderr goes to the test's log if the
// test fails. It is killed when the test ends.
func (e *acpEnv) start(t *testing.T, c acpClientConfig) *acpClient {
	t.Helper()
	cfg, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", e.script, string(cfg))
	cmd.Env = []string{"HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SKEIN_") && !strings.HasPrefix(kv, "NATS_") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cl := &acpClient{t: t, cmd: cmd, stdin: stdin, events: make(chan acpEvent, 64), done: make(chan struct{}), stderr: &lockedBuffer{}}
	cmd.Stderr = cl.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(cl.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 256<<20)
		for sc.Scan() {
			var line struct {
				acpEvent
				Result *acpResult `json:"result"`
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				fmt.Fprintf(cl.stderr, "(stdout) %s\n", sc.Bytes())
				continue
			}
			if line.Result != nil {
				cl.result = line.Result
				continue
			}
			select {
			case cl.events <- line.acpEvent:
			default:
				fmt.Fprintf(cl.stderr, "(event dropped) %s\n", sc.Bytes())
			}
		}
		cl.err = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-cl.done
		if t.Failed() {
			steps := "no report"
			if cl.result != nil {
				steps = cl.result.stepSummary()
			}
			t.Logf("%s client (node): steps %s\nstderr:\n%s", c.Transport, steps, cl.stderr.String())
		}
	})
	return cl
}

// run runs client.mjs with c to its end and returns its report.
func (e *acpEnv) run(t *testing.T, c acpClientConfig) *acpResult {
	t.Helper()
	return e.start(t, c).wait()
}

// waitEvent returns the client's next event named name, passing over (and
// keeping in seen) the others.
func (c *acpClient) waitEvent(name string) acpEvent {
	c.t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev := <-c.events:
			c.seen = append(c.seen, ev)
			if ev.Event == name {
				return ev
			}
		case <-c.done:
			steps, stopped := "no report", ""
			if c.result != nil {
				steps, stopped = c.result.stepSummary(), c.result.Fatal
			}
			c.t.Fatalf("the client ended before the event %q (%v): %s %s", name, c.err, steps, stopped)
		case <-timeout:
			c.t.Fatalf("no client event %q in 60s", name)
		}
	}
}

// event returns the first event named name the client sent so far (its
// agent's pid, say), waiting for it if none came yet.
func (c *acpClient) event(name string) acpEvent {
	c.t.Helper()
	for _, ev := range c.seen {
		if ev.Event == name {
			return ev
		}
	}
	return c.waitEvent(name)
}

// send writes line to the client's standard input, for its wait op.
func (c *acpClient) send(line string) {
	c.t.Helper()
	if _, err := c.stdin.Write([]byte(line + "\n")); err != nil {
		c.t.Fatal(err)
	}
}

// wait waits for the client to end and returns its report.
func (c *acpClient) wait() *acpResult {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(90 * time.Second):
		c.t.Fatal("the client did not end in 90s")
	}
	if c.result == nil {
		c.t.Fatalf("the client reported nothing (%v):\n%s", c.err, c.stderr.String())
	}
	if c.result.Fatal != "" {
		c.t.Logf("the client stopped: %s", c.result.Fatal)
	}
	return c.result
}

// kill kills the client (node) at once, as a crash or a closed laptop does.
func (c *acpClient) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// acpResult is client.mjs's report.
type acpResult struct {
	Steps       []acpStepResult `json:"steps"`
	Wire        []acpWire       `json:"wire"`
	SDKUpdates  int             `json:"sdkUpdates"`
	Permissions []struct {
		ID             any             `json:"id"`
		Params         json.RawMessage `json:"params"`
		Answered       string          `json:"answered"`
		Withdrawn      bool            `json:"withdrawn"`
		WithdrawReason *acpError       `json:"withdrawReason"`
	} `json:"permissions"`
	AgentExit *struct {
		Code   *int   `json:"code"`
		Signal string `json:"signal"`
	} `json:"agentExit"`
	AgentExitTimeout bool    `json:"agentExitTimeout"`
	AgentExitMs      int     `json:"agentExitMs"`
	StoppedAt        string  `json:"stoppedAt"` // the step that failed and ended the run
	Fatal            string  `json:"fatal"`
	Raw              *acpRaw `json:"raw"`
}

// acpStepResult is how one step went.
type acpStepResult struct {
	Op        string          `json:"op"`
	Name      string          `json:"name"`
	OK        bool            `json:"ok"`
	Result    json.RawMessage `json:"result"`
	Error     *acpError       `json:"error"`
	ReqIndex  *int            `json:"reqIndex"`
	RespIndex *int            `json:"respIndex"`
	Ms        int             `json:"ms"`
}

// acpError is a JSON-RPC error as the SDK gave it, or a transport's failure.
type acpError struct {
	Code       int             `json:"code"`
	Message    string          `json:"message"`
	Data       json.RawMessage `json:"data"`
	HTTPStatus int             `json:"httpStatus"`
}

// skeinCode is the Skein error code in the error's data (data.code), or "".
func (e *acpError) skeinCode() string {
	if e == nil {
		return ""
	}
	var d struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Code
}

func (e *acpError) String() string {
	if e == nil {
		return "no error"
	}
	return fmt.Sprintf("{code %d, message %q, data %s, http %d}", e.Code, e.Message, e.Data, e.HTTPStatus)
}

// acpWire is one JSON-RPC message the client read (in) or wrote (out).
type acpWire struct {
	Dir string          `json:"dir"`
	Msg json.RawMessage `json:"msg"`
}

// acpRaw is the report of a raw run.
type acpRaw struct {
	Sent []struct {
		Text         string          `json:"text"`
		Status       int             `json:"status"`
		Body         json.RawMessage `json:"body"`
		ConnectionID string          `json:"connectionId"`
	} `json:"sent"`
	Received    []json.RawMessage `json:"received"`
	ClosedEarly bool              `json:"closedEarly"`
	SSEStatus   int               `json:"sseStatus"`
	Error       *acpError         `json:"error"`
}

// step returns the step named name, failing the test if there is none.
func (r *acpResult) step(t *testing.T, name string) acpStepResult {
	t.Helper()
	for _, s := range r.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no step %q in the client's report (it stopped: %q; steps %s)", name, r.Fatal, r.stepSummary())
	return acpStepResult{}
}

// ok returns the result of the step named name decoded into a value of
// type T, failing the test unless the step succeeded.
func ok[T any](t *testing.T, r *acpResult, name string) T {
	t.Helper()
	s := r.step(t, name)
	var v T
	if !s.OK {
		t.Fatalf("%s: %s, want success", name, s.Error)
	}
	if err := json.Unmarshal(s.Result, &v); err != nil {
		t.Fatalf("%s: result %s: %v", name, s.Result, err)
	}
	return v
}

// failed returns the error of the step named name, failing the test if
// the step succeeded.
func (r *acpResult) failed(t *testing.T, name string) *acpError {
	t.Helper()
	s := r.step(t, name)
	if s.OK || s.Error == nil {
		t.Fatalf("%s succeeded (%s), want an error", name, s.Result)
	}
	return s.Error
}

func (r *acpResult) stepSummary() string {
	var b strings.Builder
	for _, s := range r.Steps {
		if s.OK {
			fmt.Fprintf(&b, "[%s ok %dms] ", s.Name, s.Ms)
		} else {
			fmt.Fprintf(&b, "[%s %s %dms] ", s.Name, s.Error, s.Ms)
		}
	}
	return b.String()
}

// acpUpdate is one session/update notification of the wire.
type acpUpdate struct {
	Index     int // in the wire
	SessionID string
	Kind      string // sessionUpdate
	Text      string // content.text, for chunks
	MessageID string
	Sequence  *int64 // _meta["skein/sequence"]
	EventNo   *int64 // _meta["skein/eventNo"]
	Raw       json.RawMessage
}

// updates returns the session/update notifications for sessionID (any
// session when it is "") the client read, in order.
func (r *acpResult) updates(sessionID string) []acpUpdate {
	var out []acpUpdate
	for i, w := range r.Wire {
		if w.Dir != "in" {
			continue
		}
		var m struct {
			Method string `json:"method"`
			Params struct {
				SessionID string                     `json:"sessionId"`
				Meta      map[string]json.RawMessage `json:"_meta"`
				Update    struct {
					Kind      string `json:"sessionUpdate"`
					MessageID string `json:"messageId"`
					// A chunk's content is one block; a tool call's, a list.
					Content json.RawMessage            `json:"content"`
					Meta    map[string]json.RawMessage `json:"_meta"`
				} `json:"update"`
			} `json:"params"`
		}
		if json.Unmarshal(w.Msg, &m) != nil || m.Method != "session/update" {
			continue
		}
		if sessionID != "" && m.Params.SessionID != sessionID {
			continue
		}
		u := acpUpdate{Index: i, SessionID: m.Params.SessionID, Kind: m.Params.Update.Kind, MessageID: m.Params.Update.MessageID, Raw: w.Msg}
		var block struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Params.Update.Content, &block) == nil {
			u.Text = block.Text
		}
		// Skein's place in the log: on the update, or on the notification.
		u.Sequence = metaInt(m.Params.Update.Meta, m.Params.Meta, "skein/sequence")
		u.EventNo = metaInt(m.Params.Update.Meta, m.Params.Meta, "skein/eventNo")
		out = append(out, u)
	}
	return out
}

func metaInt(metas ...any) *int64 {
	key := metas[len(metas)-1].(string)
	for _, m := range metas[:len(metas)-1] {
		if raw, ok := m.(map[string]json.RawMessage)[key]; ok {
			var n int64
			if json.Unmarshal(raw, &n) == nil {
				return &n
			}
		}
	}
	return nil
}

// between returns the updates whose wire index lies in (from, to).
func between(us []acpUpdate, from, to int) []acpUpdate {
	var out []acpUpdate
	for _, u := range us {
		if u.Index > from && u.Index < to {
			out = append(out, u)
		}
	}
	return out
}

// text concatenates the text of the updates of kind.
func text(us []acpUpdate, kind string) string {
	var b strings.Builder
	for _, u := range us {
		if u.Kind == kind {
			b.WriteString(u.Text)
		}
	}
	return b.String()
}

// kinds lists the updates' kinds, for failure messages.
func kinds(us []acpUpdate) string {
	var s []string
	for _, u := range us {
		s = append(s, u.Kind)
	}
	return strings.Join(s, ",")
}

// turn returns the updates of sessionID between the request and the response
// of the step named name, failing the test if either is missing.
func (r *acpResult) turn(t *testing.T, name, sessionID string) []acpUpdate {
	t.Helper()
	s := r.step(t, name)
	if s.ReqIndex == nil || s.RespIndex == nil {
		t.Fatalf("%s: the request or its response is not in the wire (%s)", name, s.Error)
	}
	return between(r.updates(sessionID), *s.ReqIndex, *s.RespIndex)
}

// wireMessages returns the wire's messages of method, in.
func (r *acpResult) wireMessages(dir, method string) []json.RawMessage {
	var out []json.RawMessage
	for _, w := range r.Wire {
		var m struct {
			Method string `json:"method"`
		}
		if w.Dir == dir && json.Unmarshal(w.Msg, &m) == nil && m.Method == method {
			out = append(out, w.Msg)
		}
	}
	return out
}

// sessionState is GET /v1/sessions/{id}'s state.
type sessionState struct {
	Status   string `json:"status"`
	Requests []struct {
		RequestID string `json:"requestId"`
	} `json:"requests"`
}

// session returns GET /v1/sessions/{id} as the admin sees it.
func (e *acpEnv) session(t *testing.T, id string) (int, map[string]json.RawMessage, sessionState) {
	t.Helper()
	status, body := doAs(t, http.MethodGet, e.dev.base+id, e.admin, "")
	var s map[string]json.RawMessage
	var st sessionState
	if status == http.StatusOK {
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("GET %s: %s: %v", id, body, err)
		}
		_ = json.Unmarshal(s["state"], &st)
	}
	return status, s, st
}

// waitState waits until the session's state is status. While it waits,
// an answer to cl's prompt (cl may be nil) fails the test: the turn ended
// first.
func (e *acpEnv) waitState(t *testing.T, cl *acpClient, id, status string) sessionState {
	t.Helper()
	var st sessionState
	err := testutil.Poll(t.Context(), fmt.Sprintf("session %s to be %s", id, status), func() (bool, error) {
		if cl != nil {
			if ev, ok := cl.settled(); ok {
				return false, fmt.Errorf("the client's prompt was answered first: %s %s", ev.Result, ev.Error)
			}
		}
		_, _, st = e.session(t, id)
		return st.Status == status, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// settled returns the event of an async prompt's answer, if one came.
func (c *acpClient) settled() (acpEvent, bool) {
	for {
		select {
		case ev := <-c.events:
			c.seen = append(c.seen, ev)
			continue
		default:
		}
		break
	}
	for _, ev := range c.seen {
		if ev.Event == "settled" {
			return ev, true
		}
	}
	return acpEvent{}, false
}

// killPID kills the process pid: a skein acp its client left behind.
func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// posts describes a raw HTTP run's POSTs and their answers, for failure
// messages ("" for a stream transport).
func (r *acpRaw) posts() string {
	var b strings.Builder
	for _, s := range r.Sent {
		if s.Status != 0 {
			fmt.Fprintf(&b, "\n  POST %.60s: %d %s", s.Text, s.Status, s.Body)
		}
	}
	return b.String()
}
