// Package gatewaytest runs what the gateway talks to on a real NATS server,
// so that the gateway and its HTTP clients can be tested end to end:
//
//   - the real history service (services/history), which answers
//     read_history, get_session, list_agents and the cached getters from
//     the real ACP_LOG stream and the ACP_SESSIONS and ACP_RUNNERS buckets,
//     as in production;
//   - a fake session service, which plays the session service's part of
//     the contract on the same stream and buckets: it appends a session's
//     records through eventlog.Writer (SessionOpened, the accepting user
//     message, updates, TurnFinished, SessionDeleted, ...), keeps the
//     ACP_SESSIONS projection the history service reads, and answers
//     prompt the way the session service does (events.PromptAccepted as
//     soon as the turn is accepted; the outcome is the turn's TurnFinished
//     in the log). Each turn is played by a PromptFunc the test chooses.
//
// Nothing is mocked: requests travel as msgpack over nats micro endpoints,
// records are stored in JetStream and reach live viewers through the
// stream's RePublish. SessionContract (contract.go) holds the fake session
// service to the rules a client relies on; the real one must pass it too.
//
// Only tests import it. It does not import nats-server: pair it with
// internal/natstest.
package gatewaytest

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/history"
)

// DefaultWorkspaceRoot stands for the workspace root: a session opened
// without a cwd gets <root>/<namespace>/<session ID>, as from the session
// service (package workspace). Paths are not checked against it.
const DefaultWorkspaceRoot = "/home/agentos"

// runnerID is the fake runner whose heartbeat in ACP_RUNNERS lists the
// agents (SetAgents).
const runnerID = "gatewaytest"

// heartbeatEvery refreshes the fake runner's heartbeat well within the
// bucket's TTL (eventlog.DefaultRunnerTTL).
const heartbeatEvery = eventlog.DefaultRunnerTTL / 3

// opTimeout bounds one JetStream operation of the fake.
const opTimeout = 10 * time.Second

// historyOps are the ops the real history service answers.
var historyOps = []events.Op{
	events.OpReadHistory, events.OpGetSession, events.OpListSessions, events.OpListAgents,
	events.OpGetSessionConfig, events.OpGetSessionCapabilities, events.OpGetSessionAgentInfo,
}

// PromptFunc plays one turn of the fake session service. The turn is
// accepted (its user message stored) before it runs; it writes the rest of
// the session's log through t and returns the prompt's response or error,
// which becomes the turn's TurnFinished: completed with the response's
// stopReason and message (cancelled when the stopReason is "cancelled"),
// or failed with the error. ctx ends when the test does, or when
// cancel_prompt, unload_session or delete_session ends the turn; the
// turn's TurnFinished is then theirs (cancelled) whatever the function
// returns.
type PromptFunc func(ctx context.Context, t *Turn) (*events.AcpPromptResponse, error)

// Option configures Start.
type Option func(*options)

type options struct {
	maxEvents int64
}

// WithMaxEventsPerSession makes ACP_LOG keep at most n records per subject
// (eventlog.Options.MaxEventsPerSession): older events are pruned, and the
// history service answers cursor_expired for a cursor before them.
func WithMaxEventsPerSession(n int64) Option {
	return func(o *options) { o.maxEvents = n }
}

// Backend is the real history service and the fake session service. Its
// methods are safe for concurrent use.
type Backend struct {
	tb      testing.TB
	nc      *nats.Conn
	js      jetstream.JetStream
	log     jetstream.Stream
	meta    jetstream.KeyValue
	runners jetstream.KeyValue

	ctx    context.Context
	cancel context.CancelFunc
	turns  sync.WaitGroup

	history     *history.Service
	historyStop context.CancelFunc
	historyDone chan error
	observed    *nats.Subscription // every request to a history op
	heartbeat   chan struct{}      // closed when the heartbeat loop returns

	// permMu serialises every change to permission requests (asked,
	// answered, ended) with the append that records it, as the session
	// lock does in the real service: a response can never overtake the
	// request it answers, and the first resolution wins. Take it before mu.
	permMu sync.Mutex

	mu          sync.Mutex
	sessions    map[string]*session
	failures    map[events.Op]error
	calls       map[events.Op]int
	last        map[events.Op]events.Variant
	prompt      PromptFunc
	onCancel    CancelFunc
	onUnload    UnloadFunc
	onRespond   RespondFunc
	onSetConfig SetConfigFunc
	agentList   []events.AcpAgentEntry // the fake runner's agents
	nextID      uint64                 // of turns and permission requests
	historyOff  bool                   // StopHistory was called
	closed      bool                   // the test is ending: no new turns
}

