package session

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// session is one session's state, derived from its log. Every field is
// guarded by mu; the IO consumer and the API handlers take it in turn.
type session struct {
	svc *Service
	ns  events.Namespace
	sid events.SessionID
	lg  *slog.Logger

	// lease is the revision of this replica's owner lease on the session
	// in ACP_OWNERS, 0 when it holds none. It is set under mu and renewed
	// without it (atomically).
	lease atomic.Uint64

	mu        sync.Mutex
	loaded    bool
	w         *eventlog.Writer
	opened    *events.SessionOpened // nil: no such session
	createdAt time.Time
	updatedAt time.Time
	adapter   *route // nil: no adapter attached
	turn      *turn  // nil: idle
	buf       coalescer
	pending   []eventlog.Entry            // queued adapter output, see queue
	failure   *events.AcpErrorResponse    // the last turn's error, while the session is failed
	preamble  string                      // armed by a fallback restore for the next prompt only
	calls     map[string]chan events.JSON // requests to the adapter awaiting their answer, by call ID
	last      *finishedTurn               // the last turn that ended here
	meta      events.SessionMeta

	// resolved remembers, for recently resolved permission requests, what
	// resolved them (bounded by maxResolved, oldest first out).
	resolved      map[string]string
	resolvedOrder []string
}

// route is the attached adapter.
type route struct {
	runner       events.RunnerID
	processID    string
	acpSessionID string
	sub          *nats.Subscription // the session's IOTailSubject
	applied      uint64             // ACP_IO sequence of the last record applied
	drain        *drain             // a turn that ended before the adapter answered it
	attachedAt   time.Time
}

func newSession(svc *Service, ns events.Namespace, sid events.SessionID) *session {
	return &session{
		svc: svc, ns: ns, sid: sid,
		lg: svc.lg.With(events.LogKeyNamespace, string(ns), events.LogKeySession, string(sid)),
	}
}

// key is the session's key in ACP_SESSIONS and ACP_OWNERS.
func (sess *session) key() string { return events.SessionKey(sess.ns, sess.sid) }

// load takes the session's owner lease and rebuilds the session from its
// log, once. When another replica holds the lease the error is
// *ownedElsewhere, and this replica forgets the session.
func (sess *session) load(ctx context.Context) error {
	if sess.loaded {
		return nil
	}
	if err := sess.svc.hold(sess); err != nil {
		return err
	}
	if sess.lease.Load() == 0 {
		rev, err := sess.svc.acquireLease(ctx, sess.key())
		if err != nil {
			sess.svc.forget(sess)
			return err
		}
		sess.lease.Store(rev)
	}
	if err := sess.rebuild(ctx); err != nil {
		sess.releaseLease()
		sess.svc.forget(sess)
		return err
	}
	sess.loaded = true
	return nil
}

// loadExisting is load for an operation on an existing session: one that
// was never opened, or was deleted, is session_not_found.
func (sess *session) loadExisting(ctx context.Context) error {
	if err := sess.load(ctx); err != nil {
		return err
	}
	if sess.opened == nil {
		return events.Errorf(events.CodeSessionNotFound, "session %s does not exist", sess.sid)
	}
	return nil
}

// rebuild reads the session's state from its log, fencing earlier owners
// off first.
func (sess *session) rebuild(ctx context.Context) error {
	js := sess.svc.js
	pos, last, err := eventlog.LoadPosition(ctx, js, sess.ns, sess.sid)
	if err != nil {
		return events.Errorf(events.CodeUnavailable, "read log of %s: %v", sess.sid, err)
	}
	sess.w = eventlog.NewWriter(js, sess.ns, sess.sid, pos, sess.svc.token)
	if last != nil {
		// The first control record opens the session, unless the session
		// was deleted: then a tombstone comes first, and a reopening after it.
		first, err := eventlog.Forward(ctx, js, events.StreamLog, events.LogSubject(sess.ns, sess.sid, events.LogControl), 0, 2)
		if err != nil {
			return events.Errorf(events.CodeUnavailable, "read log of %s: %v", sess.sid, err)
		}
		if len(first) > 0 && first[0].Header.Get(events.HeaderRecord) == "SessionDeleted" {
			first = first[1:]
		}
		if len(first) > 0 && last.Header.Get(events.HeaderRecord) != "SessionDeleted" {
			if opened, err := events.Decode[events.SessionOpened](first[0].Data); err == nil {
				sess.opened = opened
				sess.createdAt = first[0].Time
			}
		}

		sess.updatedAt = last.Time
		if sess.opened != nil {
			if err := sess.loadMeta(ctx); err != nil {
				return err
			}
			if err := sess.fence(ctx, last); err != nil {
				return err
			}
		}
		if err := sess.reconcile(ctx, last); err != nil {
			return err
		}
	}
	return nil
}

