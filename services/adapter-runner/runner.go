// Package adapterrunner owns adapter processes. It spawns ACP agents from its
// registry with an isolated HOME and TMPDIR per session, speaks ACP to them
// on stdio (pkg/acp/acpwire), and publishes everything they say to the session's
// ACP_IO subject. It decides no policy and never writes a session log: the
// session service tells it what to send, over runner control subjects
// (events.RunnerSubject), and reads what came back from ACP_IO.
package adapterrunner

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/lifecycle"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
)

// Runner hosts adapter processes.
type Runner struct {
	cfg    Config
	lg     *slog.Logger
	nc     *nats.Conn
	m      *metrics
	agents map[string]Agent
	// osInstructions is the text of Config.OSInstructionsFile.
	osInstructions string
	sandbox        *sandbox
	contain        *containment // the adapters' cgroups (contain.go)
	ready          chan struct{}
	// instance is this process's, in every heartbeat (RunnerInfo.Instance).
	instance string

	// watchers runs one goroutine per adapter that forgets it once it
	// exited. Run waits for them, and for the requests its endpoints run
	// (rpc.Endpoints), before it returns.
	watchers lifecycle.Group

	mu    sync.Mutex
	procs map[string]*process // by events.SessionKey

	// files holds the uploads in progress (files.go).
	files *fileStore
	// prompts orders the prompts of each session (handlePrompt).
	prompts keyedMutex
}

// New returns a Runner; it does no I/O except reading the agents file and
// the OS instructions file, and finding the cgroups the machine gives (and
// making the runner's scope in them, contain.go).
func New(cfg Config, lg *slog.Logger, nc *nats.Conn, reg prometheus.Registerer) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	agents, err := cfg.agents()
	if err != nil {
		return nil, err
	}
	osInstructions, err := cfg.osInstructions()
	if err != nil {
		return nil, err
	}
	lg = lg.With("svc", "adapter-runner", events.LogKeyRunner, cfg.ID)
	r := &Runner{
		cfg:            cfg,
		lg:             lg,
		sandbox:        newSandbox(cfg.Sandbox, cfg.adapterUsers(), lg, reg),
		contain:        newContainment(lg, cfg, reg),
		nc:             nc,
		m:              newMetrics(reg, nc, cfg.Capacity),
		agents:         agents,
		osInstructions: osInstructions,
		ready:          make(chan struct{}),
		instance:       rand.Text(),
		procs:          map[string]*process{},
	}
	// File ops run in slots whose goroutines Run waits for (fileops.go).
	r.files = newFileStore(cfg, newFileOps(cfg, &r.watchers, r.m.fileRefusals))
	return r, nil
}

// Ready is closed once Run serves control requests and has announced itself.
func (r *Runner) Ready() <-chan struct{} { return r.ready }

// ID returns the runner's ID.
func (r *Runner) ID() events.RunnerID { return events.RunnerID(r.cfg.ID) }