// session is what the fake session service holds of one session. Guarded
// by Backend.mu.
type session struct {
	ns       events.Namespace
	sid      events.SessionID
	w        *eventlog.Writer
	meta     events.SessionMeta // the ACP_SESSIONS projection
	turn     *Turn              // the turn being played, or nil
	keyed    map[string]*Turn   // turns by idempotency key
	resolved map[string]string  // permission request ID → why it is no longer pending
	unloaded bool               // by unload_session, until the next prompt
}

// Start provisions the streams and buckets (eventlog.Provision), runs the
// real history service, and serves the session service's ops
// (open_session, prompt, cancel_prompt, unload_session, delete_session,
// respond_permission, set_session_config_option, rename_session) for every namespace on nc
// until the test ends. Prompts play Echo unless OnPrompt says otherwise;
// cancels, unloads and permission answers act on the turn being played
// (see Turn) unless OnCancel, OnUnload or OnRespond say otherwise, and
// deletes always do; set_session_config_option plays the agent unless
// OnSetConfig says otherwise. The fake runner offers DefaultAgents unless
// SetAgents says otherwise.
func Start(tb testing.TB, nc *nats.Conn, opts ...Option) *Backend {
	tb.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("gatewaytest: jetstream: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(tb.Context()))
	b := &Backend{
		tb:        tb,
		nc:        nc,
		js:        js,
		ctx:       ctx,
		cancel:    cancel,
		sessions:  map[string]*session{},
		failures:  map[events.Op]error{},
		calls:     map[events.Op]int{},
		last:      map[events.Op]events.Variant{},
		prompt:    Echo,
		agentList: DefaultAgents(),
		heartbeat: make(chan struct{}),
	}
	sctx, scancel := context.WithTimeout(ctx, opTimeout)
	defer scancel()
	if err := eventlog.Provision(sctx, js, eventlog.Options{MaxEventsPerSession: o.maxEvents}, true); err != nil {
		tb.Fatalf("gatewaytest: provision: %v", err)
	}
	if b.log, err = js.Stream(sctx, events.StreamLog); err != nil {
		tb.Fatalf("gatewaytest: %s: %v", events.StreamLog, err)
	}
	if b.meta, err = js.KeyValue(sctx, events.BucketSessions); err != nil {
		tb.Fatalf("gatewaytest: %s: %v", events.BucketSessions, err)
	}
	if b.runners, err = js.KeyValue(sctx, events.BucketRunners); err != nil {
		tb.Fatalf("gatewaytest: %s: %v", events.BucketRunners, err)
	}
	if err := b.putHeartbeat(); err != nil {
		tb.Fatalf("gatewaytest: runner heartbeat: %v", err)
	}
	go b.heartbeatLoop()

	// Requests to the history service are observed (Calls, LastRequest)
	// by a plain subscription beside it, which never answers.
	if b.observed, err = nc.SubscribeSync(events.APIWildcard("*")); err != nil {
		tb.Fatalf("gatewaytest: observe requests: %v", err)
	}
	b.startHistory()

	svc, err := micro.AddService(nc, micro.Config{Name: "gatewaytest-session", Version: "0.0.1"})
	if err != nil {
		tb.Fatalf("gatewaytest: add service: %v", err)
	}
	endpoints := map[events.Op]func(events.Namespace, []byte) (events.Variant, error){
		events.OpOpenSession:            b.openSession,
		events.OpCancelPrompt:           b.cancelPrompt,
		events.OpUnloadSession:          b.unloadSession,
		events.OpDeleteSession:          b.deleteSession,
		events.OpRespondPermission:      b.respondPermission,
		events.OpSetSessionConfigOption: b.setSessionConfigOption,
		events.OpPrompt:                 b.promptOp,
		events.OpRenameSession:          b.renameSession,
	}
	for op, fn := range endpoints {
		handler := func(req micro.Request) {
			ns, err := events.NamespaceFromAPISubject(req.Subject())
			if err == nil {
				err = b.failure(op)
			}
			var resp events.Variant
			if err == nil {
				resp, err = fn(ns, req.Data())
			}
			if err != nil {
				_ = events.RespondError(req, err) // the requester may be gone; nothing to do
				return
			}
			_ = events.Respond(req, resp)
		}
		if err := svc.AddEndpoint(string(op), micro.HandlerFunc(handler), micro.WithEndpointSubject(events.APIWildcard(op))); err != nil {
			tb.Fatalf("gatewaytest: add endpoint %s: %v", op, err)
		}
	}
	tb.Cleanup(func() {
		b.mu.Lock()
		b.closed = true // no turn starts once Wait may run
		b.mu.Unlock()
		cancel()
		b.turns.Wait()
		if err := svc.Stop(); err != nil {
			tb.Errorf("gatewaytest: stop service: %v", err)
		}
		b.StopHistory()
		_ = b.observed.Unsubscribe() // the connection may be closed already
		<-b.heartbeat
	})
	return b
}

// startHistory runs the real history service until StopHistory.
func (b *Backend) startHistory() {
	lg := slog.New(slog.NewTextHandler(b.tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := history.New(history.Config{}, lg, b.nc, nil)
	if err != nil {
		b.tb.Fatalf("gatewaytest: history: %v", err)
	}
	ctx, stop := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.Ready():
	case err := <-done:
		stop()
		b.tb.Fatalf("gatewaytest: history service: %v", err)
	}
	b.history, b.historyStop, b.historyDone = svc, stop, done
}

// StopHistory stops the history service: its ops then find no responder,
// which a client sees as unavailable. Requests to them are no longer
// observed either (an observer is interest, which would turn "no
// responder" into a timeout). Stopping it twice is harmless.
func (b *Backend) StopHistory() {
	b.mu.Lock()
	stopped := b.historyOff
	b.historyOff = true
	b.mu.Unlock()
	if stopped {
		return
	}
	b.drainObserved()
	_ = b.observed.Unsubscribe() // the connection may be closed already
	b.historyStop()
	if err := <-b.historyDone; err != nil {
		b.tb.Errorf("gatewaytest: history service: %v", err)
	}
}

// putHeartbeat writes the fake runner's heartbeat with the agents it
// offers.
func (b *Backend) putHeartbeat() error {
	b.mu.Lock()
	info := &events.RunnerInfo{ID: runnerID, Agents: slices.Clone(b.agentList), Capacity: 100}
	b.mu.Unlock()
	data, err := events.Marshal(info)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	_, err = b.runners.Put(ctx, runnerID, data)
	return err
}

// heartbeatLoop keeps the fake runner alive until the test ends.
func (b *Backend) heartbeatLoop() {
	defer close(b.heartbeat)
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
			if err := b.putHeartbeat(); err != nil && b.ctx.Err() == nil {
				b.tb.Errorf("gatewaytest: runner heartbeat: %v", err)
			}
		}
	}
}

