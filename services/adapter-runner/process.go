package adapterrunner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/acp/acpwire"
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
	ns    events.Namespace
	sid   events.SessionID
	id    string // process ID, chosen by the session service
	agent Agent
	lg    *slog.Logger
	js    jetstream.JetStream
	m     *metrics
	cmd   *exec.Cmd
	stdin io.WriteCloser
	conn  *acpwire.Conn
	// connReady is closed once conn is set: the reader goroutine starts
	// inside NewConn, and a callback that answers the adapter (an early
	// request) must not see conn unset.
	connReady chan struct{}
	pid       uint32
	subject   string
	// embedContext: the agent takes embedded resources in a prompt
	// (promptCapabilities.embeddedContext), as its initialize said; set
	// before any prompt (attachments.go).
	embedContext bool
	stopping     atomic.Bool
	replaying    atomic.Bool // a session/load is replaying history: drop its updates
	wire         wireState   // the ACP session as the runner speaks it (adapterio.go)
	// io carries the records to ACP_IO and keeps each until stored
	// (iowindow.go).
	io *ioWindow
	// pub numbers the records published to ACP_IO (HeaderRecordNo) and
	// holds the updates of a burst not yet published (gather).
	pub struct {
		sync.Mutex
		records uint64
		updates []events.JSON
		// kinds and ids are each gathered update's sessionUpdate and
		// messageId; ids is nil while no update has one.
		kinds []string
		ids   []*string
		bytes int
	}

	mu        sync.Mutex
	written   map[string]bool // turn IDs whose session/prompt was written to the adapter (the last maxWritten)
	order     []string
	exited    chan struct{} // closed after the exit is handled
	stderrMax int64
	stopGrace time.Duration

	started  time.Time
	startLog startLog
	// confined: the adapter runs under Landlock; user is who it runs
	// as, uid 0 for the runner's user (deniedHint).
	confined   bool
	user       adapterUser
	stderrDone chan struct{} // closed once stderr is drained
	record     string        // the adapter's leftover record (leftovers.go), "" if none
	// cg is the adapter's cgroups, nil where the machine has none
	// (cgroup.go); limits follows the limits they carry.
	cg     *adapterCgroup
	limits *limitWatch

	// cwd is the working directory's path, as the ACP session names it;
	// workdir the directory, held for the process's life: what the
	// runner reads there for it (a prompt's attachments) it reads
	// through this, not by cwd (workdirRoot). nil once let go.
	cwd       string
	workdir   *workspace.Dir
	workdirMu sync.RWMutex
}

// spawnSpec is what a create request asks for.
type spawnSpec struct {
	dataDir      string
	roots        []string // the runner's workspace roots
	cwd          string   // the path the cwd was opened as (Runner.confine)
	dirs         []string // the additional directories' paths, as opened
	args         []string
	env          map[string]string
	maxLineBytes int
	// runner is the runner's ID, the last token of its records' subject
	// (events.IOSubject): the hub accepts a record only of the runner the
	// session's adapter runs on.
	runner events.RunnerID
	// ioRecords and ioBytes bound the process's ACP_IO window.
	ioRecords, ioBytes int
	sandbox            *sandbox     // confines the adapter (sandbox.go)
	contain            *containment // holds it in cgroups, with limits (contain.go)
	// held are the cwd and the additional directories, held open by
	// confine: the adapter starts in and is granted these, not what
	// their names lead to now.
	held []*workspace.Dir
	// user is who the adapter runs as (adapteruser.go): the zero user
	// for the runner's own.
	user adapterUser
}

