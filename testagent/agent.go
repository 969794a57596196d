package testagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"sync"
	"time"
)

// shutdownWait bounds how long the agent waits for running turns to write
// their last lines when it is stopped by a signal or a crash command. Turns
// end within a command boundary once cancelled; the bound only matters when
// the client stopped reading stdout and a write blocks forever.
const shutdownWait = 2 * time.Second

// agent is one ACP agent connection: the sessions it knows and the requests
// in flight in both directions.
//
// The goroutine running run reads and dispatches every inbound message in
// order, so everything a message changes is in place before the next one is
// looked at (a session/cancel right after a session/prompt always finds the
// turn). Each prompt turn runs in its own goroutine, because it must wait for
// the client (permission answers, cancel) while run keeps reading.
type agent struct {
	cfg  config
	lg   *slog.Logger
	out  *lineWriter   // stdout: JSON-RPC only (and "garbage")
	errw *lockedWriter // stderr: logs and "stderr" lines

	eof   chan struct{} // closed when stdin is exhausted
	crash chan int      // a "crash" command's exit code; buffered 1
	turns sync.WaitGroup

	mu        sync.Mutex
	sessions  map[string]*session
	pending   map[string]chan inMessage // our requests by id, awaiting the client's response
	nextReqID int64
	prompts   map[string]*turn // running turns by the id of their session/prompt request
	loggedIn  bool             // authenticate succeeded (see config.AuthMethod)
	// loadFailures counts the session/load and session/resume calls
	// config.FailLoad failed, by session ID.
	loadFailures map[string]int
	// clientCaps is the clientCapabilities of initialize, as sent.
	clientCaps json.RawMessage
}

// session is one ACP session. Its fields are guarded by agent.mu.
type session struct {
	id, cwd     string
	mode, model string
	nextMsg     int // last message number used; message ids are msg_<n>
	nextUser    int // same for user_<n> (recorded user prompts)
	tools       map[string]string
	history     []json.RawMessage
	turn        *turn // the running prompt turn, or nil
	// instructions is the _meta.systemPrompt.append of the session/new,
	// load or resume that brought the session into this process, last.
	// Never stored: a real agent is given it again on every load or resume.
	instructions string

	persistMu sync.Mutex // orders state-dir writes of this session
}

func newAgent(cfg config, lg *slog.Logger, stdout io.Writer, errw *lockedWriter) *agent {
	return &agent{
		cfg:      cfg,
		lg:       lg,
		out:      &lineWriter{w: stdout},
		errw:     errw,
		eof:      make(chan struct{}),
		crash:    make(chan int, 1),
		sessions: map[string]*session{},
		pending:  map[string]chan inMessage{},
		prompts:  map[string]*turn{},

		loadFailures: map[string]int{},
	}
}

// readResult is one line from stdin; tooLong marks a line over maxLineBytes,
// whose bytes were dropped.
type readResult struct {
	line    []byte
	tooLong bool
}

// run serves stdin until EOF, a crash command or ctx ending, and returns the
// exit code.
func (a *agent) run(ctx context.Context, stdin io.Reader) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	for i := range a.cfg.Garbage {
		if err := a.out.writeLine(fmt.Appendf(nil, "this is not json: garbage line %d of %d\n", i+1, a.cfg.Garbage)); err != nil {
			a.lg.Debug("write garbage failed", "err", err)
		}
	}
	lines := make(chan readResult)
	stop := make(chan struct{})
	defer close(stop)
	go readLoop(a.lg, stdin, lines, stop)

	for reading := true; reading; {
		select {
		case <-ctx.Done():
			return a.shutdown(cancel, 0)
		case code := <-a.crash:
			return a.shutdown(cancel, code)
		case r, ok := <-lines:
			if !ok {
				reading = false
				break
			}
			a.handleLine(ctx, r)
		}
	}

	// Stdin is closed: nothing can start any more, and no permission answer
	// can arrive (waits see a.eof). Let running turns finish.
	close(a.eof)
	a.lg.Debug("stdin closed")
	idle := make(chan struct{})
	go func() { a.turns.Wait(); close(idle) }()
	for {
		select {
		case <-ctx.Done():
			return a.shutdown(cancel, 0)
		case code := <-a.crash:
			return a.shutdown(cancel, code)
		case <-idle:
			if a.cfg.ExitOnEOF {
				return 0
			}
			idle = nil // keep running until signalled, like codex-acp
		}
	}
}