// drainObserved counts the requests to history ops received so far. The
// flush makes every request the server delivered to this connection
// before it pending on the subscription.
func (b *Backend) drainObserved() {
	if err := b.nc.Flush(); err != nil {
		return // the connection is gone: nothing more will arrive
	}
	for b.observed.IsValid() {
		if n, _, _ := b.observed.Pending(); n == 0 {
			return
		}
		m, err := b.observed.NextMsg(opTimeout)
		if err != nil {
			return
		}
		op := events.Op(m.Subject[len(m.Subject)-len(lastToken(m.Subject)):])
		if !slices.Contains(historyOps, op) {
			continue // a session op: its handler counts it
		}
		v, err := events.Unmarshal(m.Data)
		b.mu.Lock()
		b.calls[op]++
		if err == nil {
			b.last[op] = v
		}
		b.mu.Unlock()
	}
}

func lastToken(subject string) string {
	for i := len(subject) - 1; i >= 0; i-- {
		if subject[i] == '.' {
			return subject[i+1:]
		}
	}
	return subject
}

// failure records a call of op and returns the error Fail set for it.
func (b *Backend) failure(op events.Op) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls[op]++
	return b.failures[op]
}

// Fail makes every later call of the session op op fail with err, until
// Fail(op, nil). The history service's ops cannot be made to fail this
// way: it is the real one (use StopHistory, or give it a log that fails).
func (b *Backend) Fail(op events.Op, err error) {
	b.tb.Helper()
	if slices.Contains(historyOps, op) {
		b.tb.Fatalf("gatewaytest: Fail(%s): the real history service serves it", op)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures[op] = err
}

// Calls returns how many requests for op arrived so far.
func (b *Backend) Calls(op events.Op) int {
	b.drainObserved()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[op]
}

// LastRequest returns the last request for op that decoded, or nil.
func (b *Backend) LastRequest(op events.Op) events.Variant {
	b.drainObserved()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last[op]
}

// OnPrompt replaces the turn that prompts play.
func (b *Backend) OnPrompt(fn PromptFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prompt = fn
}

func key(ns events.Namespace, sid events.SessionID) string { return events.SessionKey(ns, sid) }

// CreateSession opens sid in ns directly, as open_session would.
func (b *Backend) CreateSession(ns events.Namespace, sid events.SessionID, agent string) {
	b.tb.Helper()
	if _, err := b.open(ns, sid, &events.AcpOpenSessionRequest{Agent: agent}); err != nil {
		b.tb.Fatalf("gatewaytest: create session %s: %v", sid, err)
	}
}

// Session returns a copy of the session's metadata as the fake session
// service projects it, or false. Its LatestSequence is the session's
// newest record of any kind; get_session answers the newest public
// event's.
func (b *Backend) Session(ns events.Namespace, sid events.SessionID) (events.AcpDurableSessionInfo, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		return events.AcpDurableSessionInfo{}, false
	}
	info := s.meta.Info
	info.LatestSequence = s.w.Position().LastSeq
	return info, true
}