// Run serves until ctx is done, then stops every adapter it hosts and
// removes its heartbeat. It returns once every goroutine it started has
// ended: request handlers, adapter processes and their watchers.
func (r *Runner) Run(ctx context.Context) error {
	// What a runner killed before this one left running (leftovers.go)
	// goes before this one hosts anything.
	killLeftovers(r.lg, r.cfg.DataDir)
	r.sandbox.prepare(r.cfg.DataDir, r.cfg.WorkspaceRoots)
	r.contain.reap()
	defer r.contain.close()
	// Every ACP_IO record is an asynchronous publish whose
	// acknowledgement its process's window follows (iowindow.go). The
	// windows bound what each adapter has in flight; the context's own
	// bound on pending publishes only has to stay out of their way (a
	// copy sent again leaves its predecessor pending until it resolves).
	jsOpts := []jetstream.JetStreamOpt{jetstream.WithPublishAsyncTimeout(ioAckTimeout),
		jetstream.WithPublishAsyncMaxPending(max(4096, 2*r.cfg.Capacity*r.cfg.IOWindowRecords))}
	var js jetstream.JetStream
	var err error
	if r.cfg.JetStreamDomain == "" {
		js, err = jetstream.New(r.nc, jsOpts...)
	} else {
		js, err = jetstream.NewWithDomain(r.nc, r.cfg.JetStreamDomain, jsOpts...)
	}
	if err != nil {
		return err
	}
	// Through a leaf node a runner's credential reaches no JetStream API
	// (a stream's info would list every session's subjects): it checks
	// nothing, and a stream that is missing fails its first write.
	if r.cfg.JetStreamDomain == "" {
		if err := streams.Provision(ctx, js, streams.Options{Replicas: r.cfg.Replicas}, false); err != nil {
			return err
		}
	}
	// An edge runner's records go to the hub through its outbox, on its
	// own disk, whether or not the link is up (outbox.go).
	ioJS := js
	var outboxDone chan error
	if r.cfg.Outbox != nil {
		o, err := openOutbox(ctx, r.cfg.Outbox.Local, js, r.cfg.Outbox.MaxBytes, r.lg, r.m)
		if err != nil {
			return err
		}
		ioJS = o.Publisher()
		octx, stopOutbox := context.WithCancel(context.WithoutCancel(ctx))
		outboxDone = make(chan error, 1)
		go func() {
			err := o.Run(octx)
			if err != nil {
				r.lg.Error("the outbox stopped forwarding records", events.LogKeyErr, err)
			}
			outboxDone <- err
		}()
		defer func() {
			// What the hub has not stored stays on disk, for the
			// runner that starts next on this data directory.
			stopOutbox()
			<-outboxDone
		}()
	}
	hb := r.heartbeats(js)
	// A runner with this ID that died (kill -9, a crash) left its
	// heartbeat, and its adapters died with it. Were this one's first
	// heartbeat to replace it, no session service would learn of those
	// exits (a heartbeat that is deleted or expires is how they do), and
	// the turns they ran would wait forever. So it is deleted first, before
	// this runner can host anything.
	if err := hb.delete(ctx); err != nil {
		return fmt.Errorf("clear the previous heartbeat: %w", err)
	}
	eps, err := rpc.StartEndpoints(ctx, r.nc, r.lg, rpc.ServiceConfig{
		Config: micro.Config{
			Name:        events.APIServiceRunner,
			Description: "Skein adapter-runner: hosts ACP adapter processes",
			Metadata:    map[string]string{"runner_id": r.cfg.ID},
		},
		Stopping: events.Errorf(events.CodeUnavailable, "runner %s is stopping", r.cfg.ID),
	})
	if err != nil {
		return fmt.Errorf("runner service: %w", err)
	}
	// stop ends what Run started, in this order: the requests (their
	// context ends at once: a create stops the adapter it was starting),
	// the adapters still hosted, then their watchers, which end with them.
	stop := func() {
		eps.Stop(0)
		r.stopAll()
		r.watchers.Close()
	}
	id := events.RunnerID(r.cfg.ID)
	endpoints := []struct {
		op    events.RunnerOp
		h     rpc.OpHandler
		async bool
	}{
		// create and restore take seconds (process start, handshake),
		// set_config waits for the agent, and stop for the process to end:
		// each runs in a goroutine of its own. The others but prompt only
		// write a line to the adapter, and keep their order.
		{events.RunnerCreate, func(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
			return r.handleCreate(ctx, ioJS, data)
		}, true},
		{events.RunnerRestore, func(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
			return r.handleRestore(ctx, ioJS, data)
		}, true},
		// A prompt reads the attachments it names from the workspace
		// (attachments.go), which its agent controls: it runs in a
		// goroutine of its own, one at a time per session, so that no
		// session's files hold up another's prompts.
		{events.RunnerPrompt, r.handlePrompt, true},
		{events.RunnerCancel, r.handleCancel, false},
		{events.RunnerPermission, r.handlePermission, false},
		{events.RunnerInput, r.handleInput, false},
		{events.RunnerSetConfig, r.handleSetConfig, true},
		{events.RunnerStatus, r.handleStatus, false},
		{events.RunnerStop, r.handleStop, true},
		// A file op reads or writes up to a chunk of the workspace, in a
		// slot bounded in number and time (fileops.go).
		{events.RunnerFile, r.handleFile, true},
		// Removing a deleted session's files ends its uploads, waits for
		// its adapter to stop, then walks its directories (remove.go).
		{events.RunnerRemove, r.handleRemove, true},
	}
	for _, e := range endpoints {
		if err := eps.Add(rpc.Endpoint{
			Name: string(e.op), Subject: events.RunnerSubject(id, e.op), Handler: e.h, Async: e.async,
			// A runner request names its session in its headers, which
			// each handler reads (sessionOf).
			Namespace: func(micro.Request) (events.Namespace, error) { return "", nil },
		}); err != nil {
			stop()
			return fmt.Errorf("runner endpoint %s: %w", e.op, err)
		}
	}
	// Listing folders is an op of the request API, for every namespace,
	// answered by any one runner (directories.go). It reads the
	// workspace as a file op does, in the slots of its namespace (a key
	// no session's events.SessionKey can be). A runner that hosts only
	// the sessions placed on it (an edge runner) serves no namespace's
	// API: its folders are those of its own machine.
	listDirectories := func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
		return runFileOp(ctx, r.files.ops, "directories/"+string(ns), func() (events.Variant, error) {
			return r.handleListDirectories(ctx, ns, data)
		})
	}
	if !r.cfg.PlacedOnly {
		if err := eps.Add(rpc.Endpoint{Name: string(events.OpListDirectories), Subject: events.APIWildcard(events.OpListDirectories),
			Handler: listDirectories, Async: true}); err != nil {
			stop()
			return fmt.Errorf("runner endpoint %s: %w", events.OpListDirectories, err)
		}
	}
	if err := r.heartbeat(ctx, hb); err != nil {
		stop()
		if ctx.Err() != nil {
			// Stopped while starting: the endpoints answer before the
			// first heartbeat, so a caller may well stop it then.
			return nil
		}
		return err
	}
	if err := eps.Listening(); err != nil {
		stop()
		return err
	}
	close(r.ready)
	r.lg.Info("adapter-runner ready", "agents", len(r.agents), "capacity", r.cfg.Capacity, "os_instructions_bytes", len(r.osInstructions))

	t := time.NewTicker(r.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := r.heartbeat(ctx, hb); err != nil && ctx.Err() == nil {
				r.lg.Warn("heartbeat failed", events.LogKeyErr, err)
			}
		case <-ctx.Done():
			// Stopping the adapters ended their windows too: what they
			// held went out once more and was followed for at most
			// ioStopDrain, so nothing is left to flush here.
			stop()
			// The adapters' asynchronous publishes (ACP_IO) keep a reply
			// subscription on the connection: their windows ended with
			// them, so it goes too.
			js.CleanupPublisher()
			cleanup, cancelCleanup := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancelCleanup()
			_ = hb.delete(cleanup)
			return nil
		}
	}
}

