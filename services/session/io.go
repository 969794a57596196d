package session

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/tail"
	"skein.dev/services/session/internal/applier"
)

// onTail receives one record of the session's ACP_IO, republished as it was
// stored. The route's place in the stream (ioTail, package tail) delivers
// records strictly in stream order and once each: a record whose
// predecessor (Nats-Last-Sequence) was not read first has the gap read
// back from the stream before it. Each record delivered goes to ingest,
// which applies the records of the adapter process in their number order,
// whatever order the stream stored them in (ioorder.go, internal/applier).
// A republished record the live tail misses with nothing after it is
// found by the sweep's tail check (checkTail) and after a reconnect
// (catchUpAfterReconnects).
func (r *route) onTail(m *nats.Msg) {
	sess := r.sess
	received := time.Now()
	seq, _, _, ok := tail.Republished(m)
	if !ok {
		return
	}
	if runner := events.IORunner(m.Subject); runner != r.runner {
		r.foreign(runner, seq)
		return
	}
	sess.svc.heard.note(r.runner, received)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.adapter != r {
		return
	}
	r.arrived = received
	if _, a := r.ioTail.Decide(m); a == tail.Skip {
		return
	}
	// A callback has no context of its own: it borrows the service's
	// lifetime, and does nothing once the service has stopped.
	sess.svc.life.do(func(ctx context.Context) {
		r.received = received
		r.resumeStalled(ctx)
		r.readIO(r.ioTail.Offer(ctx, m, r.deliverIO(ctx, seq)))
		r.commitUnlessMore(ctx)
	})
}

// ioSubject is where the route's runner writes the session's records.
func (r *route) ioSubject() string {
	return events.IOSubject(r.sess.ns, r.sess.sid, r.runner)
}

// follow starts the route's reads of ACP_IO after sequence read: the live
// tail of every runner's records of the session (to see, and drop, those
// of a runner the adapter does not run on), and the chain of its own
// runner's, from which gaps are read back.
func (r *route) follow(read uint64) error {
	sess := r.sess
	r.ioTail = tail.NewChain(sess.svc.js, events.StreamIO, r.ioSubject(), read)
	sub, err := sess.svc.nc.Subscribe(events.IOTailSubject(sess.ns, sess.sid), func(m *nats.Msg) { r.onTail(m) })
	if err != nil {
		return err
	}
	// A slow owner must not lose records on the core subscription; a gap
	// would be filled from the stream anyway.
	_ = sub.SetPendingLimits(-1, -1)
	r.sub = sub
	return nil
}

// foreign drops a record of the session that runner wrote, which is not
// the runner of the route's adapter: a runner may write only for the
// sessions placed on it (issue 31: the hub never trusts the edge), and
// an earlier runner of the session writes for a process it no longer
// serves. Each is counted; the first of each runner per route is logged.
func (r *route) foreign(runner events.RunnerID, seq uint64) {
	sess := r.sess
	sess.svc.m.ioRejected.WithLabelValues("foreign_runner").Inc()
	if _, seen := r.foreigners.LoadOrStore(runner, true); !seen {
		sess.lg.Warn("dropped a record of a runner the session's adapter does not run on",
			events.LogKeyRunner, string(runner), "adapter_runner", string(r.runner), events.LogKeySeq, seq)
	}
}

// errRouteEnded stops a read of ACP_IO once the route it read for ended;
// errNotCommitted, once what it read could not be written to the log (the
// turn failed output_lost already).
var (
	errRouteEnded   = errors.New("the route ended")
	errNotCommitted = errors.New("the adapter's output was not committed")
)

// deliverIO returns the function that takes each record ioTail delivers to
// ingest: the live record live, or one read back from the stream before
// it. A read back that queued a full batch commits it before it reads on.
// The caller holds sess.mu.
func (r *route) deliverIO(ctx context.Context, live uint64) func(*tail.Record) error {
	sess := r.sess
	return func(rec *tail.Record) error {
		if sess.adapter != r {
			return errRouteEnded
		}
		if rec.Sequence != live {
			sess.svc.m.ioGapRecords.Inc()
			r.received = time.Now()
		}
		r.ingest(ctx, rec)
		if len(sess.pending) >= eventlog.MaxBatch && !sess.commitOrFail(ctx) {
			return errNotCommitted
		}
		return nil
	}
}

// readIO logs a read of the session's ACP_IO that failed. A read the route
// stopped itself is no failure: it is over.
func (r *route) readIO(err error) {
	if err != nil && !errors.Is(err, errRouteEnded) && !errors.Is(err, errNotCommitted) {
		r.sess.lg.Warn("read the session's io", events.LogKeyErr, err)
	}
}