// Append stores one session update (raw ACP JSON) as a durable event of
// the session and returns its sequence.
func (b *Backend) Append(ns events.Namespace, sid events.SessionID, update string) uint64 {
	b.tb.Helper()
	seq, err := b.append(ns, sid, eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{Update: events.JSON(update)}})
	if err != nil {
		b.tb.Fatalf("gatewaytest: append to %s: %v", sid, err)
	}
	return seq
}

// AppendControl stores a lifecycle record (not a public event) in the
// session's log and returns its sequence: it moves the log's end without
// anything a viewer could see.
func (b *Backend) AppendControl(ns events.Namespace, sid events.SessionID) uint64 {
	b.tb.Helper()
	seq, err := b.append(ns, sid, eventlog.Entry{Kind: events.LogControl, Value: &events.OwnerChanged{Owner: runnerID, LeaseRevision: 1}})
	if err != nil {
		b.tb.Fatalf("gatewaytest: append control record to %s: %v", sid, err)
	}
	return seq
}

// AppendCorrupt stores a public event whose payload does not decode, as a
// broken writer might: every history read that reaches it fails
// (invalid_payload, which the gateway masks as internal).
func (b *Backend) AppendCorrupt(ns events.Namespace, sid events.SessionID) uint64 {
	b.tb.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		b.tb.Fatalf("gatewaytest: no session %s", sid)
	}
	pos := s.w.Position()
	msg := nats.NewMsg(events.LogSubject(ns, sid, events.LogEvents))
	msg.Data = []byte("not msgpack")
	msg.Header.Set(events.HeaderRecord, events.AcpDurableSessionUpdate{}.VariantName())
	msg.Header.Set(events.HeaderEventNo, strconv.FormatUint(pos.LastEventNo+1, 10))
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, msg) // the fake is the session's only writer
	if err != nil {
		b.tb.Fatalf("gatewaytest: append a corrupt record to %s: %v", sid, err)
	}
	s.w = eventlog.NewWriter(b.js, ns, sid, eventlog.Position{LastSeq: ack.Sequence, LastEventNo: pos.LastEventNo + 1}, writerToken(ack.Sequence))
	return ack.Sequence
}