// fence appends OwnerChanged after last, the newest record this replica
// read: any earlier owner's next append then fails (the compare-and-set
// every append carries), so it cannot write past this replica. The record
// carries the open turn's headers, if last belongs to one, so that the turn
// stays open to whoever reads the log next.
func (sess *session) fence(ctx context.Context, last *eventlog.Record) error {
	hdr := nats.Header{}
	if id, start, ok, err := openTurn(last); err != nil {
		return err
	} else if ok {
		hdr.Set(events.HeaderTurnID, id)
		hdr.Set(events.HeaderTurnStart, strconv.FormatUint(start, 10))
	}
	changed := &events.OwnerChanged{Owner: sess.svc.token, LeaseRevision: sess.lease.Load()}
	if _, err := sess.write(ctx, []eventlog.Entry{{Kind: events.LogControl, Value: changed, Header: hdr}}); err != nil {
		return err
	}
	sess.svc.m.fences.Inc()
	return nil
}

// openTurn reports the turn last belongs to, if that turn is open: last is
// a turn's record and not the one that finished it. start is the sequence
// of the turn's accepting record.
func openTurn(last *eventlog.Record) (id string, start uint64, ok bool, err error) {
	id = last.Header.Get(events.HeaderTurnID)
	if id == "" || last.Header.Get(events.HeaderRecord) == "TurnFinished" {
		return "", 0, false, nil
	}
	if last.Header.Get(events.HeaderTurnAccepted) != "" {
		return id, last.Sequence, true, nil
	}
	start, err = strconv.ParseUint(last.Header.Get(events.HeaderTurnStart), 10, 64)
	if err != nil {
		return "", 0, false, events.Errorf(events.CodeInternal, "record %d of open turn %s has no %s", last.Sequence, id, events.HeaderTurnStart)
	}
	return id, start, true, nil
}

// reconcile closes a turn that an earlier owner accepted and never finished:
// nothing proves the adapter received it, and Skein never replays a prompt.
// The turn is open when the newest record belongs to a turn and is not the
// record that finished it. Its finish carries the acceptance's idempotency
// key and content hash (so a keyed retry gets this outcome, not a new
// turn), and its pending permission requests become terminal.
func (sess *session) reconcile(ctx context.Context, last *eventlog.Record) error {
	turnID, start, open, err := openTurn(last)
	if !open {
		return err
	}
	recs, err := sess.turnRecords(ctx, start, last.Sequence)
	if err != nil {
		return events.Errorf(events.CodeUnavailable, "read open turn %s: %v", turnID, err)
	}
	if sess.takeover(ctx, turnID, start, recs) {
		return nil
	}
	finish := &events.TurnFinished{TurnID: turnID, Outcome: events.OutcomeFailed, Error: events.ErrDeliveryUncertain.Response()}
	accept := recs[0]
	finish.ContentHash = accept.Header.Get(events.HeaderContentHash)
	if key := accept.Header.Get(events.HeaderIdempotencyKey); key != "" {
		finish.IdempotencyKey = &key
	}
	// Requests the turn asked and nobody answered end with it.
	var entries []eventlog.Entry
	pending := map[string]bool{}
	var order []string
	for _, r := range recs {
		switch v, _ := events.Unmarshal(r.Data); v := v.(type) {
		case *events.AcpDurablePermissionRequest:
			pending[v.RequestID] = true
			order = append(order, v.RequestID)
		case *events.AcpDurablePermissionResponse:
			delete(pending, v.RequestID)
		}
	}
	reason := events.ReasonTurnFailed
	for _, id := range order {
		if pending[id] {
			entries = append(entries, eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurablePermissionResponse{
				RequestID: id, Response: events.JSON(`{"outcome":{"outcome":"cancelled"}}`), Status: events.PermissionTerminal, Reason: &reason,
			}})
		}
	}
	entry := eventlog.Entry{Kind: events.LogControl, Value: finish}
	if finish.IdempotencyKey != nil {
		entry.Subject = events.KeySubject(sess.ns, sess.sid, *finish.IdempotencyKey)
	}
	entries = append(entries, entry)
	for i := range entries {
		entries[i].Header = nats.Header{
			events.HeaderTurnID:    []string{turnID},
			events.HeaderTurnStart: []string{strconv.FormatUint(start, 10)},
		}
	}
	if _, err := sess.append(ctx, 0, entries...); err != nil {
		return err
	}
	for _, id := range order {
		if pending[id] {
			sess.resolve(id, reason)
		}
	}
	sess.failure = events.ErrDeliveryUncertain.Response()
	return nil
}