// Info returns what the runner announces in ACP_RUNNERS.
func (r *Runner) Info() *events.RunnerInfo {
	r.mu.Lock()
	load := len(r.procs)
	r.mu.Unlock()
	info := &events.RunnerInfo{ID: r.cfg.ID, Capacity: uint32(r.cfg.Capacity), Load: uint32(load),
		Labels: r.cfg.Labels, PlacedOnly: r.cfg.PlacedOnly, Instance: r.instance}
	for _, a := range r.agents {
		info.Agents = append(info.Agents, events.AcpAgentEntry{ID: a.ID, Installed: installed(a), AdapterEntrypoint: a.Command})
		if len(a.AllowEnv) > 0 {
			if info.AllowEnv == nil {
				info.AllowEnv = map[string][]string{}
			}
			info.AllowEnv[a.ID] = a.AllowEnv
		}
	}
	sort.Slice(info.Agents, func(i, j int) bool { return info.Agents[i].ID < info.Agents[j].ID })
	return info
}

func (r *Runner) heartbeat(ctx context.Context, hb heartbeats) error {
	data, err := events.Marshal(r.Info())
	if err != nil {
		return err
	}
	return hb.put(ctx, data)
}

// heartbeats writes the runner's entry of ACP_RUNNERS as nats.go's KV
// does, with JetStream publishes on the key's subject, acknowledged once
// stored: without a KV handle, whose making asks the JetStream API for the
// bucket's stream, which a runner joined through a leaf node may not
// (Config.JetStreamDomain). The subject is the only one such a runner may
// write to the bucket.
type heartbeats struct {
	js      jetstream.JetStream
	subject string
}

