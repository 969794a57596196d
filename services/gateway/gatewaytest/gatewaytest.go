// Package gatewaytest stands in for Skein's session and history services on
// a real NATS server, so that the gateway and its HTTP clients can be tested
// end to end without them. It is a fake service on real NATS, not a mock:
// requests travel as msgpack over nats micro endpoints, and session events
// are real records in a real ACP_LOG stream whose RePublish feeds the live
// tail.
//
// Only tests import it. It does not import nats-server: pair it with
// internal/natstest.
package gatewaytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/pkg/events"
)

// DefaultHistoryLimit is the page size of a history read without a limit.
const DefaultHistoryLimit = 100

// DefaultCwd is the cwd of a session opened without one.
const DefaultCwd = "/home/agentos"

// LogStreamConfig is the ACP_LOG configuration the backend creates: the
// parts of the real one that live viewers depend on (subjects, RePublish to
// the tail, direct gets).
func LogStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        events.StreamLog,
		Subjects:    []string{events.LogSubjectsAll},
		Storage:     jetstream.FileStorage,
		AllowDirect: true,
		RePublish: &jetstream.RePublish{
			Source:      events.LogSubjectsAll,
			Destination: events.TailSubjectsAll,
		},
	}
}

// PromptFunc plays one turn of the fake session service. It writes the
// session's log through t and returns the prompt's response or error. ctx
// ends when the test does, or when cancel_prompt cancels the turn; the
// prompt then answers stopReason "cancelled" whatever the function returns.
type PromptFunc func(ctx context.Context, t *Turn) (*events.AcpPromptResponse, error)

// Backend is the fake session and history services. Its methods are safe
// for concurrent use.
type Backend struct {
	tb  testing.TB
	nc  *nats.Conn
	js  jetstream.JetStream
	log jetstream.Stream

	ctx    context.Context
	cancel context.CancelFunc
	turns  sync.WaitGroup

	// permMu serialises every change to permission requests (asked,
	// answered, ended) with the append that records it, as the session
	// lock does in the real service: a response can never overtake the
	// request it answers, and the first resolution wins. Take it before mu.
	permMu sync.Mutex

	mu          sync.Mutex
	sessions    map[string]*session
	hideAfter   uint64
	failures    map[events.Op]error
	calls       map[events.Op]int
	last        map[events.Op]events.Variant
	prompt      PromptFunc
	onCancel    CancelFunc
	onUnload    UnloadFunc
	onRespond   RespondFunc
	onSetConfig SetConfigFunc
	onHistory   func()
	agentList   []events.AcpAgentEntry // what list_agents answers
	nextID      uint64                 // of turns and permission requests
}

type session struct {
	info     events.AcpDurableSessionInfo
	eventNo  uint64
	turn     *Turn             // the turn being played, or nil
	resolved map[string]string // permission request ID → why it is no longer pending
	unloaded bool              // by unload_session, until the next prompt
	config   sessionConfig     // options, capabilities and agent info
}

