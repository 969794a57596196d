package adapterrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
)

// clientCapabilities is what Skein advertises to adapters: no file system and
// no terminals. Adapters then do their own I/O, inside the session's working
// directory, and never route it through the client.
const clientCapabilities = `{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}`

// systemPromptMeta returns the _meta of session/new, session/load and
// session/resume that gives an agent text to append to its system prompt,
// {"systemPrompt":{"append":text}}, or nil (no _meta) when text is empty.
// claude-agent-acp and claude-code-acp read params._meta.systemPrompt.append
// when they create, load or resume a session; other agents ignore _meta
// they do not know. ACP has no field of its own for it.
func systemPromptMeta(text string) json.RawMessage {
	if text == "" {
		return nil
	}
	var m struct {
		SystemPrompt struct {
			Append string `json:"append"`
		} `json:"systemPrompt"`
	}
	m.SystemPrompt.Append = text
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as acpwire writes the rest of the params
	if err := enc.Encode(&m); err != nil {
		return nil // a struct of one string always encodes
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// process is one adapter process serving one session. Everything it observes
// on stdout (notifications, agent-to-client requests, responses to forwarded
// calls) is published to ACP_IO from the single reader goroutine, so ACP_IO
// holds it in stdout order; stderr and the exit follow.
type process struct {
	ns        events.Namespace
	sid       events.SessionID
	id        string // process ID, chosen by the session service
	agent     Agent
	lg        *slog.Logger
	js        jetstream.JetStream
	m         *metrics
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	conn      *acpwire.Conn
	pid       uint32
	subject   string
	stopping  atomic.Bool
	replaying atomic.Bool // a session/load is replaying history: drop its updates

	mu        sync.Mutex
	written   map[string]bool // call IDs of forwarded calls written to the adapter (the last maxWritten)
	order     []string
	exited    chan struct{} // closed after the exit is handled
	stderrMax int64
	stopGrace time.Duration
}

// spawnSpec is what a create request asks for.
type spawnSpec struct {
	dataDir      string
	cwd          string
	args         []string
	env          map[string]string
	maxLineBytes int
}

func startProcess(lg *slog.Logger, js jetstream.JetStream, m *metrics, ns events.Namespace, sid events.SessionID, id string, agent Agent, spec spawnSpec, stderrMax int64, stopGrace time.Duration) (*process, error) {
	dir := filepath.Join(spec.dataDir, string(ns), string(sid))
	home, tmp, work := filepath.Join(dir, "home"), filepath.Join(dir, "tmp"), filepath.Join(dir, "work")
	for _, d := range []string{home, tmp, work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("session directories: %w", err)
		}
	}
	cwd := spec.cwd
	if cwd == "" {
		cwd = work
	}
	cmd := exec.Command(agent.Command, append(append([]string{}, agent.Args...), spec.args...)...)
	cmd.Dir = cwd
	cmd.Env = adapterEnv(home, tmp, agent.Env, spec.env)
	// Its own process group, so that stopping it also stops what it spawned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, events.Errorf(events.CodeAgentUnavailable, "start agent %s: %v", agent.ID, err)
	}
	p := &process{
		ns: ns, sid: sid, id: id, agent: agent, js: js, m: m,
		lg:        lg.With(events.LogKeySession, string(sid), events.LogKeyProcess, id, events.LogKeyAgent, agent.ID),
		cmd:       cmd,
		stdin:     stdin,
		pid:       uint32(cmd.Process.Pid),
		subject:   events.IOSubject(ns, sid),
		exited:    make(chan struct{}),
		written:   map[string]bool{},
		stderrMax: stderrMax,
		stopGrace: stopGrace,
	}
	p.conn = acpwire.NewConn(stdout, stdin, acpwire.Options{
		MaxLineBytes:   spec.maxLineBytes,
		OnNotification: p.onNotification,
		OnRequest:      p.onRequest,
		OnProtocolError: func(line []byte, err error) {
			p.lg.Warn("adapter wrote a line that is not ACP", events.LogKeyErr, err)
			p.m.protocolErrors.Inc()
		},
		Logger: p.lg,
	})
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		p.pumpStderr(stderr)
	}()
	go p.wait(stderrDone)
	return p, nil
}