// turnRecords reads the session's records from start to end, inclusive.
func (sess *session) turnRecords(ctx context.Context, start, end uint64) ([]*eventlog.Record, error) {
	var out []*eventlog.Record
	after := start - 1
	for after < end {
		recs, err := eventlog.Forward(ctx, sess.svc.js, events.StreamLog, events.LogFilter(sess.ns, sess.sid), after, 1000)
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if r.Sequence <= end {
				out = append(out, r)
			}
		}
		after = recs[len(recs)-1].Sequence
	}
	if len(out) == 0 || out[0].Sequence != start {
		return nil, fmt.Errorf("the turn's accepting record %d is gone", start)
	}
	return out, nil
}

// stamp sets the headers every record carries: the ACP_IO record it came
// from (ioSeq, when not zero) and the turn running when it was made.
func (sess *session) stamp(ioSeq uint64, entries []eventlog.Entry) {
	if ioSeq == 0 && sess.turn == nil {
		return
	}
	for i := range entries {
		if entries[i].Header == nil {
			entries[i].Header = nats.Header{}
		}
		if ioSeq != 0 {
			entries[i].Header.Set(events.HeaderIOSeq, strconv.FormatUint(ioSeq, 10))
		}
		if sess.turn != nil {
			entries[i].Header.Set(events.HeaderTurnID, sess.turn.id)
			entries[i].Header.Set(events.HeaderTurnStart, strconv.FormatUint(sess.turn.start, 10))
		}
	}
}

// append writes entries to the log, as one atomic append, after whatever
// is queued. ioSeq, when not zero, is the ACP_IO record they came from.
func (sess *session) append(ctx context.Context, ioSeq uint64, entries ...eventlog.Entry) ([]eventlog.Appended, error) {
	sess.stamp(ioSeq, entries)
	if err := sess.commit(ctx); err != nil {
		return nil, err
	}
	return sess.write(ctx, entries)
}

// queue holds entries for the next commit. Adapter output is queued while
// more of it is waiting to be applied, so that a burst is written in few
// appends (group commit); commit happens before anything that must observe
// the log's end (a live delta's afterSequence, a turn's end, a request's
// answer) and whenever nothing more is waiting.
func (sess *session) queue(ioSeq uint64, entries ...eventlog.Entry) {
	sess.stamp(ioSeq, entries)
	sess.pending = append(sess.pending, entries...)
}

// commit writes the queued entries, in order. On one replica they are
// pipelined (eventlog.Writer.AppendEach: a burst costs about one round trip,
// while an atomic batch there is staged on disk); on more, a group of at
// least GroupCommitMin goes as atomic batches and a smaller one record by
// record.
func (sess *session) commit(ctx context.Context) error {
	if len(sess.pending) == 0 {
		return nil
	}
	group := sess.pending
	sess.pending = nil
	if sess.svc.cfg.Replicas <= 1 {
		return sess.writeEach(ctx, group)
	}
	for len(group) > 0 {
		n := 1
		if len(group) >= sess.svc.cfg.GroupCommitMin {
			n = min(len(group), eventlog.MaxBatch)
		}
		if _, err := sess.write(ctx, group[:n]); err != nil {
			return err
		}
		group = group[n:]
	}
	return nil
}