func startProcess(lg *slog.Logger, js jetstream.JetStream, m *metrics, ns events.Namespace, sid events.SessionID, id string, agent Agent, spec spawnSpec, stderrMax int64, stopGrace time.Duration) (*process, error) {
	dir := filepath.Join(spec.dataDir, string(ns), string(sid))
	home, tmp := filepath.Join(dir, "home"), filepath.Join(dir, "tmp")
	for _, d := range []string{home, tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("session directories: %w", err)
		}
	}
	// Under a runner started as root, HOME and TMPDIR are the adapter's
	// user's, and the directories above them searchable to it.
	if u := spec.user; u.uid != 0 {
		if err := u.searchable(filepath.Dir(dir), dir); err != nil {
			return nil, fmt.Errorf("session directories: %w", err)
		}
		if err := u.own(home, tmp); err != nil {
			return nil, fmt.Errorf("session directories: %w", err)
		}
	}
	path, err := agent.lookPath()
	if err != nil {
		return nil, events.Errorf(events.CodeAgentNotInstalled, "agent %s is not installed: %v", agent.ID, err)
	}
	policy, err := policyFor(agent, path, spec, home, tmp)
	if err != nil {
		return nil, err
	}
	cg, lim, err := spec.contain.open(agent, ns, sid, id)
	if err != nil {
		return nil, err
	}
	// What a start that fails leaves goes: the held directory's
	// duplicate, and the cgroups with whatever got into them.
	started := false
	var workdir *workspace.Dir
	defer func() {
		if started {
			return
		}
		if workdir != nil {
			_ = workdir.Close()
		}
		if cg != nil {
			cg.kill()
			if err := cg.remove(); err != nil {
				lg.Warn("cannot remove a failed adapter's cgroup", events.LogKeyErr, err)
			}
		}
	}()
	if cg != nil {
		policy.Cgroups = cg.procsFiles()
	}
	cmd, err := spec.sandbox.command(agent.ID, path, append(append([]string{}, agent.Args...), spec.args...), policy)
	if err != nil {
		return nil, err
	}
	// The held cwd, by a name that reaches exactly it: the child
	// changes into /proc/self/fd/N after fork, before it closes or
	// replaces any descriptor, so N is still the runner's. Through the
	// launcher the held directories are inherited (workdirFiles), and
	// it enters the cwd by its descriptor.
	if workdir, err = spec.held[0].Dup(); err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	cmd.Dir = spec.held[0].ProcPath()
	if policy.launched(cmd) {
		cmd.ExtraFiles = append(workdirFiles(spec.held), cmd.ExtraFiles...)
	}
	cmd.Env = adapterEnv(home, tmp, agent.Env, spec.env)
	// Its own process group, so that stopping it also stops what it
	// spawned, and killed when the runner dies (process_linux.go).
	cmd.SysProcAttr = sysProcAttr()
	if cg != nil {
		cg.attach(cmd.SysProcAttr) // born in its cgroup, where v2 allows
	}
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
	if err := startCommand(cmd); err != nil {
		if errors.Is(err, fs.ErrNotExist) { // removed since lookPath
			return nil, events.Errorf(events.CodeAgentNotInstalled, "agent %s is not installed: %v", agent.ID, err)
		}
		return nil, events.Errorf(events.CodeAgentUnavailable, "start agent %s: %v", agent.ID, err)
	}
	record, err := recordAdapter(spec.dataDir, cmd.Process.Pid)
	if err == nil && cg != nil {
		// Where no launcher joined them (the sandbox off), or v1 has no
		// launcher's help: a no-op for a process already in them.
		err = cg.join(cmd.Process.Pid)
	}
	if err != nil {
		// An adapter that a runner killed now would not be found again
		// must not run.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		commandReaped()
		return nil, err
	}
	p := &process{
		ns: ns, sid: sid, id: id, agent: agent, js: js, m: m,
		lg:        lg.With(events.LogKeySession, string(sid), events.LogKeyProcess, id, events.LogKeyAgent, agent.ID),
		cmd:       cmd,
		cwd:       spec.cwd,
		workdir:   workdir,
		stdin:     stdin,
		pid:       uint32(cmd.Process.Pid),
		subject:   events.IOSubject(ns, sid, spec.runner),
		exited:    make(chan struct{}),
		written:   map[string]bool{},
		stderrMax: stderrMax,
		stopGrace: stopGrace,
		confined:  policy.launched(cmd) && spec.sandbox != nil && spec.sandbox.abi > 0,
		user:      spec.user,

		started:    time.Now(),
		stderrDone: make(chan struct{}),
		record:     record,
		connReady:  make(chan struct{}),
		cg:         cg,
	}
	started = true
	p.limits = newLimitWatch(p, spec.contain, cg, lim, spec.held, home, tmp)
	p.io = newIOWindow(js, p.lg, m, spec.ioRecords, spec.ioBytes)
	defer close(p.connReady)
	p.conn = acpwire.NewConn(stdout, stdin, acpwire.Options{
		MaxLineBytes:   spec.maxLineBytes,
		OnNotification: p.onNotification,
		OnRequest:      p.onRequest,
		OnIdle:         p.flush,
		OnProtocolError: func(line []byte, err error) {
			p.lg.Warn("adapter wrote a line that is not ACP", events.LogKeyErr, err)
			p.m.protocolErrors.Inc()
			p.startLog.junk(line)
		},
		Logger: p.lg,
	})
	go func() {
		defer close(p.stderrDone)
		p.pumpStderr(stderr)
	}()
	go p.limits.run()
	go p.wait()
	return p, nil
}