func (r *Runner) heartbeats(js jetstream.JetStream) heartbeats {
	subject := events.KVSubject(events.BucketRunners, r.cfg.ID)
	if r.cfg.JetStreamDomain != "" {
		subject = events.KVSubjectInDomain(r.cfg.JetStreamDomain, events.BucketRunners, r.cfg.ID)
	}
	return heartbeats{js: js, subject: subject}
}

func (h heartbeats) put(ctx context.Context, data []byte) error {
	_, err := h.js.Publish(ctx, h.subject, data)
	return err
}

func (h heartbeats) delete(ctx context.Context) error {
	m := nats.NewMsg(h.subject)
	m.Header.Set(events.HeaderKVOperation, events.KVOperationDelete)
	_, err := h.js.PublishMsg(ctx, m)
	return err
}

// sessionOf returns the session a runner request names in its headers.
func sessionOf(ctx context.Context) (events.Namespace, events.SessionID, error) {
	h := rpc.RequestHeaders(ctx)
	ns, err := events.ParseNamespace(h.Get(events.HeaderNamespace))
	if err != nil {
		return "", "", err
	}
	if h.Get(events.HeaderSessionID) == "" {
		return "", "", events.Errorf(events.CodeInvalidRequest, "runner request without %s", events.HeaderSessionID)
	}
	sid, err := events.ParseSessionID(h.Get(events.HeaderSessionID))
	return ns, sid, err
}

func (r *Runner) handleCreate(ctx context.Context, js jetstream.JetStream, data []byte) (events.Variant, error) {
	create, err := events.Decode[events.AcpCreateSessionRequest](data)
	if err != nil {
		return nil, err
	}
	meta := systemPromptMeta(r.instructions(create.SkipOsInstructions, create.AdditionalInstructions))
	return r.start(ctx, js, create.AgentType, spawnSpec{cwd: create.Cwd, dirs: create.AdditionalDirectories, args: create.Args, env: create.Env},
		func(ctx context.Context, p *process) (events.Variant, error) { return p.handshake(ctx, create, meta) })
}

func (r *Runner) handleRestore(ctx context.Context, js jetstream.JetStream, data []byte) (events.Variant, error) {
	v, err := events.Unmarshal(data)
	if err != nil {
		return nil, err
	}
	req, ok := v.(*events.RestoreRequest)
	if !ok {
		return nil, events.Errorf(events.CodeInvalidPayload, "got %s, want RestoreRequest", v.VariantName())
	}
	restore := &req.Resume
	meta := systemPromptMeta(r.instructions(req.SkipOsInstructions, req.AdditionalInstructions))
	caps := req.ClientCapabilities
	if restore.SessionID == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "restore without an ACP session ID")
	}
	return r.start(ctx, js, restore.AgentType, spawnSpec{cwd: restore.Cwd, dirs: restore.AdditionalDirectories, env: restore.Env},
		func(ctx context.Context, p *process) (events.Variant, error) {
			return p.restore(ctx, restore, meta, caps)
		})
}

// instructions returns a session's instructions: the OS instructions
// unless the session skips them, then its additional instructions, joined
// by a blank line. "" means none.
func (r *Runner) instructions(skipOS bool, additional *string) string {
	var parts []string
	if !skipOS && r.osInstructions != "" {
		parts = append(parts, r.osInstructions)
	}
	if additional != nil && *additional != "" {
		parts = append(parts, *additional)
	}
	return strings.Join(parts, "\n\n")
}