// writeEach appends entries in order, pipelined, with write's handling of
// the outcome.
func (sess *session) writeEach(ctx context.Context, entries []eventlog.Entry) error {
	start := time.Now()
	out, err := sess.w.AppendEach(ctx, entries)
	sess.svc.m.appendSeconds.Observe(time.Since(start).Seconds())
	sess.svc.m.appendRecords.Add(float64(len(out)))
	return sess.wrote(err)
}

// write appends entries now, as one atomic append.
func (sess *session) write(ctx context.Context, entries []eventlog.Entry) ([]eventlog.Appended, error) {
	start := time.Now()
	out, err := sess.w.Append(ctx, entries...)
	sess.svc.m.appendSeconds.Observe(time.Since(start).Seconds())
	if err == nil {
		sess.svc.m.appendRecords.Add(float64(len(entries)))
	}
	return out, sess.wrote(err)
}

// wrote accounts for an append's outcome. A write conflict means another
// replica owns the session now: this one forgets it.
func (sess *session) wrote(err error) error {
	if err != nil {
		code := events.AsError(err).Code
		sess.svc.m.appends.WithLabelValues(string(code)).Inc()
		if code == events.CodeWriteConflict {
			sess.lg.Warn("log moved under this replica; forgetting the session", events.LogKeyErr, err)
			sess.release(err)
		}
		return err
	}
	sess.svc.m.appends.WithLabelValues("ok").Inc()
	sess.updatedAt = time.Now()
	return nil
}

// open records a new session, or checks that an existing one was opened with
// the same options, and attaches an adapter when none is.
func (sess *session) open(ctx context.Context, o *events.SessionOpened) error {
	if err := sess.load(ctx); err != nil {
		return err
	}
	if sess.opened == nil {
		if _, err := sess.append(ctx, 0, eventlog.Entry{Kind: events.LogControl, Value: o}); err != nil {
			return err
		}
		sess.opened = o
		sess.createdAt = time.Now()
		sess.lg.Info("session opened", events.LogKeyAgent, o.Agent)
	} else if !sameOptions(sess.opened, o) {
		return events.Errorf(events.CodeSessionConflict, "session %s exists with other options; delete it or open it with the same ones", sess.sid)
	}
	if sess.adapter == nil {
		if err := sess.attach(ctx); err != nil {
			sess.project(ctx)
			return err
		}
	}
	sess.project(ctx)
	return nil
}

func sameOptions(a, b *events.SessionOpened) bool {
	return a.Agent == b.Agent && a.Cwd == b.Cwd && a.PermissionPolicy == b.PermissionPolicy &&
		a.SkipOsInstructions == b.SkipOsInstructions &&
		string(a.AdditionalDirectories) == string(b.AdditionalDirectories) &&
		string(a.Env) == string(b.Env) && string(a.McpServers) == string(b.McpServers) &&
		((a.AdditionalInstructions == nil) == (b.AdditionalInstructions == nil)) &&
		(a.AdditionalInstructions == nil || *a.AdditionalInstructions == *b.AdditionalInstructions)
}

// attach starts an adapter for the session on a runner and records it. Until
// the restore ladder is built, every attach negotiates a new ACP session.
func (sess *session) attach(ctx context.Context) error {
	// A runner that does not answer (its heartbeat outlived it) is left out
	// and the next one tried.
	var err error
	for range 3 {
		var runner events.RunnerID
		if runner, err = sess.attachOnce(ctx); err == nil || runner == "" || events.AsError(err).Code != events.CodeUnavailable {
			return err
		}
		sess.svc.runners.forget(runner)
	}
	return err
}