// adapterEnv builds the adapter's environment: a minimal base, an isolated
// HOME and TMPDIR (and XDG directories), then the registry entry's env, then
// the session's. Later entries win. Claude Code keeps its shell's working
// files in CLAUDE_CODE_TMPDIR, else /tmp whatever TMPDIR says: the sandbox
// denies /tmp, and its Bash tool would fail on every command. gemini-cli
// runs its shell tool in a pseudo-terminal, which the sandbox denies
// (/dev/ptmx, /dev/pts: shared by every session), and does not fall back
// to a plain child process on the error forkpty gives then:
// GEMINI_PTY_INFO=child_process makes it use one from the start.
func adapterEnv(home, tmp string, agentEnv, sessionEnv map[string]string) []string {
	env := map[string]string{
		"HOME":               home,
		"TMPDIR":             tmp,
		"CLAUDE_CODE_TMPDIR": tmp,
		"GEMINI_PTY_INFO":    "child_process",
		"XDG_CONFIG_HOME":    filepath.Join(home, ".config"),
		"XDG_CACHE_HOME":     filepath.Join(home, ".cache"),
		"XDG_DATA_HOME":      filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME":     filepath.Join(home, ".local", "state"),
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

// stderrReadSize is the most stderr one AcpAgentStderrEvent carries. The
// runner holds this buffer per adapter for the adapter's life.
const stderrReadSize = 4 << 10

func (p *process) pumpStderr(r io.Reader) {
	var sent int64
	buf := make([]byte, stderrReadSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.startLog.write(buf[:n])
			if sent < p.stderrMax {
				chunk := buf[:min(int64(n), p.stderrMax-sent)]
				sent += int64(len(chunk))
				p.publish(&events.AcpAgentStderrEvent{
					SessionID: string(p.sid), AgentType: p.agent.ID, ProcessID: p.id,
					Chunk: append([]byte(nil), chunk...),
				})
			} else {
				p.m.stderrDropped.Add(float64(n))
			}
		}
		if err != nil {
			return
		}
	}
}

// wait reaps the adapter, with everything in its process group killed
// first, and reports an exit nobody asked for as AcpAgentExitedEvent, after
// everything the adapter wrote.
//
// On Linux the adapter's exit is seen before it is reaped: its zombie still
// holds its process ID, and so its group's, which no other process can be
// given meanwhile. Whatever is left in the group is killed then, however
// the adapter ended (stopped, exited on its own, killed), so that nothing it
// spawned outlives it. Then stdout and stderr reach their end, as nothing
// holds them open any more; if something that left the group still does,
// they are closed under it after stopGrace, counted from the last moment a
// full ACP_IO window held their readers back (awaitOutput). Its leftover
// record goes last,
// before the reaping frees the process ID for another adapter's record.
// Elsewhere the adapter is reaped once its output ends, and its group is
// killed after.
func (p *process) wait() {
	seen := awaitExit(int(p.pid)) == nil
	if seen {
		p.killGroup()
		p.killCgroup()
		p.awaitOutput()
	} else {
		<-p.conn.Done()
		<-p.stderrDone
	}
	if p.record != "" {
		if err := os.Remove(p.record); err != nil {
			p.lg.Warn("cannot clear the adapter's leftover record", events.LogKeyErr, err)
		}
	}
	err := p.cmd.Wait() // closes stdout and stderr, if they had not ended
	if !seen {
		p.killGroup()
		p.killCgroup()
	}
	// The limits met, the OOM kill that ended the adapter among them, go
	// before its exit.
	p.limits.end()
	if p.cg != nil {
		if err := p.cg.remove(); err != nil {
			p.lg.Warn("cannot remove the adapter's cgroup", events.LogKeyErr, err)
		}
	}
	<-p.conn.Done()
	<-p.stderrDone
	commandReaped()
	var code *int32
	if p.cmd.ProcessState != nil {
		c := int32(p.cmd.ProcessState.ExitCode())
		if c >= 0 {
			code = &c
		}
	}
	p.m.exits.WithLabelValues(p.exitCause()).Inc()
	if !p.stopping.Load() {
		pid := p.pid
		p.publish(&events.AcpAgentExitedEvent{
			SessionID: string(p.sid), AgentType: p.agent.ID, ProcessID: p.id,
			Pid: &pid, ExitCode: code, Restart: events.RestartNotAttempted,
		})
		p.m.unexpectedExits.Inc()
		p.lg.Warn("adapter exited", exitCodeAttr(code), events.LogKeyErr, err)
	}
	// The process is over once ACP_IO stored what it said, the exit
	// last: however long the stream takes, unless the runner stops the
	// process meanwhile (stop ends the window's retries).
	p.io.close()
	<-p.io.done
	p.workdirMu.Lock()
	_ = p.workdir.Close()
	p.workdir = nil
	p.workdirMu.Unlock()
	close(p.exited)
}

// workdirRoot opens an os.Root of the held working directory, to be
// closed by the caller; nil once the process has let the directory go.
func (p *process) workdirRoot() *os.Root {
	p.workdirMu.RLock()
	defer p.workdirMu.RUnlock()
	if p.workdir == nil {
		return nil
	}
	root, err := p.workdir.Root()
	if err != nil {
		return nil
	}
	return root
}

// exitCodeAttr is the exit code for a log line: the number, or "none"
// for a process a signal ended (the record leaves its exitCode out). A
// pointer given to slog as it is would be logged as its address.
func exitCodeAttr(code *int32) slog.Attr {
	if code == nil {
		return slog.String("exit_code", "none")
	}
	return slog.Int("exit_code", int(*code))
}

// awaitOutput waits until stdout and stderr reach their end, for at most
// stopGrace past the last moment the runner held their readers back: a full
// window (iowindow.go) leaves what the adapter wrote last in the pipes, to
// be read once the stream stores again, and closing them then would lose
// it. Only output that something outside the adapter's group holds open
// is cut.
func (p *process) awaitOutput() {
	t := time.NewTimer(p.stopGrace)
	defer t.Stop()
	for _, c := range []<-chan struct{}{p.conn.Done(), p.stderrDone} {
	wait:
		for {
			select {
			case <-c:
				break wait
			case <-t.C:
				d := p.io.heldWithin(p.stopGrace)
				if d == 0 {
					return
				}
				t.Reset(d)
			}
		}
	}
}

// exitCause says why the reaped process ended: one of the exit constants.
func (p *process) exitCause() string {
	switch {
	case errors.Is(p.conn.Err(), acpwire.ErrLineTooLong):
		// The root cause, whoever ended the process: nothing reads the
		// adapter's output any more, and it is stopped or exits.
		return exitProtocolError
	case p.stopping.Load():
		return exitRequested
	case p.cmd.ProcessState == nil:
		return exitFailed
	}
	switch code := p.cmd.ProcessState.ExitCode(); {
	case code < 0:
		return exitSignal // ExitCode is -1 for a process a signal ended
	case code == 0:
		return exitClean
	}
	return exitFailed
}

// within waits until every channel of done is closed, for at most d.
func within(d time.Duration, done ...<-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, c := range done {
		select {
		case <-c:
		case <-t.C:
			return
		}
	}
}

// killGroup kills what is left in the adapter's process group.
func (p *process) killGroup() {
	if err := syscall.Kill(-int(p.pid), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.lg.Warn("cannot kill the adapter's process group", events.LogKeyErr, err)
	}
}

// killCgroup kills every process in the adapter's cgroups: what it
// spawned, in a session of its own or not.
func (p *process) killCgroup() {
	if p.cg != nil {
		p.cg.kill()
	}
}

// kill ends the adapter and everything it spawned at once, as a limit
// does; wait then reports the exit.
func (p *process) kill() {
	p.killCgroup()
	p.killGroup()
}

// stop ends the adapter: stdin closed, then SIGTERM to its process group,
// then SIGKILL to its cgroup and group, each after StopGrace. It returns
// once the process, and everything it spawned, is gone.
func (p *process) stop() {
	p.stopping.Store(true)
	// A full window must not hold the reader, or the adapter could not
	// be read to its end and reaped.
	p.io.stop()
	_ = p.stdin.Close()
	steps := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for _, sig := range steps {
		select {
		case <-p.exited:
			return
		case <-time.After(p.stopGrace):
			if sig == syscall.SIGKILL {
				p.killCgroup()
			}
			_ = syscall.Kill(-int(p.pid), sig)
		}
	}
	<-p.exited
}