// commitUnlessMore commits queued output unless more of the adapter's
// output is already waiting to be applied (and the group has room).
func (r *route) commitUnlessMore(ctx context.Context) {
	sess := r.sess
	if len(sess.pending) == 0 {
		return
	}
	// The message being delivered counts as pending until its callback
	// returns: more is waiting only beyond it.
	if waiting, _, err := r.sub.Pending(); err == nil && waiting > 1 && len(sess.pending) < eventlog.MaxBatch && sess.adapter == r {
		return
	}
	sess.commitOrFail(ctx)
}

// commitOrFail commits queued output; if that fails, the running turn fails
// output_lost: its output is not safe in the log. (The writer retried the
// append for as long as an election may take: what failed is the log, not
// the turn's request, so the turn does not end unavailable.)
func (sess *session) commitOrFail(ctx context.Context) bool {
	err := sess.commit(ctx)
	if err == nil {
		return true
	}
	sess.lg.Warn("append adapter output", events.LogKeyErr, err)
	if sess.turn != nil {
		failure := events.Errorf(events.CodeOutputLost,
			"the agent's output could not be written to the session's log: %s", events.AsError(err).Message)
		if isStorageFull(err) {
			failure = storageFullFailure(err)
		}
		sess.abortTurn(ctx, ioPos{}, events.OutcomeFailed, failure)
	}
	return false
}

// catchUp reads the records of the session's ACP_IO after the last one
// read, up to the newest, ingests them, and commits what they queued.
// The caller holds sess.mu.
func (r *route) catchUp(ctx context.Context) {
	sess := r.sess
	if err := r.ioTail.CatchUp(ctx, 0, r.deliverIO(ctx, 0)); err != nil {
		r.readIO(err)
		return
	}
	if sess.adapter == r {
		sess.commitOrFail(ctx)
	}
}

// applyIO applies one ACP_IO record of the route's process, in the order
// the runner numbered it. Records an old owner applied (see takeover) are
// read again only to hold the chunks of the message in progress.
func (r *route) applyIO(ctx context.Context, ap applier.Applied[*eventlog.Record]) {
	sess := r.sess
	rec := ap.Value
	ioSeq := rec.Sequence
	v, err := events.Unmarshal(rec.Data)
	if err != nil {
		sess.svc.m.ioRejected.WithLabelValues("undecodable").Inc()
		sess.lg.Warn("undecodable runner record", events.LogKeySeq, ioSeq, events.LogKeyErr, err)
		return
	}
	at := ap.At()
	// The deltas of the record's chunks go out together, as one live
	// message per run of chunks (see liveRun), once the record is applied
	// or when something durable comes between.
	var run liveRun
	defer r.endLive(&run)
	if ap.Replayed() {
		if u, ok := v.(*events.AdapterUpdate); ok {
			r.rehold(ap, at, u.Update)
		}
		if _, ok := v.(*events.AdapterUpdates); !ok {
			return
		}
	}
	sess.svc.m.ioRecords.WithLabelValues(v.VariantName()).Inc()
	switch v := v.(type) {
	case *events.AdapterUpdate:
		r.onUpdate(ctx, at, routeUpdate(v.Update, v.Kind, v.MessageID, v.Kind != ""), &run)
	case *events.AdapterUpdates:
		for i, u := range v.Updates {
			p := ioPos{Seq: ioSeq, No: at.No, N: i + 1}
			if ap.UpdateReplayed(i) {
				r.rehold(ap, p, u)
				continue
			}
			if sess.adapter != r {
				return // the update before ended the route (an aborted turn)
			}
			kind, id, ok := v.Route(i)
			r.onUpdate(ctx, p, routeUpdate(u, kind, id, ok), &run)
		}
	case *events.AdapterPermissionRequest:
		sess.onPermissionRequest(ctx, at, r, v)
	case *events.AdapterInputRequest:
		sess.onInputRequest(ctx, at, r, v)
	case *events.AdapterPromptResult:
		r.onPromptResult(ctx, at, v)
	case *events.AcpAgentStderrEvent:
		r.publishLive(v, nil)
	case *events.AcpAgentExitedEvent:
		r.onExit(ctx, at, v)
	case *events.AdapterLimitHit:
		r.onLimitHit(ctx, at, v)
	default:
		sess.svc.m.ioRejected.WithLabelValues("unexpected").Inc()
		sess.lg.Warn("unexpected runner record", events.LogKeyRecord, v.VariantName())
	}
}