// attachOnce attaches an adapter on the runner placement picks, which it
// returns with any error.
func (sess *session) attachOnce(ctx context.Context) (events.RunnerID, error) {
	svc := sess.svc
	start := time.Now()
	runner, err := svc.runners.place(ctx, sess.opened.Agent)
	if err != nil {
		return "", err
	}
	r := &route{runner: runner, processID: nuid.Next(), attachedAt: time.Now()}
	// Follow the session's ACP_IO before the adapter exists, so nothing it
	// says is missed: from the newest record there now.
	last, err := eventlog.Last(ctx, svc.js, events.StreamIO, events.IOSubject(sess.ns, sess.sid))
	if err != nil {
		return runner, events.Errorf(events.CodeUnavailable, "io stream: %v", err)
	}
	if last != nil {
		r.applied = last.Sequence
	}
	ioStart := r.applied + 1
	if r.sub, err = svc.nc.Subscribe(events.IOTailSubject(sess.ns, sess.sid), func(m *nats.Msg) { sess.onTail(r, m) }); err != nil {
		return runner, events.Errorf(events.CodeUnavailable, "follow io: %v", err)
	}
	// A slow owner must not lose records on the core subscription; a gap
	// would be filled from the stream anyway.
	_ = r.sub.SetPendingLimits(-1, -1)
	sess.adapter = r

	cctx, cancel := context.WithTimeout(ctx, svc.cfg.AttachTimeout)
	defer cancel()
	tier, created, err := sess.startAdapter(cctx, runner, r)
	if err != nil {
		sess.detach()
		return runner, err
	}
	r.acpSessionID = created.SessionID
	attached := &events.AdapterAttached{
		RunnerID:          string(runner),
		ProcessID:         r.processID,
		Pid:               created.Pid,
		AcpSessionID:      created.SessionID,
		Tier:              tier,
		AgentCapabilities: created.AgentCapabilities,
		AgentInfo:         created.AgentInfo,
		Modes:             created.Modes,
		ConfigOptions:     created.ConfigOptions,
		IOStartSeq:        ioStart,
	}
	if _, err := sess.append(ctx, 0, eventlog.Entry{Kind: events.LogControl, Value: attached}); err != nil {
		sess.stopAdapter(r)
		return runner, err
	}
	sess.meta.AcpSessionID = created.SessionID
	sess.meta.RunnerID, sess.meta.ProcessID = string(runner), r.processID
	sess.meta.AgentCapabilities = created.AgentCapabilities
	sess.meta.AgentInfo = created.AgentInfo
	cached := sess.meta.ConfigOptions
	if !slices.EqualFunc(sess.meta.ConfigOptions, created.ConfigOptions, func(a, b events.JSON) bool { return string(a) == string(b) }) {
		sess.meta.ConfigOptions = created.ConfigOptions
		sess.meta.ConfigRevision++
	}
	if tier != events.TierNew {
		if err := sess.reapplyConfig(ctx, r, cached); err != nil {
			return runner, err
		}
	}
	if tier == events.TierFallback {
		// The agent lost the session: the next prompt brings it the recent
		// history, once.
		if sess.preamble, err = sess.continuationPreamble(ctx); err != nil {
			sess.lg.Warn("build the continuation preamble", events.LogKeyErr, err)
		}
	}
	svc.m.attachSeconds.WithLabelValues(tier).Observe(time.Since(start).Seconds())
	sess.lg.Info("adapter attached", events.LogKeyRunner, string(runner), events.LogKeyProcess, r.processID, "tier", tier)
	return runner, nil
}

// startAdapter asks runner for an adapter: a new ACP session for a session
// that never had one, else the restore ladder for the ACP session it had.
func (sess *session) startAdapter(ctx context.Context, runner events.RunnerID, r *route) (string, *events.AcpSessionCreatedResponse, error) {
	o := sess.opened
	var dirs []string
	var env map[string]string
	if len(o.AdditionalDirectories) > 0 {
		_ = json.Unmarshal(o.AdditionalDirectories, &dirs)
	}
	if len(o.Env) > 0 {
		_ = json.Unmarshal(o.Env, &env)
	}
	mcp := o.McpServers
	if len(mcp) == 0 {
		mcp = events.JSON("[]")
	}
	if prev := sess.meta.AcpSessionID; prev != "" {
		// The instruction settings go with every restore, as with the
		// create: the agent is given its instructions again.
		ready, err := events.Call[events.AdapterReady](ctx, sess.svc.nc, events.RunnerSubject(runner, events.RunnerRestore), &events.RestoreRequest{
			Resume: events.AcpResumeSessionRequest{
				SessionID: prev, AgentType: o.Agent, Cwd: o.Cwd, AdditionalDirectories: dirs, McpServers: mcp, Env: env,
			},
			SkipOsInstructions: o.SkipOsInstructions, AdditionalInstructions: o.AdditionalInstructions,
		}, sess.runnerHeader(r))
		if err != nil {
			return "", nil, err
		}
		return ready.Tier, &ready.Session, nil
	}
	created, err := events.Call[events.AcpSessionCreatedResponse](ctx, sess.svc.nc, events.RunnerSubject(runner, events.RunnerCreate), &events.AcpCreateSessionRequest{
		AgentType: o.Agent, Cwd: o.Cwd, ProtocolVersion: 1, McpServers: mcp, Env: env, AdditionalDirectories: dirs,
		SkipOsInstructions: o.SkipOsInstructions, AdditionalInstructions: o.AdditionalInstructions,
	}, sess.runnerHeader(r))
	return events.TierNew, created, err
}