// start spawns the adapter of a create or restore request, runs open on it
// (the handshake), and returns open's result.
func (r *Runner) start(ctx context.Context, js jetstream.JetStream, agentID string, spec spawnSpec,
	open func(context.Context, *process) (events.Variant, error)) (events.Variant, error) {
	ns, sid, err := sessionOf(ctx)
	if err != nil {
		return nil, err
	}
	processID := rpc.RequestHeaders(ctx).Get(events.HeaderProcessID)
	if processID == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "request without %s", events.HeaderProcessID)
	}
	resp, err := r.create(ctx, js, ns, sid, processID, agentID, spec, open)
	if err != nil {
		r.lg.Warn("adapter start failed", events.LogKeySession, string(sid), events.LogKeyErr, err)
		return nil, err
	}
	return resp, nil
}

func (r *Runner) create(ctx context.Context, js jetstream.JetStream, ns events.Namespace, sid events.SessionID, processID, agentID string,
	spec spawnSpec, open func(context.Context, *process) (events.Variant, error)) (events.Variant, error) {
	agent, ok := r.agents[agentID]
	if !ok {
		return nil, events.Errorf(events.CodeUnknownAgent, "runner %s has no agent %q", r.cfg.ID, agentID)
	}
	var err error
	if spec.user, err = r.sandbox.userFor(ns); err != nil {
		return nil, err
	}
	if err := r.confine(ns, sid, agent, &spec); err != nil {
		return nil, err
	}
	defer spec.closeHeld() // the adapter holds its own, once started
	key := events.SessionKey(ns, sid)
	r.mu.Lock()
	old := r.procs[key]
	if n := len(r.procs); old == nil && n >= r.cfg.Capacity {
		r.mu.Unlock()
		return nil, events.Errorf(events.CodeAgentUnavailable, "runner %s full: %d of %d adapters (adapter-runner.capacity)", r.cfg.ID, n, r.cfg.Capacity)
	}
	r.mu.Unlock()
	if old != nil {
		// The session service asks for a new adapter only when it has none:
		// this one is a leftover of an earlier owner.
		old.stop()
	}
	spec.dataDir, spec.maxLineBytes, spec.runner = r.cfg.DataDir, r.cfg.MaxLineBytes, events.RunnerID(r.cfg.ID)
	spec.roots = r.cfg.WorkspaceRoots
	spec.ioRecords, spec.ioBytes = r.cfg.IOWindowRecords, r.cfg.IOWindowBytes
	spec.sandbox = r.sandbox
	spec.contain = r.contain
	p, err := startProcess(r.lg, js, r.m, ns, sid, processID, agent, spec, r.cfg.MaxStderrBytes, r.cfg.StopGrace)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.procs[key] = p
	r.m.hosting(len(r.procs))
	r.mu.Unlock()
	forget := func() {
		<-p.exited
		r.mu.Lock()
		if r.procs[key] == p {
			delete(r.procs, key)
		}
		r.m.hosting(len(r.procs))
		r.mu.Unlock()
	}
	if !r.watchers.Go(forget) {
		// Run is past waiting for handlers: it cannot happen, but an
		// adapter nobody would stop must not be left running.
		p.stop()
		forget()
		return nil, events.Errorf(events.CodeUnavailable, "runner %s is stopping", r.cfg.ID)
	}

	hctx, cancel := context.WithTimeout(ctx, r.cfg.CreateTimeout)
	defer cancel()
	start := time.Now()
	resp, err := open(hctx, p)
	if err != nil {
		p.stop()
		return nil, err
	}
	r.m.createSeconds.Observe(time.Since(start).Seconds())
	return resp, nil
}