// routeUpdate is the routing view of an update of an ACP_IO record: the
// kind and messageId the runner carried. The runner checked the update
// when it read it (acpwire.ParseSessionUpdate), so a carried route is
// taken as it is; a record that carries none (ok false) is malformed.
func routeUpdate(raw events.JSON, kind string, messageID *string, ok bool) routed {
	if !ok {
		return routed{err: errors.New("the runner record carries no sessionUpdate kind for the update")}
	}
	return routed{upd: acp.Update{Kind: kind, MessageID: messageID, Raw: json.RawMessage(raw)}}
}

// routed is an update with its route, or why it has none.
type routed struct {
	upd acp.Update
	err error
}

// onUpdate applies one session update the adapter sent. A chunk's delta
// joins run, published by endLive.
func (r *route) onUpdate(ctx context.Context, at ioPos, u routed, run *liveRun) {
	sess := r.sess
	if r.drain != nil {
		return // output of a turn already ended; the adapter is winding it down
	}
	if u.err != nil {
		sess.svc.m.ioRejected.WithLabelValues("malformed_update").Inc()
		sess.lg.Warn("malformed session/update", events.LogKeyErr, u.err)
		return
	}
	upd := &u.upd
	if reservedKind(upd.Kind) {
		// An update that would show as one of Skein's own events (a
		// permission response the user never gave) is the agent's
		// forgery: it is not stored (agentupdate.go).
		sess.svc.m.ioRejected.WithLabelValues("reserved_kind").Inc()
		sess.lg.Warn("agent update takes the type of a Skein event; dropped", "kind", upd.Kind, events.LogKeyProcess, r.processID)
		return
	}
	if upd.Kind == acp.UpdateUserMessageChunk {
		// The user's own prompt is Skein's accepting append; what the
		// agent says the user said is marked as the agent's.
		upd.Raw = markAgentOrigin(upd.Raw)
	}
	chunk := upd.Kind == acp.UpdateAgentMessageChunk || upd.Kind == acp.UpdateAgentThoughtChunk
	if !chunk {
		// What is durable follows the deltas before it.
		r.endLive(run)
	}
	cfg := &sess.svc.cfg
	if t := sess.turn; t != nil {
		t.outputBytes += int64(len(upd.Raw))
		if t.outputBytes > cfg.MaxTurnOutputBytes {
			r.endLive(run)
			sess.abortTurn(ctx, at, events.OutcomeFailed, events.Errorf(events.CodeTurnOutputTooLarge,
				"the turn's output passed %d bytes", cfg.MaxTurnOutputBytes))
			return
		}
	}
	switch {
	case chunk:
		if !sess.buf.continues(upd.Kind, upd.MessageID) {
			// The message that ends is stamped with its own last chunk, not
			// with this one: this chunk is held in memory only, and a new
			// owner must read it again. Its deltas go out before it is
			// queued.
			r.endLive(run)
			if err := sess.flush(ctx, sess.buf.last); err != nil {
				return
			}
		}
		sess.buf.add(upd.Kind, upd.MessageID, upd.Raw, at)
		if t := sess.turn; t != nil && !t.replied && upd.Kind == acp.UpdateAgentMessageChunk && hasText(upd.Raw) {
			t.replied = true
			sess.svc.m.firstReplySeconds.Observe(time.Since(t.acceptedAt).Seconds())
			t.firstReply()
		}
		if sess.buf.bytes > cfg.MaxMessageBytes {
			sess.buf.reset()
			r.endLive(run)
			if sess.turn != nil {
				sess.abortTurn(ctx, at, events.OutcomeFailed, events.Errorf(events.CodeMessageTooLarge,
					"a message passed %d bytes", cfg.MaxMessageBytes))
			}
			return
		}
		if len(run.updates) == 0 {
			// The run's deltas are placed after the log's end: everything
			// before them must be in the log first. Nothing is queued
			// while the run lasts (endLive comes first), so the end holds
			// for each of its deltas.
			if !sess.commitOrFail(ctx) {
				return
			}
			run.after = sess.w.Position().LastSeq
		}
		run.updates = append(run.updates, events.JSON(upd.Raw))
	default:
		// Any other update ends the message in progress, then is durable
		// at once, in arrival order.
		if err := sess.flush(ctx, at); err != nil {
			return
		}
		if len(upd.Raw) > sess.svc.maxRecord {
			if sess.turn != nil {
				sess.abortTurn(ctx, at, events.OutcomeFailed, events.Errorf(events.CodePayloadTooLarge,
					"a %s update of %d bytes is larger than a log record may be (%d)", upd.Kind, len(upd.Raw), sess.svc.maxRecord))
			}
			return
		}
		sess.queue(at, eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{Update: events.JSON(upd.Raw)}})
		switch upd.Kind {
		case acp.UpdateConfigOption, acp.UpdateCurrentMode:
			r.onConfigUpdate(ctx, at, upd.Kind, upd.Raw)
		case acp.UpdateSessionInfo:
			r.onSessionInfo(ctx, at, upd.Raw)
		case acp.UpdateAvailableCommands:
			r.onOfferUpdate(ctx, upd.Kind, upd.Raw)
		case acp.UpdateUsage:
			r.onOfferUpdate(ctx, upd.Kind, upd.Raw)
			r.onCost(ctx, at, upd.Raw)
		}
	}
}