// Start creates the ACP_LOG stream and serves open_session, get_session,
// prompt, cancel_prompt, unload_session, delete_session,
// respond_permission, read_history, list_agents, get_session_config,
// set_session_config_option, get_session_capabilities and
// get_session_agent_info for every namespace on nc until the test ends.
// Prompts play Echo unless OnPrompt says otherwise; cancels, unloads and
// permission answers act on the turn being played (see Turn) unless
// OnCancel, OnUnload or OnRespond say otherwise, and deletes always do;
// list_agents answers DefaultAgents unless SetAgents says otherwise; the
// config ops play the agent (see SetConfigFunc) unless OnSetConfig,
// SetConfigOptions, SetCapabilities or SetAgentInfo say otherwise.
func Start(tb testing.TB, nc *nats.Conn) *Backend {
	tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("gatewaytest: jetstream: %v", err)
	}
	ctx, cancel := context.WithCancel(tb.Context())
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
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if b.log, err = js.CreateOrUpdateStream(sctx, LogStreamConfig()); err != nil {
		tb.Fatalf("gatewaytest: create %s: %v", events.StreamLog, err)
	}
	svc, err := micro.AddService(nc, micro.Config{Name: "gatewaytest", Version: "0.0.1"})
	if err != nil {
		tb.Fatalf("gatewaytest: add service: %v", err)
	}
	endpoints := map[events.Op]func(events.Namespace, []byte) (events.Variant, error){
		events.OpOpenSession:            b.openSession,
		events.OpGetSession:             b.getSession,
		events.OpReadHistory:            b.readHistory,
		events.OpCancelPrompt:           b.cancelPrompt,
		events.OpUnloadSession:          b.unloadSession,
		events.OpDeleteSession:          b.deleteSession,
		events.OpRespondPermission:      b.respondPermission,
		events.OpListAgents:             b.listAgents,
		events.OpGetSessionConfig:       b.getSessionConfig,
		events.OpSetSessionConfigOption: b.setSessionConfigOption,
		events.OpGetSessionCapabilities: b.getSessionCapabilities,
		events.OpGetSessionAgentInfo:    b.getSessionAgentInfo,
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
			b.reply(req, resp, err)
		}
		if err := svc.AddEndpoint(string(op), micro.HandlerFunc(handler), micro.WithEndpointSubject(events.APIWildcard(op))); err != nil {
			tb.Fatalf("gatewaytest: add endpoint %s: %v", op, err)
		}
	}
	// A turn blocks for as long as it plays, so each one runs in its own
	// goroutine; the endpoint's own goroutine takes the next request.
	if err := svc.AddEndpoint(string(events.OpPrompt), micro.HandlerFunc(b.handlePrompt), micro.WithEndpointSubject(events.APIWildcard(events.OpPrompt))); err != nil {
		tb.Fatalf("gatewaytest: add endpoint %s: %v", events.OpPrompt, err)
	}
	tb.Cleanup(func() {
		cancel()
		b.turns.Wait()
		if err := svc.Stop(); err != nil {
			tb.Errorf("gatewaytest: stop service: %v", err)
		}
	})
	return b
}

func (b *Backend) reply(req micro.Request, resp events.Variant, err error) {
	if err != nil {
		_ = events.RespondError(req, err) // the requester may be gone; nothing to do
		return
	}
	_ = events.Respond(req, resp)
}

// replyLater answers req from a goroutine other than its handler's.
// micro's request loop reads the error a request was answered with once
// the handler returns, for its stats, so req.Error (events.RespondError)
// from here would race with it. An error goes out through Respond instead,
// with the same headers and body, which micro does not remember.
func (b *Backend) replyLater(req micro.Request, resp events.Variant, err error) {
	if err == nil {
		var data []byte
		if data, err = events.Marshal(resp); err == nil {
			_ = req.Respond(data) // the requester may be gone; nothing to do
			return
		}
	}
	e := events.AsError(err)
	if e.Code == events.CodeInternal {
		e = events.ErrInternal // as events.RespondError masks it
	}
	body, _ := events.Marshal(e.Response()) // an AcpErrorResponse always encodes
	_ = req.Respond(body, micro.WithHeaders(micro.Headers{
		micro.ErrorCodeHeader: {string(e.Code)},
		micro.ErrorHeader:     {e.Message},
	}))
}

// failure records a call of op and returns the error Fail set for it.
func (b *Backend) failure(op events.Op) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls[op]++
	return b.failures[op]
}

// Fail makes every later call of op fail with err, until Fail(op, nil).
func (b *Backend) Fail(op events.Op, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures[op] = err
}

// Calls returns how many requests for op arrived so far.
func (b *Backend) Calls(op events.Op) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[op]
}