// adapterEnv builds the adapter's environment: a minimal base, an isolated
// HOME and TMPDIR (and XDG directories), then the registry entry's env, then
// the session's. Later entries win.
func adapterEnv(home, tmp string, agentEnv, sessionEnv map[string]string) []string {
	env := map[string]string{
		"HOME":            home,
		"TMPDIR":          tmp,
		"XDG_CONFIG_HOME": filepath.Join(home, ".config"),
		"XDG_CACHE_HOME":  filepath.Join(home, ".cache"),
		"XDG_DATA_HOME":   filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME":  filepath.Join(home, ".local", "state"),
	}
	for _, k := range []string{"PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	maps.Copy(env, agentEnv)
	maps.Copy(env, sessionEnv)
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// initialize runs initialize (and authenticate, when the registry entry
// names an auth method).
func (p *process) initialize(ctx context.Context, clientCaps events.JSON) (*acpwire.InitializeResult, error) {
	caps := json.RawMessage(clientCapabilities)
	if len(clientCaps) > 0 {
		caps = json.RawMessage(clientCaps)
	}
	init, err := p.conn.Initialize(ctx, acpwire.InitializeParams{
		ProtocolVersion:    acpwire.ProtocolVersion,
		ClientCapabilities: caps,
		ClientInfo:         &acpwire.Implementation{Name: "skein", Title: "Skein", Version: "0.1.0"},
	})
	if err != nil {
		return nil, p.callError("initialize", err)
	}
	if init.ProtocolVersion != acpwire.ProtocolVersion {
		return nil, events.Errorf(events.CodeAdapterProtocol, "agent %s speaks ACP version %d, not %d", p.agent.ID, init.ProtocolVersion, acpwire.ProtocolVersion)
	}
	if m := p.agent.AuthMethod; m != "" {
		if err := p.conn.Authenticate(ctx, m); err != nil {
			return nil, p.callError("authenticate", err)
		}
	}
	return init, nil
}

// handshake runs initialize and session/new, with meta (the session's
// instructions, systemPromptMeta) as its _meta, and returns what the session
// service records about the adapter.
func (p *process) handshake(ctx context.Context, req *events.AcpCreateSessionRequest, meta json.RawMessage) (*events.AcpSessionCreatedResponse, error) {
	init, err := p.initialize(ctx, req.ClientCapabilities)
	if err != nil {
		return nil, err
	}
	sess, err := p.conn.NewSession(ctx, acpwire.NewSessionParams{
		Cwd:                   p.cmd.Dir,
		AdditionalDirectories: req.AdditionalDirectories,
		McpServers:            json.RawMessage(req.McpServers),
		Meta:                  meta,
	})
	if err != nil {
		return nil, p.callError("session/new", err)
	}
	return p.created(init, sess)
}

// restore brings back ACP session req.SessionID by the ladder: native
// session/resume when the agent advertises it, then session/load when it
// advertises that (the history it replays is dropped: the log is the only
// history), and only when the agent says the session is unknown, a new
// session (the fallback tier; the session service then arms its
// continuation preamble). Any other failure fails the restore. Whichever
// method it takes gets meta (the session's instructions) as its _meta: an
// agent is given them again on every load or resume, as at creation.
func (p *process) restore(ctx context.Context, req *events.AcpResumeSessionRequest, meta json.RawMessage) (*events.AdapterReady, error) {
	init, err := p.initialize(ctx, nil)
	if err != nil {
		return nil, err
	}
	var caps struct {
		LoadSession         bool `json:"loadSession"`
		Resume              any  `json:"resume"` // legacy spelling
		SessionCapabilities struct {
			Resume any `json:"resume"`
		} `json:"sessionCapabilities"`
	}
	_ = json.Unmarshal(init.AgentCapabilities, &caps)
	canResume := caps.SessionCapabilities.Resume != nil || caps.Resume == true
	params := acpwire.LoadSessionParams{
		SessionID:             req.SessionID,
		Cwd:                   p.cmd.Dir,
		AdditionalDirectories: req.AdditionalDirectories,
		McpServers:            json.RawMessage(req.McpServers),
		Meta:                  meta,
	}
	if canResume {
		sess, err := p.conn.ResumeSession(ctx, acpwire.ResumeSessionParams(params))
		switch {
		case err == nil:
			return p.ready(events.TierResume, init, sess)
		case !acpwire.IsUnknownSession(err):
			return nil, p.callError("session/resume", err)
		}
	}
	if caps.LoadSession {
		sess, err := p.load(ctx, params)
		switch {
		case err == nil:
			return p.ready(events.TierLoad, init, sess)
		case !acpwire.IsUnknownSession(err):
			return nil, p.callError("session/load", err)
		}
	}
	sess, err := p.conn.NewSession(ctx, acpwire.NewSessionParams{
		Cwd:                   p.cmd.Dir,
		AdditionalDirectories: req.AdditionalDirectories,
		McpServers:            json.RawMessage(req.McpServers),
		Meta:                  meta,
	})
	if err != nil {
		return nil, p.callError("session/new", err)
	}
	return p.ready(events.TierFallback, init, sess)
}

// load runs session/load with the replay it triggers kept out of ACP_IO:
// notifications are dropped from the call until its answer, which the
// reader goroutine delivers in stream order.
func (p *process) load(ctx context.Context, params acpwire.LoadSessionParams) (*acpwire.SessionResult, error) {
	if params.McpServers == nil {
		params.McpServers = json.RawMessage("[]")
	}
	type answer struct {
		m *acpwire.Message
	}
	got := make(chan answer, 1)
	p.replaying.Store(true)
	_, err := p.conn.CallAsync(acpwire.MethodSessionLoad, params, func(m *acpwire.Message) {
		p.replaying.Store(false)
		got <- answer{m}
	})
	if err != nil {
		p.replaying.Store(false)
		return nil, err
	}
	select {
	case a := <-got:
		if a.m.Error != nil {
			return nil, a.m.Error
		}
		return &acpwire.SessionResult{SessionID: params.SessionID, Modes: field(a.m.Result, "modes"), ConfigOptions: field(a.m.Result, "configOptions"), Models: field(a.m.Result, "models"), Raw: a.m.Result}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// field returns the member name of a JSON object, or nil.
func field(obj json.RawMessage, name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return nil
	}
	return json.RawMessage(nullable(m[name]))
}

func (p *process) ready(tier string, init *acpwire.InitializeResult, sess *acpwire.SessionResult) (*events.AdapterReady, error) {
	created, err := p.created(init, sess)
	if err != nil {
		return nil, err
	}
	return &events.AdapterReady{Tier: tier, Session: *created}, nil
}

// created is what the session service records about an adapter's session.
func (p *process) created(init *acpwire.InitializeResult, sess *acpwire.SessionResult) (*events.AcpSessionCreatedResponse, error) {
	var opts []events.JSON
	if len(sess.ConfigOptions) > 0 && string(sess.ConfigOptions) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(sess.ConfigOptions, &list); err != nil {
			return nil, events.Errorf(events.CodeAdapterProtocol, "configOptions: %v", err)
		}
		for _, o := range list {
			opts = append(opts, events.JSON(o))
		}
	} else {
		opts = legacyOptions(sess.Modes, sess.Models)
	}
	pid := p.pid
	return &events.AcpSessionCreatedResponse{
		SessionID:         sess.SessionID,
		Pid:               &pid,
		Modes:             nullable(sess.Modes),
		ConfigOptions:     opts,
		AgentCapabilities: nullable(init.AgentCapabilities),
		AgentInfo:         nullable(init.AgentInfo),
	}, nil
}

func nullable(raw json.RawMessage) events.JSON {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return events.JSON(raw)
}

// callError turns a failed call during the handshake into a typed error.
func (p *process) callError(method string, err error) error {
	select {
	case <-p.conn.Done():
		return events.Errorf(events.CodeAdapterExited, "agent %s exited during %s: %v", p.agent.ID, method, p.conn.Err())
	default:
	}
	if rpcErr, ok := errors.AsType[*acpwire.RPCError](err); ok {
		return events.Errorf(events.CodeAdapterError, "agent %s: %s: %d %s", p.agent.ID, method, rpcErr.Code, rpcErr.Message)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return events.Errorf(events.CodeTimeout, "agent %s did not answer %s in time", p.agent.ID, method)
	}
	return err
}

func (p *process) header(record string) nats.Header {
	return nats.Header{
		events.HeaderRecord:    []string{record},
		events.HeaderProcessID: []string{p.id},
	}
}

// publish appends v to the session's ACP_IO subject. It does not wait for
// the acknowledgement, so the reader goroutine keeps reading; messages from
// one connection are stored in the order they were sent.
func (p *process) publish(v events.Variant, hdr nats.Header) {
	data, err := events.Marshal(v)
	if err != nil {
		p.lg.Error("encode runner record", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
		return
	}
	if hdr == nil {
		hdr = p.header(v.VariantName())
	}
	fut, err := p.js.PublishMsgAsync(&nats.Msg{Subject: p.subject, Header: hdr, Data: data})
	if err != nil {
		p.m.ioPublishErrors.Inc()
		p.lg.Error("publish runner record", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
		return
	}
	p.m.ioRecords.Inc()
	go func() {
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			p.m.ioPublishErrors.Inc()
			p.lg.Error("runner record not stored", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
		}
	}()
}

func (p *process) onNotification(m *acpwire.Message) {
	if p.replaying.Load() && m.Method == acpwire.MethodSessionUpdate {
		return // the log is the only history: a load's replay is not output
	}
	p.publish(&events.AcpSessionEvent{SessionID: string(p.sid), Notification: events.JSON(m.Raw)}, nil)
}

func (p *process) onRequest(m *acpwire.Message) {
	p.publish(&events.AcpHostRequestCallback{SessionID: string(p.sid), Request: events.JSON(m.Raw)}, nil)
}

// forward writes one request (callID set) or notification to the adapter.
// The response is published to ACP_IO with the same call ID, from the reader
// goroutine, after every line the adapter wrote before it.
func (p *process) forward(callID, method string, params events.JSON) error {
	var err error
	if callID == "" {
		err = p.conn.Notify(method, json.RawMessage(params))
	} else {
		_, err = p.conn.CallAsync(method, json.RawMessage(params), func(m *acpwire.Message) {
			if m.Raw == nil {
				// The adapter ended without answering: its exit, reported
				// next, is the outcome.
				return
			}
			hdr := p.header("AcpSessionRpcResponse")
			hdr.Set(events.HeaderCallID, callID)
			p.publish(&events.AcpSessionRpcResponse{SessionID: string(p.sid), Response: events.JSON(m.Raw)}, hdr)
		})
	}
	if err != nil {
		return events.Errorf(events.CodeAdapterExited, "write to agent %s: %v", p.agent.ID, err)
	}
	if callID != "" {
		p.mu.Lock()
		p.written[callID] = true
		p.order = append(p.order, callID)
		if len(p.order) > maxWritten {
			delete(p.written, p.order[0])
			p.order = p.order[1:]
		}
		p.mu.Unlock()
	}
	return nil
}

// maxWritten bounds how many written call IDs a process remembers.
const maxWritten = 1024

// status reports whether the process runs and whether call callID was
// written to it.
func (p *process) status(callID string) *events.AdapterStatus {
	st := &events.AdapterStatus{}
	select {
	case <-p.exited:
		return st
	case <-p.conn.Done():
		return st
	default:
	}
	st.Alive = true
	p.mu.Lock()
	st.CallWritten = callID != "" && p.written[callID]
	p.mu.Unlock()
	return st
}

// reply writes a complete JSON-RPC response to an agent-to-client request.
func (p *process) reply(response events.JSON) error {
	if err := p.conn.WriteRaw(response); err != nil {
		return events.Errorf(events.CodeAdapterExited, "write to agent %s: %v", p.agent.ID, err)
	}
	return nil
}

// stderrReadSize is the most stderr one AcpAgentStderrEvent carries. The
// runner holds this buffer per adapter for the adapter's life.
const stderrReadSize = 4 << 10

func (p *process) pumpStderr(r io.Reader) {
	var sent int64
	buf := make([]byte, stderrReadSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if sent < p.stderrMax {
				chunk := buf[:min(int64(n), p.stderrMax-sent)]
				sent += int64(len(chunk))
				p.publish(&events.AcpAgentStderrEvent{
					SessionID: string(p.sid), AgentType: p.agent.ID, ProcessID: p.id,
					Chunk: append([]byte(nil), chunk...),
				}, nil)
			} else {
				p.m.stderrDropped.Add(float64(n))
			}
		}
		if err != nil {
			return
		}
	}
}

// wait reaps the process once stdout and stderr are drained, and reports an
// exit nobody asked for as AcpAgentExitedEvent, after everything the adapter
// wrote.
func (p *process) wait(stderrDone <-chan struct{}) {
	<-p.conn.Done()
	<-stderrDone
	err := p.cmd.Wait()
	var code *int32
	if p.cmd.ProcessState != nil {
		c := int32(p.cmd.ProcessState.ExitCode())
		if c >= 0 {
			code = &c
		}
	}
	if !p.stopping.Load() {
		pid := p.pid
		p.publish(&events.AcpAgentExitedEvent{
			SessionID: string(p.sid), AgentType: p.agent.ID, ProcessID: p.id,
			Pid: &pid, ExitCode: code, Restart: events.RestartNotAttempted,
		}, nil)
		p.m.unexpectedExits.Inc()
		p.lg.Warn("adapter exited", "exit_code", code, events.LogKeyErr, err)
	}
	close(p.exited)
}

// stop ends the adapter: stdin closed, then SIGTERM to its process group,
// then SIGKILL, each after StopGrace. It returns once the process is reaped.
func (p *process) stop() {
	p.stopping.Store(true)
	_ = p.stdin.Close()
	steps := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for _, sig := range steps {
		select {
		case <-p.exited:
			return
		case <-time.After(p.stopGrace):
			_ = syscall.Kill(-int(p.pid), sig)
		}
	}
	<-p.exited
}

// legacyOptions maps an agent that has no config options but the legacy
// mode and model lists (gemini, claude-code-acp) onto config options, so a
// client sees one interface. Each carries _meta.skein.legacy, the method
// that sets it (session/set_mode, session/set_model).
func legacyOptions(modes, models json.RawMessage) []events.JSON {
	var out []events.JSON
	var m struct {
		CurrentModeID  string `json:"currentModeId"`
		AvailableModes []struct {
			ID          string  `json:"id"`
			Name        string  `json:"name"`
			Description *string `json:"description,omitempty"`
		} `json:"availableModes"`
	}
	if json.Unmarshal(modes, &m) == nil && len(m.AvailableModes) > 0 {
		opt := legacyOption{ID: "mode", Name: "Mode", Category: "mode", Type: "select", CurrentValue: m.CurrentModeID, Meta: legacyMeta(acpwire.MethodSessionSetMode)}
		for _, a := range m.AvailableModes {
			opt.Options = append(opt.Options, legacyValue{Value: a.ID, Name: a.Name, Description: a.Description})
		}
		if b, err := json.Marshal(opt); err == nil {
			out = append(out, b)
		}
	}
	var md struct {
		CurrentModelID  string `json:"currentModelId"`
		AvailableModels []struct {
			ModelID     string  `json:"modelId"`
			Name        string  `json:"name"`
			Description *string `json:"description,omitempty"`
		} `json:"availableModels"`
	}
	if json.Unmarshal(models, &md) == nil && len(md.AvailableModels) > 0 {
		opt := legacyOption{ID: "model", Name: "Model", Category: "model", Type: "select", CurrentValue: md.CurrentModelID, Meta: legacyMeta(acpwire.MethodSessionSetModel)}
		for _, a := range md.AvailableModels {
			opt.Options = append(opt.Options, legacyValue{Value: a.ModelID, Name: a.Name, Description: a.Description})
		}
		if b, err := json.Marshal(opt); err == nil {
			out = append(out, b)
		}
	}
	return out
}

type legacyOption struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Category     string          `json:"category"`
	Type         string          `json:"type"`
	CurrentValue string          `json:"currentValue"`
	Options      []legacyValue   `json:"options"`
	Meta         json.RawMessage `json:"_meta"`
}

type legacyValue struct {
	Value       string  `json:"value"`
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
}

func legacyMeta(method string) json.RawMessage {
	b, _ := json.Marshal(map[string]map[string]string{"skein": {"legacy": method}})
	return b
}