// hasText reports whether a message chunk's content is a text block with
// some text: the first such chunk of a turn is its first reply.
func hasText(update []byte) bool {
	text, ok := acp.ContentText(update)
	return ok && text != ""
}

// liveRun is the deltas of a run of chunks in one ACP_IO record, with
// nothing durable between them: each follows the same durable event,
// after, so they go out as one live message.
type liveRun struct {
	after   uint64
	updates []events.JSON
}

// endLive publishes the deltas of run, if any, and empties it: a lone
// delta as an AcpEphemeralSessionUpdateEvent, several as one
// EphemeralUpdates. It must come before anything more is queued for the
// log, since the deltas' afterSequence is the log's end now.
func (r *route) endLive(run *liveRun) {
	sess := r.sess
	n := len(run.updates)
	if n == 0 {
		return
	}
	var v events.Variant
	if n == 1 {
		v = &events.AcpEphemeralSessionUpdateEvent{SessionID: string(sess.sid), AfterSequence: run.after, Update: run.updates[0]}
	} else {
		v = &events.EphemeralUpdates{SessionID: string(sess.sid), AfterSequence: run.after, Updates: run.updates}
	}
	r.publishLive(v, nil)
	run.updates = nil
	sess.svc.m.liveDeltas.Add(float64(n))
	if !r.received.IsZero() {
		d := time.Since(r.received).Seconds()
		for range n {
			sess.svc.m.liveDeltaSeconds.Observe(d)
		}
	}
}

// flush makes the buffered message durable, coalesced.
func (sess *session) flush(ctx context.Context, at ioPos) error {
	kind := sess.buf.kind
	updates, err := sess.buf.take(sess.svc.maxRecord)
	if err != nil {
		if sess.turn != nil {
			sess.abortTurn(ctx, at, events.OutcomeFailed, events.AsError(err))
		}
		return err
	}
	if len(updates) == 0 {
		return nil
	}
	entries := make([]eventlog.Entry, len(updates))
	for i, u := range updates {
		entries[i] = eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{Update: events.JSON(u)}}
		if len(updates) > 1 {
			entries[i].Header = nats.Header{events.HeaderPart: []string{strconv.Itoa(i)}}
		}
	}
	sess.queue(at, entries...)
	if sess.turn != nil && kind == acp.UpdateAgentMessageChunk {
		// The turn's result carries its last message, unless the message
		// had to be split to fit the log: then it is only in history.
		t := sess.turn
		t.lastMessage, t.lastMessageRec, t.lastMessageSeq = nil, nil, 0
		if len(updates) == 1 {
			t.lastMessage, t.lastMessageRec = events.JSON(updates[0]), entries[0].Value
		}
	}
	return nil
}