// LastRequest returns the last request for op that decoded, or nil.
func (b *Backend) LastRequest(op events.Op) events.Variant {
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

// OnHistory sets a function that every history read calls first, in the
// endpoint's goroutine, before it reads the log: a test can block it to
// hold a reader at a known point. nil removes it.
func (b *Backend) OnHistory(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onHistory = fn
}

// HideHistoryAfter makes history reads ignore every record after seq, as a
// lagging reader would; 0 shows everything again. A live viewer that reads
// history meanwhile misses those records, which is how tests make gaps.
func (b *Backend) HideHistoryAfter(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hideAfter = seq
}

func key(ns events.Namespace, sid events.SessionID) string { return events.SessionKey(ns, sid) }

// CreateSession opens sid in ns directly, as open_session would.
func (b *Backend) CreateSession(ns events.Namespace, sid events.SessionID, agent string) {
	b.tb.Helper()
	if _, err := b.open(ns, sid, &events.AcpOpenSessionRequest{Agent: agent}); err != nil {
		b.tb.Fatalf("gatewaytest: create session %s: %v", sid, err)
	}
}

// Session returns a copy of the session's metadata, or false.
func (b *Backend) Session(ns events.Namespace, sid events.SessionID) (events.AcpDurableSessionInfo, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		return events.AcpDurableSessionInfo{}, false
	}
	return s.info, true
}

// Append stores one session update (raw ACP JSON) as a durable event of
// the session and returns its sequence.
func (b *Backend) Append(ns events.Namespace, sid events.SessionID, update string) uint64 {
	b.tb.Helper()
	seq, err := b.append(ns, sid, events.LogEvents, &events.AcpDurableSessionUpdate{Update: events.JSON(update)})
	if err != nil {
		b.tb.Fatalf("gatewaytest: append to %s: %v", sid, err)
	}
	return seq
}