func (sess *session) runnerHeader(r *route) nats.Header {
	return nats.Header{
		events.HeaderNamespace: []string{string(sess.ns)},
		events.HeaderSessionID: []string{string(sess.sid)},
		events.HeaderProcessID: []string{r.processID},
	}
}

// detach forgets the adapter route and stops consuming its output.
func (sess *session) detach() {
	if sess.adapter == nil {
		return
	}
	sess.endDrain(sess.adapter)
	_ = sess.adapter.sub.Unsubscribe()
	sess.adapter = nil
}

// stopAdapter detaches and asks the runner to stop the process.
func (sess *session) stopAdapter(r *route) {
	sess.detach()
	ctx, cancel := context.WithTimeout(sess.svc.runCtx, sess.svc.cfg.CallTimeout)
	defer cancel()
	if _, err := events.Call[events.RunnerAck](ctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerStop), &events.AcpCloseSessionRequest{SessionID: r.acpSessionID}, sess.runnerHeader(r)); err != nil {
		sess.lg.Warn("stop adapter", events.LogKeyErr, err)
	}
}

// release drops the session from this replica: waiters get err, the IO
// consumer stops, the state is forgotten and the owner lease given up. The
// adapter keeps running; the next owner decides what to do with it.
func (sess *session) release(err error) {
	sess.detach()
	if sess.turn != nil {
		sess.turn.finish(nil, err)
		sess.turn = nil
	}
	sess.pending = nil
	sess.loaded = false
	sess.releaseLease()
	sess.svc.forget(sess)
}

// project writes the ACP_SESSIONS projection. It is best effort: the log is
// the truth and the projection is rebuilt from it.
func (sess *session) project(ctx context.Context) {
	if sess.opened == nil {
		return
	}
	state := map[string]any{"status": sess.status()}
	if sess.turn != nil {
		state["turnId"] = sess.turn.id
		if len(sess.turn.perms) > 0 {
			requests := make([]map[string]any, len(sess.turn.perms))
			for i, p := range sess.turn.perms {
				requests[i] = map[string]any{"requestId": p.id, "request": json.RawMessage(p.request)}
			}
			state["requests"] = requests
		}
	}
	if sess.failure != nil && sess.turn == nil {
		state["error"] = map[string]string{"code": sess.failure.Code, "message": sess.failure.Message}
	}
	stateJSON, _ := json.Marshal(state)
	dirs := sess.opened.AdditionalDirectories
	if len(dirs) == 0 {
		dirs = events.JSON("[]")
	}
	m := sess.meta
	m.Namespace = string(sess.ns)
	m.PermissionPolicy = sess.opened.PermissionPolicy
	m.Info = events.AcpDurableSessionInfo{
		SessionID:             string(sess.sid),
		Agent:                 sess.opened.Agent,
		Cwd:                   sess.opened.Cwd,
		AdditionalDirectories: dirs,
		State:                 stateJSON,
		LatestSequence:        sess.w.Position().LastSeq,
		CreatedAt:             sess.createdAt.UTC().Format(events.TimestampFormat),
		UpdatedAt:             sess.updatedAt.UTC().Format(events.TimestampFormat),
	}
	data, err := events.Marshal(&m)
	if err == nil {
		_, err = sess.svc.meta.Put(ctx, events.SessionKey(sess.ns, sess.sid), data)
	}
	if err != nil {
		sess.lg.Warn("write session projection", events.LogKeyErr, err)
	}
}

// status is the session state derived from the log: waiting while a turn
// waits for permission answers, running while a turn is open, failed after
// a failed turn, idle otherwise.
func (sess *session) status() string {
	switch {
	case sess.turn != nil && len(sess.turn.perms) > 0:
		return "waiting"
	case sess.turn != nil:
		return "running"
	case sess.failure != nil:
		return "failed"
	default:
		return "idle"
	}
}