// WithoutTail runs fn while ACP_LOG republishes nothing: records appended
// meanwhile are stored, and history has them, but no live viewer sees them
// arrive, as when core NATS drops messages. The next record that is
// republished names the last one as its predecessor (Nats-Last-Sequence),
// which is how a viewer finds the gap.
func (b *Backend) WithoutTail(fn func()) {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	cfg := b.log.CachedInfo().Config
	quiet := cfg
	quiet.RePublish = nil
	if _, err := b.js.UpdateStream(ctx, quiet); err != nil {
		b.tb.Fatalf("gatewaytest: stop republishing: %v", err)
	}
	defer func() {
		if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
			b.tb.Fatalf("gatewaytest: republish again: %v", err)
		}
	}()
	fn()
}

// Delta publishes a live delta (raw ACP JSON update) that follows the
// durable sequence after.
func (b *Backend) Delta(ns events.Namespace, sid events.SessionID, after uint64, update string) {
	b.tb.Helper()
	if err := b.delta(ns, sid, after, update); err != nil {
		b.tb.Fatalf("gatewaytest: delta to %s: %v", sid, err)
	}
}

// Stderr publishes adapter stderr on the session's live subject, which
// viewers must ignore.
func (b *Backend) Stderr(ns events.Namespace, sid events.SessionID, text string) {
	b.tb.Helper()
	data, err := events.Marshal(&events.AcpAgentStderrEvent{SessionID: string(sid), AgentType: "demo", ProcessID: "p1", Chunk: []byte(text)})
	if err == nil {
		err = b.nc.Publish(events.LiveSubject(ns, sid), data)
	}
	if err != nil {
		b.tb.Fatalf("gatewaytest: stderr to %s: %v", sid, err)
	}
}

func (b *Backend) delta(ns events.Namespace, sid events.SessionID, after uint64, update string) error {
	data, err := events.Marshal(&events.AcpEphemeralSessionUpdateEvent{SessionID: string(sid), AfterSequence: after, Update: events.JSON(update)})
	if err != nil {
		return err
	}
	msg := nats.NewMsg(events.LiveSubject(ns, sid))
	msg.Data = data
	msg.Header.Set(events.HeaderAfterSequence, strconv.FormatUint(after, 10))
	return b.nc.PublishMsg(msg)
}

// append stores entries as one atomic append to the session's log and
// returns the first one's sequence. Appends of one backend are serial,
// like one owner's.
func (b *Backend) append(ns events.Namespace, sid events.SessionID, entries ...eventlog.Entry) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		return 0, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	return b.appendLocked(s, entries...)
}

// appendLocked is append for a caller that holds b.mu.
func (b *Backend) appendLocked(s *session, entries ...eventlog.Entry) (uint64, error) {
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	got, err := s.w.Append(ctx, entries...)
	if err != nil {
		return 0, err
	}
	s.meta.Info.UpdatedAt = now()
	return got[0].Seq, nil
}

func now() string { return time.Now().UTC().Format(events.TimestampFormat) }

// writerToken names the fake's writer of a session after seq, unique per
// life of the session.
func writerToken(seq uint64) string { return "gatewaytest" + strconv.FormatUint(seq, 10) }

// projectLocked writes the session's ACP_SESSIONS projection, with its
// state as the session service sets it: waiting (with the pending
// requests) or running while a turn is played, idle otherwise. The caller
// holds b.mu.
func (b *Backend) projectLocked(s *session) {
	s.meta.Info.State = s.state()
	data, err := events.Marshal(&s.meta)
	if err == nil {
		ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
		defer cancel()
		_, err = b.meta.Put(ctx, events.SessionKey(s.ns, s.sid), data)
	}
	if err != nil && b.ctx.Err() == nil {
		b.tb.Errorf("gatewaytest: project %s: %v", s.sid, err)
	}
}

func (b *Backend) openSession(ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpOpenSessionRequest](data)
	if err != nil {
		return nil, err
	}
	b.remember(events.OpOpenSession, req)
	sid, err := req.Validate()
	if err != nil {
		return nil, err
	}
	return b.open(ns, sid, req)
}

// The agents the fake knows; any other is unknown_agent.
var agents = []string{"demo", "other"}

// DefaultAgents returns what the fake runner offers until SetAgents: the
// agents the fake knows, "demo" installed and "other" not.
func DefaultAgents() []events.AcpAgentEntry {
	return []events.AcpAgentEntry{
		{ID: "demo", Installed: true, AdapterEntrypoint: "/usr/local/bin/skein-demo-agent"},
		{ID: "other", Installed: false, AdapterEntrypoint: "other-agent"},
	}
}