// lookup returns the adapter a request's headers name.
func (r *Runner) lookup(ctx context.Context) (*process, error) {
	ns, sid, err := sessionOf(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	p := r.procs[events.SessionKey(ns, sid)]
	r.mu.Unlock()
	if p == nil {
		return nil, events.Errorf(events.CodeAdapterExited, "runner %s hosts no adapter for %s", r.cfg.ID, sid)
	}
	if want := rpc.RequestHeaders(ctx).Get(events.HeaderProcessID); want != "" && want != p.id {
		return nil, events.Errorf(events.CodeAdapterExited, "adapter process %s is gone", want)
	}
	return p, nil
}

func (r *Runner) handlePrompt(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	p, err := r.lookup(ctx)
	if err != nil {
		return nil, err
	}
	prompt, err := events.Decode[events.RunnerPromptRequest](data)
	if err != nil {
		return nil, err
	}
	if prompt.TurnID == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "prompt without a turn ID")
	}
	// One prompt of a session at a time, while other sessions' go on
	// (the endpoint runs each in a goroutine of its own). The session
	// service sends a session's next prompt only once the last one was
	// acknowledged (or sends the same turn again, which p.prompt writes
	// once), so this keeps a session's prompts in their order.
	unlock := r.prompts.lock(events.SessionKey(p.ns, p.sid))
	defer unlock()
	content := r.files.rewritePrompt(ctx, events.SessionKey(p.ns, p.sid), p.cwd, p.workdirRoot, p.embedContext, prompt.Prompt)
	if err := p.prompt(prompt.TurnID, content); err != nil {
		return nil, err
	}
	return &events.RunnerAck{ProcessID: p.id}, nil
}

func (r *Runner) handleCancel(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	p, err := r.lookup(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := events.Decode[events.RunnerCancelRequest](data); err != nil {
		return nil, err
	}
	if err := p.cancel(); err != nil {
		return nil, err
	}
	return &events.RunnerAck{ProcessID: p.id}, nil
}

func (r *Runner) handlePermission(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	p, err := r.lookup(ctx)
	if err != nil {
		return nil, err
	}
	answer, err := events.Decode[events.RunnerPermissionAnswer](data)
	if err != nil {
		return nil, err
	}
	if err := p.answerPermission(answer.RequestID, answer.OptionID); err != nil {
		return nil, err
	}
	return &events.RunnerAck{ProcessID: p.id}, nil
}

// handleSetConfig runs in its own goroutine: it waits for the agent's
// answer, up to setConfigTimeout.
func (r *Runner) handleSetConfig(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	p, err := r.lookup(ctx)
	if err != nil {
		return nil, err
	}
	set, err := events.Decode[events.RunnerSetConfigRequest](data)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, setConfigTimeout)
	defer cancel()
	opts, err := p.setConfig(ctx, set.ConfigID, set.Value)
	if err != nil {
		return nil, err
	}
	return &events.RunnerConfigResponse{ConfigOptions: opts}, nil
}

func (r *Runner) handleStatus(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	if _, err := events.Decode[events.AcpGetSessionStateRequest](data); err != nil {
		return nil, err
	}
	p, err := r.lookup(ctx)
	if err != nil {
		return &events.AdapterStatus{}, nil // gone: not alive
	}
	return p.status(rpc.RequestHeaders(ctx).Get(events.HeaderTurnID)), nil
}

// handleStop runs in its own goroutine: it waits for the process to end.
func (r *Runner) handleStop(ctx context.Context, _ events.Namespace, _ []byte) (events.Variant, error) {
	p, err := r.lookup(ctx)
	if err != nil {
		// Stopping what is not running is done already.
		return &events.RunnerAck{}, nil
	}
	p.stop()
	// The slot is free once the answer arrives, not only once the
	// watcher of the exit has run: an eviction's new adapter follows at
	// once, and must not find the runner full.
	r.mu.Lock()
	if key := events.SessionKey(p.ns, p.sid); r.procs[key] == p {
		delete(r.procs, key)
		r.m.hosting(len(r.procs))
	}
	r.mu.Unlock()
	return &events.RunnerAck{ProcessID: p.id}, nil
}

func (r *Runner) stopAll() {
	r.mu.Lock()
	procs := make([]*process, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.stop)
	}
	wg.Wait()
}

const (
	// setConfigTimeout bounds waiting for the agent's answer to a
	// configuration change.
	setConfigTimeout = 30 * time.Second
)