// shutdown cancels every turn, gives them shutdownWait to write their last
// lines, and returns code.
func (a *agent) shutdown(cancel context.CancelFunc, code int) int {
	cancel()
	done := make(chan struct{})
	go func() { a.turns.Wait(); close(done) }()
	t := time.NewTimer(shutdownWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		a.lg.Warn("turns still running at exit")
	}
	return code
}

// readLoop sends stdin's lines to lines and closes it at EOF or on a read
// error. It stops early when stop is closed; a Read in progress cannot be
// interrupted, so the goroutine lingers until stdin delivers or closes.
func readLoop(lg *slog.Logger, stdin io.Reader, lines chan<- readResult, stop <-chan struct{}) {
	defer close(lines)
	r := bufio.NewReaderSize(stdin, 64<<10)
	for {
		line, tooLong, err := readLine(r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				lg.Warn("read stdin failed", "err", err)
			}
			return
		}
		select {
		case lines <- readResult{line: line, tooLong: tooLong}:
		case <-stop:
			return
		}
	}
}

// handleLine dispatches one inbound line.
func (a *agent) handleLine(ctx context.Context, r readResult) {
	if r.tooLong {
		a.lg.Warn("inbound line too long", "max_bytes", maxLineBytes)
		a.respondErr(nullID, &rpcError{Code: codeParseError, Message: "Parse error"})
		return
	}
	line := bytes.TrimSpace(r.line)
	if len(line) == 0 {
		return
	}
	msg, parseErr, err := decodeMessage(line)
	if a.cfg.Silent {
		// Read and dropped, as by an agent stuck before it speaks ACP
		// (waiting for a login, a terminal, a network).
		a.lg.Info("silent: not answering", "method", msg.Method)
		return
	}
	switch {
	case parseErr:
		a.lg.Warn("inbound line is not JSON", "err", err)
		a.respondErr(nullID, &rpcError{Code: codeParseError, Message: "Parse error"})
	case err != nil:
		a.lg.Warn("inbound message is invalid", "err", err)
		id := msg.ID
		if id == nil {
			id = nullID
		}
		a.respondErr(id, &rpcError{Code: codeInvalidRequest, Message: "Invalid request", Data: map[string]string{"details": err.Error()}})
	case msg.HasMethod && msg.ID != nil:
		a.handleRequest(ctx, msg)
	case msg.HasMethod:
		a.handleNotification(msg)
	default:
		a.handleResponse(msg)
	}
}

func (a *agent) handleRequest(ctx context.Context, msg inMessage) {
	a.lg.Debug("request", "method", msg.Method)
	switch msg.Method {
	case methodInitialize:
		a.initialize(msg)
	case methodAuthenticate:
		a.authenticate(msg)
	case methodSessionNew:
		if !a.authenticated() {
			a.respondErr(msg.ID, &rpcError{Code: codeAuthRequired, Message: "Authentication required"})
			return
		}
		a.newSession(msg)
	case methodSessionLoad:
		if !a.cfg.LoadSession {
			a.respondErr(msg.ID, errMethodNotFound(msg.Method))
			return
		}
		a.loadSession(msg, true)
	case methodSessionResume:
		if !a.cfg.Resume {
			a.respondErr(msg.ID, errMethodNotFound(msg.Method))
			return
		}
		a.loadSession(msg, false)
	case methodSessionClose:
		if !a.cfg.Close {
			a.respondErr(msg.ID, errMethodNotFound(msg.Method))
			return
		}
		a.closeSession(msg)
	case methodSessionPrompt:
		a.startPrompt(ctx, msg)
	case methodSetMode:
		if !a.cfg.LegacyModes {
			a.respondErr(msg.ID, errMethodNotFound(msg.Method))
			return
		}
		a.setMode(msg)
	case methodSetModel:
		if !a.cfg.LegacyModels {
			a.respondErr(msg.ID, errMethodNotFound(msg.Method))
			return
		}
		a.setModel(msg)
	case methodSetConfigOption:
		if len(a.cfg.ConfigOptions) == 0 {
			a.respondErr(msg.ID, errMethodNotFound(msg.Method))
			return
		}
		a.setConfigOption(msg)
	default:
		a.respondErr(msg.ID, errMethodNotFound(msg.Method))
	}
}