// AppendControl stores a lifecycle record (not a public event) in the
// session's log and returns its sequence: it moves latestSequence without
// anything a viewer could see.
func (b *Backend) AppendControl(ns events.Namespace, sid events.SessionID) uint64 {
	b.tb.Helper()
	rec := &events.TurnFinished{TurnID: "t" + strconv.FormatInt(time.Now().UnixNano(), 36), Outcome: events.OutcomeCompleted, StopReason: "end_turn"}
	seq, err := b.append(ns, sid, events.LogControl, rec)
	if err != nil {
		b.tb.Fatalf("gatewaytest: append control record to %s: %v", sid, err)
	}
	return seq
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

func (b *Backend) append(ns events.Namespace, sid events.SessionID, kind events.LogKind, v events.Variant) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock() // appends of one backend are serial, like one owner's
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		return 0, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	data, err := events.Marshal(v)
	if err != nil {
		return 0, err
	}
	msg := nats.NewMsg(events.LogSubject(ns, sid, kind))
	msg.Data = data
	msg.Header.Set(events.HeaderRecord, v.VariantName())
	if kind == events.LogEvents {
		msg.Header.Set(events.HeaderEventNo, strconv.FormatUint(s.eventNo+1, 10))
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	if kind == events.LogEvents {
		s.eventNo++
	}
	s.info.LatestSequence = ack.Sequence
	s.info.UpdatedAt = time.Now().UTC().Format(time.RFC3339Nano)
	return ack.Sequence, nil
}

func (b *Backend) openSession(ns events.Namespace, data []byte) (events.Variant, error) {
	req, sid, err := decodeFor(b, events.OpOpenSession, data, func(r *events.AcpOpenSessionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	return b.open(ns, sid, req)
}

// The agents the fake knows; any other is unknown_agent.
var agents = []string{"demo", "other"}

// DefaultAgents returns what list_agents answers until SetAgents: the
// agents the fake knows, sorted by ID, "demo" installed and "other" not.
func DefaultAgents() []events.AcpAgentEntry {
	return []events.AcpAgentEntry{
		{ID: "demo", Installed: true, AdapterEntrypoint: "/usr/local/bin/skein-demo-agent"},
		{ID: "other", Installed: false, AdapterEntrypoint: "other-agent"},
	}
}

// SetAgents replaces what list_agents answers, in the order given (the
// history service sorts by ID). nil or empty answers no agents.
func (b *Backend) SetAgents(agents []events.AcpAgentEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.agentList = slices.Clone(agents)
}

func (b *Backend) listAgents(_ events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpListAgentsRequest](data)
	if err != nil {
		return nil, err
	}
	b.remember(events.OpListAgents, req)
	b.mu.Lock()
	defer b.mu.Unlock()
	return &events.AcpListAgentsResponse{Agents: slices.Clone(b.agentList)}, nil
}

func (b *Backend) open(ns events.Namespace, sid events.SessionID, req *events.AcpOpenSessionRequest) (*events.AcpOpenSessionResponse, error) {
	if !slices.Contains(agents, req.Agent) {
		return nil, events.Errorf(events.CodeUnknownAgent, "no agent %q", req.Agent)
	}
	b.mu.Lock()
	if s, ok := b.sessions[key(ns, sid)]; ok {
		b.mu.Unlock()
		if s.info.Agent != req.Agent {
			return nil, events.Errorf(events.CodeSessionConflict, "session %s was opened with agent %s", sid, s.info.Agent)
		}
		return &events.AcpOpenSessionResponse{}, nil
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	info := events.AcpDurableSessionInfo{
		SessionID:             string(sid),
		Agent:                 req.Agent,
		Cwd:                   DefaultCwd,
		AdditionalDirectories: events.JSON(`[]`),
		State:                 events.JSON(`{"status":"idle"}`),
		CreatedAt:             now,
		UpdatedAt:             now,
	}
	if req.Cwd != nil {
		info.Cwd = *req.Cwd
	}
	if len(req.AdditionalDirectories) > 0 {
		info.AdditionalDirectories = req.AdditionalDirectories
	}
	b.sessions[key(ns, sid)] = &session{info: info, config: newSessionConfig()}
	b.mu.Unlock()
	// The first record of a real session is SessionOpened, on the control
	// subject: latestSequence is then not a public event.
	if _, err := b.append(ns, sid, events.LogControl, &events.SessionOpened{Agent: req.Agent, Cwd: info.Cwd, PermissionPolicy: events.PolicyAllowAll}); err != nil {
		return nil, err
	}
	return &events.AcpOpenSessionResponse{}, nil
}

func (b *Backend) getSession(ns events.Namespace, data []byte) (events.Variant, error) {
	_, sid, err := decodeFor(b, events.OpGetSession, data, func(r *events.AcpGetDurableSessionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	info, ok := b.Session(ns, sid)
	if !ok {
		return nil, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	return &events.AcpGetDurableSessionResponse{Session: info}, nil
}

// decodeFor decodes a request of type T, records it under op, and returns
// it with the session id names (omitted: main).
func decodeFor[T any, PT interface {
	*T
	events.Variant
}](b *Backend, op events.Op, data []byte, id func(PT) *string) (PT, events.SessionID, error) {
	req, err := events.Decode[T, PT](data)
	if err != nil {
		return nil, "", err
	}
	b.remember(op, req)
	sid, err := events.OptionalSessionID(id(req))
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

// readHistory serves a page from the stream itself, reading every record
// of the session: fine for a fake.
func (b *Backend) readHistory(ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpReadHistoryRequest](data)
	if err != nil {
		return nil, err
	}
	b.remember(events.OpReadHistory, req)
	b.mu.Lock()
	hook := b.onHistory
	b.mu.Unlock()
	if hook != nil {
		hook()
	}
	sid, err := events.OptionalSessionID(req.SessionID)
	if err != nil {
		return nil, err
	}
	if _, ok := b.Session(ns, sid); !ok {
		return nil, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	if req.After != nil && req.Before != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "after and before are mutually exclusive")
	}
	b.mu.Lock()
	hide := b.hideAfter
	b.mu.Unlock()
	all, err := b.entries(ns, sid, hide)
	if err != nil {
		return nil, err
	}
	limit := DefaultHistoryLimit
	if req.Limit != nil {
		limit = int(*req.Limit)
	}
	page := &events.AcpHistoryPageResponse{Events: []events.AcpDurableHistoryEntry{}}
	if req.Before != nil {
		end := 0
		for end < len(all) && all[end].Sequence < *req.Before {
			end++
		}
		start := max(0, end-limit)
		page.Events = all[start:end]
		page.HasMoreBefore = start > 0
		page.HasMoreAfter = end < len(all)
		return page, nil
	}
	var after uint64
	if req.After != nil {
		after = *req.After
	}
	start := 0
	for start < len(all) && all[start].Sequence <= after {
		start++
	}
	end := min(len(all), start+limit)
	page.Events = all[start:end]
	page.HasMoreBefore = start > 0
	page.HasMoreAfter = end < len(all)
	return page, nil
}

// entries returns every public event of the session up to hide (0: all).
func (b *Backend) entries(ns events.Namespace, sid events.SessionID, hide uint64) ([]events.AcpDurableHistoryEntry, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	subject := events.LogSubject(ns, sid, events.LogEvents)
	var out []events.AcpDurableHistoryEntry
	for seq := uint64(1); ; seq++ {
		m, err := b.log.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, events.Errorf(events.CodeUnavailable, "read %s: %v", subject, err)
		}
		if hide > 0 && m.Sequence > hide {
			return out, nil
		}
		e, err := events.Entry(sid, m.Sequence, m.Time, m.Header, m.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
		seq = m.Sequence
	}
}

func (b *Backend) handlePrompt(req micro.Request) {
	ns, err := events.NamespaceFromAPISubject(req.Subject())
	if err == nil {
		err = b.failure(events.OpPrompt)
	}
	var p *events.AcpPromptRequest
	if err == nil {
		p, err = events.Decode[events.AcpPromptRequest](req.Data())
	}
	var sid events.SessionID
	if err == nil {
		b.remember(events.OpPrompt, p)
		sid, err = events.OptionalSessionID(p.SessionID)
	}
	var (
		t    *Turn
		play PromptFunc
	)
	if err == nil {
		t, play, err = b.claim(ns, sid, p)
	}
	if err != nil {
		b.reply(req, nil, err)
		return
	}
	b.turns.Go(func() {
		defer t.stop()
		resp, err := play(t.ctx, t)
		resp, err = b.finish(t, resp, err)
		b.replyLater(req, resp, err)
	})
}

// claim makes a new turn the session's running one and returns it with the
// function that plays it.
func (b *Backend) claim(ns events.Namespace, sid events.SessionID, req *events.AcpPromptRequest) (*Turn, PromptFunc, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	switch {
	case !ok:
		return nil, nil, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	case s.turn != nil:
		return nil, nil, events.ErrSessionBusy
	}
	b.nextID++
	t := &Turn{b: b, NS: ns, SID: sid, Request: req, ID: "turn_" + strconv.FormatUint(b.nextID, 10)}
	t.ctx, t.stop = context.WithCancel(b.ctx)
	s.turn = t
	s.unloaded = false // the prompt restores an unloaded session
	s.project()
	return t, b.prompt, nil
}

// finish ends t once its function returned resp and err: a cancel that
// came first wins (the prompt answers stopReason cancelled), requests
// still pending end as terminal, and the session is released before the
// prompt is answered, so the caller may prompt again at once.
func (b *Backend) finish(t *Turn, resp *events.AcpPromptResponse, err error) (*events.AcpPromptResponse, error) {
	b.permMu.Lock()
	defer b.permMu.Unlock()
	b.mu.Lock()
	cancelled := t.state == turnCancelled
	t.state = turnFinished
	b.mu.Unlock()
	reason := events.ReasonTurnFailed
	if errors.Is(err, events.ErrAdapterExited) {
		reason = events.ReasonAdapterExited
	}
	b.terminate(t, reason)
	if cancelled {
		resp, err = &events.AcpPromptResponse{SessionID: string(t.SID), StopReason: events.OutcomeCancelled}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sessions[key(t.NS, t.SID)]; ok && s.turn == t {
		s.turn = nil
		s.project()
	}
	return resp, err
}

// Turn is one prompt being played: the request and the means to write the
// session's log.
type Turn struct {
	b       *Backend
	NS      events.Namespace
	SID     events.SessionID
	Request *events.AcpPromptRequest
	// ID is the turn's ID, as getSession's state shows it.
	ID string

	// ctx is the PromptFunc's, scoped to this turn (the per-message
	// exception of STYLE R12); stop ends it, on cancel_prompt or when the
	// turn is over.
	ctx  context.Context
	stop context.CancelFunc

	// Guarded by b.mu.
	state   turnState
	pending []*Permission // permission requests waiting for an answer, oldest first
}

type turnState int

const (
	turnRunning turnState = iota
	turnCancelled
	turnFinished
)

// Append stores a durable session update and returns its sequence.
func (t *Turn) Append(update string) (uint64, error) {
	return t.b.append(t.NS, t.SID, events.LogEvents, &events.AcpDurableSessionUpdate{Update: events.JSON(update)})
}

// Delta publishes a live delta following the durable sequence after.
func (t *Turn) Delta(after uint64, update string) error {
	return t.b.delta(t.NS, t.SID, after, update)
}

// Echo is the default turn. It stores the prompt's blocks as
// user_message_chunk events, a tool call (pending, then completed) and a
// plan, streams the reply "Hello, world" as three agent_message_chunk
// deltas, stores the completed message, and ends the turn with end_turn.
// A prompt whose first text block is "fail" fails with adapter_exited
// after storing the user message.
func Echo(_ context.Context, t *Turn) (*events.AcpPromptResponse, error) {
	text, err := userMessages(t)
	if err != nil {
		return nil, err
	}
	if text == "fail" {
		return nil, events.Errorf(events.CodeAdapterExited, "the demo agent exited")
	}
	steps := []string{
		`{"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Read README.md","kind":"read","status":"pending"}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed"}`,
		`{"sessionUpdate":"plan","entries":[{"content":"Say hello","priority":"high","status":"completed"}]}`,
	}
	var last uint64
	for _, u := range steps {
		if last, err = t.Append(u); err != nil {
			return nil, err
		}
	}
	for _, chunk := range []string{"Hel", "lo, ", "world"} {
		if err := t.Delta(last, TextChunk("agent_message_chunk", chunk)); err != nil {
			return nil, err
		}
	}
	message := TextChunk("agent_message_chunk", "Hello, world")
	if _, err := t.Append(message); err != nil {
		return nil, err
	}
	return &events.AcpPromptResponse{SessionID: string(t.SID), Message: events.JSON(message), StopReason: "end_turn"}, nil
}

// userMessages stores each block of the prompt as a user_message_chunk and
// returns the text of the first text block.
func userMessages(t *Turn) (string, error) {
	var blocks []json.RawMessage
	if err := json.Unmarshal(t.Request.Content, &blocks); err != nil {
		return "", events.Errorf(events.CodeInvalidRequest, "content: %v", err)
	}
	first := ""
	for _, block := range blocks {
		if _, err := t.Append(`{"sessionUpdate":"user_message_chunk","content":` + string(block) + `}`); err != nil {
			return "", err
		}
		if first == "" {
			first = textOf(block)
		}
	}
	return first, nil
}

// TextChunk returns a session update of kind (agent_message_chunk, ...)
// carrying one text content block.
func TextChunk(kind, text string) string {
	quoted, _ := json.Marshal(text) // a string always marshals
	return `{"sessionUpdate":"` + kind + `","content":{"type":"text","text":` + string(quoted) + `}}`
}

// textOf returns the text of a text content block, or "".
func textOf(block []byte) string {
	var b struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(block, &b) != nil || b.Type != "text" {
		return ""
	}
	return strings.TrimSpace(b.Text)
}