// publishLive publishes v on the session's live subject. Live deltas are
// best effort by design (the completed message becomes durable), but a
// failure is counted and logged, never silent.
func (r *route) publishLive(v events.Variant, hdr nats.Header) {
	sess := r.sess
	data, err := events.Marshal(v)
	if err == nil {
		if hdr == nil {
			hdr = nats.Header{}
		}
		hdr.Set(events.HeaderRecord, v.VariantName())
		switch e := v.(type) {
		case *events.AcpEphemeralSessionUpdateEvent:
			hdr.Set(events.HeaderAfterSequence, strconv.FormatUint(e.AfterSequence, 10))
		case *events.EphemeralUpdates:
			hdr.Set(events.HeaderAfterSequence, strconv.FormatUint(e.AfterSequence, 10))
		}
		err = sess.svc.nc.PublishMsg(&nats.Msg{Subject: events.LiveSubject(sess.ns, sess.sid), Header: hdr, Data: data})
	}
	if err != nil {
		sess.svc.m.livePublishErrors.Inc()
		sess.lg.Warn("publish live event", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
	}
}

// onPromptResult ends the turn whose session/prompt this answers, or the
// drain of a turn that already ended.
func (r *route) onPromptResult(ctx context.Context, at ioPos, res *events.AdapterPromptResult) {
	sess := r.sess
	if d := r.drain; d != nil && res.TurnID == d.turnID {
		r.endDrain()
		return
	}
	t := sess.turn
	if t == nil || res.TurnID != t.id {
		return
	}
	if res.Error != nil {
		switch res.Error.Code {
		case events.CodeLineTooLong, events.CodePayloadTooLarge:
			// Not the agent's answer: the runner could not carry what the
			// agent wrote (adapterio.go). The agent may still be in the
			// turn: it is told to cancel, and its answer drained.
			sess.lg.Warn("agent output over a limit; the turn fails", events.LogKeyTurn, t.id, events.LogKeyErr, res.Error.Message)
			sess.abortTurn(ctx, at, events.OutcomeFailed, res.Error.Err())
			if res.Error.Code == events.CodeLineTooLong && sess.adapter == r {
				// The runner no longer reads the adapter, nor can it write
				// the cancel: waiting out the cancel's grace would only
				// hold the next prompt. The adapter goes now.
				r.evictAdapter(ctx, events.UnloadBroken)
			}
		default:
			sess.endTurn(ctx, at, events.OutcomeFailed, "", res.Error.Err())
		}
		return
	}
	outcome := events.OutcomeCompleted
	if res.StopReason == acp.StopReasonCancelled {
		// The agent stopped on its own account (a rejected tool, say):
		// the turn is cancelled, and its buffered chunks are dropped.
		outcome = events.OutcomeCancelled
	}
	sess.endTurn(ctx, at, outcome, res.StopReason, nil)
}

// onExit records an adapter exit nobody asked for, fails the active turn
// (its pending permission requests become terminal) and evicts the route.
// There is no respawn: the next prompt attaches anew.
// onLimitHit records in the session's log that its adapter met a limit of
// its runner's: the kernel told the agent (a fork refused, a process
// OOM-killed), and this tells whoever reads the log why.
func (r *route) onLimitHit(ctx context.Context, at ioPos, ev *events.AdapterLimitHit) {
	sess := r.sess
	if _, err := sess.append(ctx, at, eventlog.Entry{Kind: events.LogControl, Value: ev}); err != nil {
		sess.svc.m.lostRecords.WithLabelValues(events.RecordAdapterLimitHit).Inc()
		sess.lg.Warn("record an adapter's limit hit", events.LogKeyProcess, r.processID, events.LogKeyErr, err)
	}
}

func (r *route) onExit(ctx context.Context, at ioPos, ev *events.AcpAgentExitedEvent) {
	r.onExitBecause(ctx, at, ev, nil)
}

// onExitBecause is onExit, the turn's failure given (nil: adapter_exited).
func (r *route) onExitBecause(ctx context.Context, at ioPos, ev *events.AcpAgentExitedEvent, failure *events.Error) {
	sess := r.sess
	if failure == nil {
		failure = events.Errorf(events.CodeAdapterExited, "the agent exited during the turn")
	}
	if r.io.Waiting() > 0 && failure.Code == events.CodeAdapterExited {
		// The owner was waiting for records the runner never stored; with
		// the runner gone, none will come.
		failure = r.lost("the agent's runner is gone")
	}
	sess.buf.reset()
	r.endDrain()
	sess.detach() // first: nothing is sent to the dead adapter any more
	sess.endLate(ctx, events.ReasonAdapterExited)
	if _, err := sess.append(ctx, at, eventlog.Entry{Kind: events.LogControl, Value: ev}); err != nil {
		// The exit is in ACP_IO still (when the runner saw it): a later
		// owner's takeover finds the adapter gone and closes the turn.
		sess.svc.m.lostRecords.WithLabelValues(events.RecordAgentExited).Inc()
		sess.lg.Warn("record an adapter exit", events.LogKeyProcess, r.processID, events.LogKeyErr, err)
		if sess.turn == nil {
			return
		}
	}
	if sess.turn != nil {
		sess.endTurn(ctx, at, events.OutcomeFailed, "", failure)
	}
	sess.project(ctx)
}