func (a *agent) handleNotification(msg inMessage) {
	switch msg.Method {
	case methodSessionCancel:
		var p struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.Unmarshal(msg.Params, &p); err != nil {
			a.lg.Warn("bad session/cancel params", "err", err)
			return
		}
		a.mu.Lock()
		var t *turn
		if s := a.sessions[p.SessionID]; s != nil {
			t = s.turn
		}
		a.mu.Unlock()
		if t == nil {
			// Not remembered: a cancel only ever applies to the turn running now.
			a.lg.Debug("cancel without a running turn", "session_id", p.SessionID)
			return
		}
		t.cancel()
	case methodCancelRequest:
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if err := json.Unmarshal(msg.Params, &p); err != nil {
			a.lg.Warn("bad $/cancel_request params", "err", err)
			return
		}
		a.mu.Lock()
		t := a.prompts[idKey(p.RequestID)]
		a.mu.Unlock()
		if t != nil {
			t.cancel() // the prompt is still answered: {"stopReason":"cancelled"}
		}
	default:
		a.lg.Debug("notification ignored", "method", msg.Method)
	}
}

// handleResponse delivers the client's answer to one of our requests.
func (a *agent) handleResponse(msg inMessage) {
	key := idKey(msg.ID)
	a.mu.Lock()
	ch := a.pending[key]
	delete(a.pending, key)
	a.mu.Unlock()
	if ch == nil {
		a.lg.Warn("response to unknown request", "id", key)
		return
	}
	ch <- msg // buffered 1; each id is delivered once
}