// SetAgents replaces what the fake runner offers in its heartbeat, which
// list_agents reads (and sorts by ID). nil or empty offers no agents.
func (b *Backend) SetAgents(agents []events.AcpAgentEntry) {
	b.tb.Helper()
	b.mu.Lock()
	b.agentList = slices.Clone(agents)
	b.mu.Unlock()
	if err := b.putHeartbeat(); err != nil {
		b.tb.Fatalf("gatewaytest: runner heartbeat: %v", err)
	}
}

func (b *Backend) open(ns events.Namespace, sid events.SessionID, req *events.AcpOpenSessionRequest) (*events.AcpOpenSessionResponse, error) {
	if !slices.Contains(agents, req.Agent) {
		return nil, events.Errorf(events.CodeUnknownAgent, "no agent %q", req.Agent)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sessions[key(ns, sid)]; ok {
		if s.meta.Info.Agent != req.Agent {
			return nil, events.Errorf(events.CodeSessionConflict, "session %s was opened with agent %s", sid, s.meta.Info.Agent)
		}
		return &events.AcpOpenSessionResponse{}, nil
	}
	// A new session, or a new life of a deleted one: its records follow
	// whatever the log holds (a tombstone), its events are numbered from 1.
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	last, err := eventlog.Last(ctx, b.js, events.StreamLog, events.LogFilter(ns, sid))
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "read the log of %s: %v", sid, err)
	}
	var pos eventlog.Position
	if last != nil {
		pos.LastSeq = last.Sequence
	}
	t := now()
	s := &session{ns: ns, sid: sid, w: eventlog.NewWriter(b.js, ns, sid, pos, writerToken(pos.LastSeq))}
	s.meta = events.SessionMeta{
		Namespace: string(ns),
		Info: events.AcpDurableSessionInfo{
			SessionID:             string(sid),
			Agent:                 req.Agent,
			Cwd:                   workspace.Roots{DefaultWorkspaceRoot}.Default(ns, sid),
			AdditionalDirectories: events.JSON(`[]`),
			CreatedAt:             t,
			UpdatedAt:             t,
		},
		PermissionPolicy:  events.PolicyAllowAll,
		AgentCapabilities: events.JSON(DefaultCapabilities),
		AgentInfo:         events.JSON(DefaultAgentInfo),
		ConfigOptions:     splitOptions(DefaultConfigOptions),
	}
	if req.Cwd != nil {
		s.meta.Info.Cwd = *req.Cwd
	}
	if len(req.AdditionalDirectories) > 0 {
		s.meta.Info.AdditionalDirectories = req.AdditionalDirectories
	}
	if req.PermissionPolicy != nil {
		s.meta.PermissionPolicy = *req.PermissionPolicy
	}
	// The first record of a session is SessionOpened, on the control
	// subject: the log's end is then not a public event.
	if _, err := b.appendLocked(s, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{
		Agent: req.Agent, Cwd: s.meta.Info.Cwd, PermissionPolicy: s.meta.PermissionPolicy,
	}}); err != nil {
		return nil, err
	}
	b.sessions[key(ns, sid)] = s
	b.projectLocked(s)
	return &events.AcpOpenSessionResponse{}, nil
}

// decodeFor decodes a request of type T, records it under op, and returns
// it with the session it names, checked by its Validate method.
func decodeFor[T any, PT interface {
	*T
	events.Variant
	Validate() (events.SessionID, error)
}](b *Backend, op events.Op, data []byte) (PT, events.SessionID, error) {
	req, err := events.Decode[T, PT](data)
	if err != nil {
		return nil, "", err
	}
	b.remember(op, req)
	sid, err := req.Validate()
	if err != nil {
		return nil, "", err
	}
	return req, sid, nil
}

func (b *Backend) remember(op events.Op, v events.Variant) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last[op] = v
}

// sessionLocked returns the session, or session_not_found. The caller
// holds b.mu.
func (b *Backend) sessionLocked(ns events.Namespace, sid events.SessionID) (*session, error) {
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		return nil, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	return s, nil
}

// errorf reports a failure of the fake itself.
func (b *Backend) errorf(format string, args ...any) {
	if b.ctx.Err() == nil {
		b.tb.Errorf("gatewaytest: "+format, args...)
	}
}