// idKey is the map key of a JSON-RPC id: its compact JSON text.
func idKey(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

func (a *agent) respond(id json.RawMessage, result any) {
	if err := a.out.writeJSON(outResult{JSONRPC: "2.0", ID: id, Result: result}); err != nil {
		a.lg.Debug("write response failed", "err", err)
	}
}

func (a *agent) respondErr(id json.RawMessage, e *rpcError) {
	if err := a.out.writeJSON(outError{JSONRPC: "2.0", ID: id, Error: e}); err != nil {
		a.lg.Debug("write response failed", "err", err)
	}
}

// notify sends a session/update notification (outside the history).
func (a *agent) notify(sessionID string, update any) {
	raw, err := marshalRaw(update)
	if err != nil {
		a.lg.Error("encode update failed", "err", err)
		return
	}
	a.writeUpdate(sessionID, raw)
}

func (a *agent) writeUpdate(sessionID string, raw json.RawMessage) {
	n := outNotification{JSONRPC: "2.0", Method: methodSessionUpdate, Params: sessionNotification{SessionID: sessionID, Update: raw}}
	if err := a.out.writeJSON(n); err != nil {
		a.lg.Debug("write update failed", "err", err)
	}
}

// marshalRaw encodes v the way lineWriter does, without the newline.
func marshalRaw(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// decodeParams decodes msg's params into v, answering -32602 on failure.
func (a *agent) decodeParams(msg inMessage, v any) bool {
	params := msg.Params
	if len(params) == 0 || bytes.Equal(params, nullID) {
		params = json.RawMessage("{}")
	}
	if err := json.Unmarshal(params, v); err != nil {
		a.respondErr(msg.ID, errInvalidParams("%v", err))
		return false
	}
	return true
}

func (a *agent) initialize(msg inMessage) {
	var p struct {
		ProtocolVersion    *json.Number    `json:"protocolVersion"`
		ClientCapabilities json.RawMessage `json:"clientCapabilities"`
	}
	if !a.decodeParams(msg, &p) {
		return
	}
	a.mu.Lock()
	a.clientCaps = p.ClientCapabilities
	a.mu.Unlock()
	if p.ProtocolVersion == nil {
		a.respondErr(msg.ID, errInvalidParams("protocolVersion is required"))
		return
	}
	caps := agentCapabilities{
		LoadSession:        a.cfg.LoadSession,
		PromptCapabilities: a.cfg.PromptCapabilities,
	}
	if a.cfg.Resume {
		caps.SessionCapabilities.Resume = &struct{}{}
	}
	if a.cfg.Close {
		caps.SessionCapabilities.Close = &struct{}{}
	}
	a.respond(msg.ID, initializeResult{
		ProtocolVersion:   protocolVersion,
		AgentCapabilities: caps,
		AuthMethods:       a.authMethods(),
		AgentInfo:         agentInfo,
	})
}

// setupParams are the params of session/new, load and resume.
type setupParams struct {
	SessionID  string          `json:"sessionId"`
	Cwd        string          `json:"cwd"`
	MCPServers json.RawMessage `json:"mcpServers"`
	Meta       json.RawMessage `json:"_meta"`
}

// instructions returns _meta.systemPrompt.append, the text claude-agent-acp
// and claude-code-acp append to their system prompt; "" when there is none.
// Any other _meta is ignored, as real agents ignore what they do not know.
func (p *setupParams) instructions() string {
	var m struct {
		SystemPrompt json.RawMessage `json:"systemPrompt"`
	}
	var sp struct {
		Append string `json:"append"`
	}
	if json.Unmarshal(p.Meta, &m) != nil || json.Unmarshal(m.SystemPrompt, &sp) != nil {
		return ""
	}
	return sp.Append
}

// validate checks the fields every setup method shares. mcpServers is
// required by session/new and session/load in v1 (the TypeScript SDK rejects
// a request without it), optional for session/resume.
func (p *setupParams) validate(needSession, needMCP bool) *rpcError {
	switch {
	case needSession && p.SessionID == "":
		return errInvalidParams("sessionId is required")
	case p.Cwd == "":
		return errInvalidParams("cwd is required")
	case !filepath.IsAbs(p.Cwd):
		return errInvalidParams("cwd must be an absolute path, got %q", p.Cwd)
	case needMCP && len(p.MCPServers) == 0:
		return errInvalidParams("mcpServers is required (send [])")
	case len(p.MCPServers) > 0 && p.MCPServers[0] != '[':
		return errInvalidParams("mcpServers must be an array")
	}
	return nil
}

func (a *agent) newSession(msg inMessage) {
	var p setupParams
	if !a.decodeParams(msg, &p) {
		return
	}
	if e := p.validate(false, true); e != nil {
		a.respondErr(msg.ID, e)
		return
	}
	s := &session{id: newSessionID(), cwd: p.Cwd, mode: defaultMode, model: defaultModel, tools: map[string]string{}, instructions: p.instructions()}
	a.mu.Lock()
	a.sessions[s.id] = s
	setup := a.setupLocked(s)
	a.mu.Unlock()
	a.persist(s)
	a.lg.Debug("session created", "session_id", s.id)
	setup.SessionID = s.id
	a.respond(msg.ID, setup)
	a.sendCommands(s.id)
}

// loadSession answers session/load (replay true) and session/resume.
func (a *agent) loadSession(msg inMessage, replay bool) {
	var p setupParams
	if !a.decodeParams(msg, &p) {
		return
	}
	if e := p.validate(true, replay); e != nil {
		a.respondErr(msg.ID, e)
		return
	}
	if a.failLoad(p.SessionID) {
		a.respondErr(msg.ID, &rpcError{Code: codeInternalError, Message: "Internal error"})
		return
	}
	s, e := a.lookupSession(p.SessionID)
	if e != nil {
		a.respondErr(msg.ID, e)
		return
	}
	a.mu.Lock()
	s.cwd = p.Cwd
	s.instructions = p.instructions()
	history := s.history[:len(s.history):len(s.history)]
	setup := a.setupLocked(s)
	a.mu.Unlock()
	if replay {
		for _, u := range history {
			a.writeUpdate(s.id, u)
		}
	}
	a.respond(msg.ID, setup)
	a.sendCommands(s.id)
}

// failLoad reports whether config.FailLoad fails this session/load or
// session/resume of session id, and counts it.
func (a *agent) failLoad(id string) bool {
	switch a.cfg.FailLoad {
	case 0:
		return false
	case failAlways:
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loadFailures[id] >= a.cfg.FailLoad {
		return false
	}
	a.loadFailures[id]++
	return true
}

// lookupSession finds a session in memory or, failing that, in the state dir.
func (a *agent) lookupSession(id string) (*session, *rpcError) {
	a.mu.Lock()
	s := a.sessions[id]
	a.mu.Unlock()
	if s != nil {
		return s, nil
	}
	if a.cfg.StateDir == "" {
		return nil, errSessionNotFound(id)
	}
	st, err := readSession(a.cfg.StateDir, id)
	if errors.Is(err, errNoSession) {
		return nil, errSessionNotFound(id)
	}
	if err != nil {
		a.lg.Error("load stored session failed", "session_id", id, "err", err)
		return nil, errInternal("%v", err)
	}
	s = &session{id: st.SessionID, cwd: st.Cwd, mode: st.Mode, model: st.Model,
		nextMsg: st.NextMsg, nextUser: st.NextUser, tools: st.Tools, history: st.History}
	if a.cfg.ForgetConfig {
		s.mode, s.model = defaultMode, defaultModel
	}
	if s.tools == nil {
		s.tools = map[string]string{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if prev := a.sessions[id]; prev != nil { // the same id raced in; keep the first
		return prev, nil
	}
	a.sessions[id] = s
	return s, nil
}

func (a *agent) closeSession(msg inMessage) {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	if !a.decodeParams(msg, &p) {
		return
	}
	a.mu.Lock()
	s := a.sessions[p.SessionID]
	var t *turn
	if s != nil {
		t = s.turn
		delete(a.sessions, p.SessionID)
	}
	a.mu.Unlock()
	if s == nil {
		a.respondErr(msg.ID, errSessionNotFound(p.SessionID))
		return
	}
	if t != nil {
		t.cancel()
	}
	a.respond(msg.ID, struct{}{})
}

// sendCommands sends available_commands_update when -commands is set, as
// claude-code-acp does right after the session/new response.
func (a *agent) sendCommands(sessionID string) {
	if a.cfg.Commands {
		a.notify(sessionID, availableCommandsUpdate{SessionUpdate: "available_commands_update", AvailableCommands: availableCommands})
	}
}

// persist writes s to the state dir, if there is one.
func (a *agent) persist(s *session) {
	if a.cfg.StateDir == "" {
		return
	}
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	a.mu.Lock()
	st := &storedSession{
		SessionID: s.id, Cwd: s.cwd, Mode: s.mode, Model: s.model,
		NextMsg: s.nextMsg, NextUser: s.nextUser,
		Tools:   make(map[string]string, len(s.tools)),
		History: s.history[:len(s.history):len(s.history)],
	}
	maps.Copy(st.Tools, s.tools)
	a.mu.Unlock()
	if err := writeSession(a.cfg.StateDir, st); err != nil {
		a.lg.Error("persist session failed", "session_id", s.id, "err", err)
	}
}

// codeAuthRequired is ACP's "authentication required".
const codeAuthRequired = -32000

func (a *agent) authMethods() []authMethod {
	if a.cfg.AuthMethod == "" {
		return []authMethod{}
	}
	return []authMethod{{ID: a.cfg.AuthMethod, Name: "Test login (" + a.cfg.AuthMethod + ")"}}
}

// authenticate accepts the configured method; any other is invalid params,
// and with none configured the method does not exist.
func (a *agent) authenticate(msg inMessage) {
	if a.cfg.AuthMethod == "" {
		a.respondErr(msg.ID, errMethodNotFound(msg.Method))
		return
	}
	var p struct {
		MethodID string `json:"methodId"`
	}
	if err := json.Unmarshal(msg.Params, &p); err != nil || p.MethodID != a.cfg.AuthMethod {
		a.respondErr(msg.ID, &rpcError{Code: codeInvalidParams, Message: "unknown auth method"})
		return
	}
	a.mu.Lock()
	a.loggedIn = true
	a.mu.Unlock()
	a.respond(msg.ID, struct{}{})
}

func (a *agent) authenticated() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.AuthMethod == "" || a.loggedIn
}
