package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
)

// turn is a prompt in flight. It ends exactly once, through endTurn, which
// appends its TurnFinished. Nobody waits on it in memory: a prompt's caller
// is answered once the turn is accepted, and reads the log for its end
// (turnwait.Await), so the wait survives this replica.
type turn struct {
	id    string
	key   *string
	hash  string
	start uint64 // sequence of its accepting record
	// acceptedAt is when this replica accepted the turn, for the turn
	// timings; zero for a turn taken over from another owner.
	acceptedAt time.Time
	replied    bool              // the first non-empty agent text was seen (or timing is off)
	timing     events.TurnTiming // what of its timing was observed so far (offers.go)

	// lastMessage is the last completed agent message, for the result;
	// lastMessageRec the record it is queued as (until it is stored) and
	// lastMessageSeq its sequence once stored, by which the result shows
	// it as history does.
	lastMessage    events.JSON
	lastMessageRec events.Variant
	lastMessageSeq uint64
	outputBytes    int64 // every update of the turn, for MaxTurnOutputBytes
	waiting              // its requests waiting for a person (waiting.go)
	// endReason is why the requests still pending end with the turn (""
	// when its outcome says: endTurn).
	endReason string
	// cancelledBy is the principal whose cancel ends the turn, recorded
	// on its TurnFinished ("": none, or a caller that named none).
	cancelledBy string
	// stalled: its agent went silent, and the log says so (stall.go),
	// since stalledAt.
	stalled   bool
	stalledAt time.Time
}

// accepted is the prompt's answer for t.
func (t *turn) accepted(sid events.SessionID) *events.PromptAccepted {
	keyed := t.key != nil
	return &events.PromptAccepted{SessionID: string(sid), TurnID: t.id, Sequence: t.start, Keyed: &keyed}
}

// finishedTurn is what a session remembers of its last turn, to tell a
// cancel that arrived while the turn was ending which of the two won.
type finishedTurn struct {
	id      string
	outcome string
	at      time.Time
}

// drain is a turn that ended while the adapter was still working on it (it
// was cancelled, or failed a cap): the adapter has been sent session/cancel
// and owes the answer to its session/prompt. Until it answers, its output
// for that turn is dropped and a new prompt waits; if it does not answer
// within CancelGrace it is evicted.
type drain struct {
	turnID string
	done   chan struct{}
	timer  *time.Timer
}

// contentHash is the hex SHA-256 of the canonical prompt: a repeated
// idempotency key must carry the same one.
func contentHash(blocks []json.RawMessage) string {
	h := sha256.New()
	h.Write([]byte(`{"formatVersion":1,"content":[`))
	for i, b := range blocks {
		if i > 0 {
			h.Write([]byte{','})
		}
		var v any
		if json.Unmarshal(b, &v) == nil {
			canon, _ := json.Marshal(v) // sorted keys, no insignificant space
			h.Write(canon)
		}
	}
	h.Write([]byte(`]}`))
	return hex.EncodeToString(h.Sum(nil))
}

// prompt accepts a prompt and dispatches it, and answers with the turn to
// wait for: a new one, the running one (the same keyed prompt, retried), or
// a finished one whose stored outcome answers a keyed retry. A prompt sent
// with queue while a turn runs, or while prompts wait, is queued instead
// (queue.go).
func (sess *session) prompt(ctx context.Context, req *events.AcpPromptRequest, blocks []json.RawMessage) (*events.PromptAccepted, error) {
	hash := contentHash(blocks)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	for {
		if err := sess.loadExisting(ctx); err != nil {
			return nil, err
		}
		// The end of a turn the full store refused goes first.
		if err := sess.storeHeld(ctx); err != nil {
			return nil, err
		}
		if t := sess.turn; t != nil {
			if req.IdempotencyKey != nil && t.key != nil && *t.key == *req.IdempotencyKey {
				if t.hash != hash {
					return nil, idempotencyConflict(*req.IdempotencyKey)
				}
				return t.accepted(sess.sid), nil // the same prompt, retried: the same turn
			}
			if req.Queue {
				return enqueue(ctx, sess, req, blocks, hash)
			}
			return nil, events.Errorf(events.CodeSessionBusy, "session %s is running turn %s", sess.sid, t.id)
		}
		if req.IdempotencyKey != nil {
			if acc, err := sess.svc.logOf(sess.ns, sess.sid).keyedOutcome(ctx, *req.IdempotencyKey, hash); acc != nil || err != nil {
				return acc, err
			}
		}
		if req.Queue && len(sess.prompts.entries) > 0 {
			return enqueue(ctx, sess, req, blocks, hash) // behind what waits
		}
		var d *drain
		if r := sess.adapter; r != nil {
			d = r.drain
		}
		if d == nil {
			break
		}
		// The adapter still owes the answer to a cancelled prompt; it takes
		// no other until then. Wait for it (bounded by CancelGrace).
		sess.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			sess.mu.Lock()
			return nil, errShuttingDown
		}
		sess.mu.Lock()
	}
	return start(ctx, sess, turnStart{key: req.IdempotencyKey, hash: hash, blocks: blocks, content: req.Content, principal: principal(ctx)})
}

// turnStart is what a turn starts from: a prompt, or a queue entry (from).
type turnStart struct {
	key       *string
	hash      string
	blocks    []json.RawMessage
	content   events.JSON
	principal string
	from      string // the queue entry's ID
}

// start accepts ts as the session's next turn and dispatches it. The
// session is loaded, idle and not draining; sess.mu is held.
func start(ctx context.Context, sess *session, ts turnStart) (*events.PromptAccepted, error) {
	// A session at its cap takes no prompt until the cap is raised, nor
	// starts a queued one.
	if err := checkBudget(ctx, sess); err != nil {
		return nil, err
	}
	if sess.adapter == nil {
		if err := sess.attach(ctx); err != nil {
			return nil, err
		}
	}
	// Only now are the agent's prompt capabilities known for certain: a
	// session that had no adapter (unloaded, evicted, a fork's first
	// prompt) learns them from the attach's initialize.
	if err := checkPromptCapabilities(ts.blocks, sess.meta.AgentCapabilities); err != nil {
		return nil, err
	}
	// The first message with text names a session that has no title. Its
	// record goes before the acceptance, not into the turn: a turn's
	// records are the user's message and what the agent made of it, and a
	// live delta's afterSequence is then the message's own sequence.
	if err := sess.deriveTitle(ctx, ts.blocks); err != nil {
		return nil, err
	}
	t := &turn{id: nuid.Next(), key: ts.key, hash: ts.hash}

	// The user message is the acceptance: its first event carries the
	// acceptance headers, and all of its events are one atomic append.
	// A queue entry's PromptDequeued ends the append.
	blocks := ts.blocks
	entries := make([]eventlog.Entry, 0, len(blocks)+1)
	messageID, _ := json.Marshal("user_" + t.id)
	for i, b := range blocks {
		upd := make([]byte, 0, len(b)+80)
		upd = append(upd, `{"sessionUpdate":"user_message_chunk","content":`...)
		upd = append(upd, b...)
		upd = append(upd, `,"messageId":`...)
		upd = append(upd, messageID...)
		upd = append(upd, '}')
		hdr := nats.Header{events.HeaderTurnID: []string{t.id}}
		if ts.principal != "" {
			hdr.Set(events.HeaderPrincipal, ts.principal)
		}
		if i > 0 {
			hdr.Set(events.HeaderTurnBlock, strconv.Itoa(i))
		}
		if i == 0 {
			hdr.Set(events.HeaderTurnAccepted, strconv.Itoa(len(blocks)))
			hdr.Set(events.HeaderIOResume, sess.adapter.io.AcceptancePoint().String())
			hdr.Set(events.HeaderContentHash, ts.hash)
			if t.key != nil {
				hdr.Set(events.HeaderIdempotencyKey, *t.key)
			}
		}
		entries = append(entries, eventlog.Entry{Kind: events.LogEvents, Header: hdr, Value: &events.AcpDurableSessionUpdate{Update: upd}})
	}
	if ts.from != "" {
		entries = append(entries, queueRecord(sess, ts.from,
			&events.PromptDequeued{QueueID: ts.from, Reason: events.DequeueStarted, TurnID: t.id, Status: events.StatusRunning},
			nats.Header{events.HeaderTurnID: []string{t.id}, events.HeaderTurnBlock: []string{strconv.Itoa(len(blocks))}}))
	}
	accepted, err := sess.append(ctx, ioPos{}, entries...)
	if err != nil {
		return nil, err
	}
	t.start = accepted[0].Seq
	t.acceptedAt = time.Now()
	sess.turn = t
	sess.moved(onAccept)
	sess.failure = nil
	sess.buf.reset()
	if ts.from != "" {
		sess.prompts.remove(ts.from)
		sess.svc.m.dequeued.WithLabelValues(events.DequeueStarted).Inc()
		if sess.last != nil {
			sess.svc.m.queueDispatchSeconds.Observe(t.acceptedAt.Sub(sess.last.at).Seconds())
		}
	} else {
		sess.prompts.held = false // a prompt sent without queue: the queue goes on after it
	}
	sess.svc.m.turnsStarted.Inc()
	sess.project(ctx)
	sess.dispatch(ctx, t, ts.content)
	return t.accepted(sess.sid), nil
}

// dispatch sends the turn's prompt to the adapter, once. The runner
// acknowledges once the prompt is on the adapter's stdin. Without that
// acknowledgement (the request or its answer was lost with a NATS node,
// the runner was moving to another node) the owner asks the runner
// whether it wrote the prompt (confirmDelivery) rather than failing the
// turn: the runner writes a turn's prompt at most once, however often it
// is asked to, so sending the request again is safe. Only a runner that
// answers nothing within the bound leaves delivery uncertain, and the turn
// then fails prompt_delivery_uncertain and is never sent again.
func (sess *session) dispatch(ctx context.Context, t *turn, content events.JSON) {
	r := sess.adapter
	if sess.preamble != "" {
		// A fallback restore armed the preamble for this prompt only: the
		// agent gets it first; the log keeps the user's own message.
		block, _ := json.Marshal(map[string]string{"type": "text", "text": sess.preamble})
		content = slices.Concat(events.JSON("["), block, events.JSON(","), bytes.TrimPrefix(bytes.TrimSpace(content), []byte("[")))
		sess.preamble = ""
	}
	sess.svc.m.dispatches.Inc()
	err := r.sendPrompt(ctx, t, content, sess.svc.cfg.CallTimeout)
	if err != nil && events.AsError(err).Code != events.CodeAdapterExited {
		err = r.confirmDelivery(ctx, t, content, err)
	}
	if err == nil {
		sess.svc.m.dispatchSeconds.Observe(time.Since(t.acceptedAt).Seconds())
		t.dispatched()
		return
	}
	e := events.AsError(err)
	if e.Code == events.CodeAdapterExited {
		// The runner said the process is gone: certainly not delivered.
		sess.detach()
		sess.endTurn(ctx, ioPos{}, events.OutcomeFailed, "", e)
		return
	}
	// The runner may or may not have written it: delivery is uncertain.
	// The turn fails and is never sent again; if the adapter did get it,
	// the route drains its answer (and is evicted after CancelGrace if none
	// comes), so nothing of it enters the log.
	sess.abortTurn(ctx, ioPos{}, events.OutcomeFailed, events.Errorf(events.CodePromptDeliveryUncertain, "prompt %s: %s", t.id, e.Message))
}

// sendPrompt asks r's runner to write turn t's prompt to the adapter, and
// waits for its acknowledgement up to wait.
func (r *route) sendPrompt(ctx context.Context, t *turn, content events.JSON, wait time.Duration) error {
	sess := r.sess
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err := rpc.Call[events.RunnerAck](cctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerPrompt),
		&events.RunnerPromptRequest{TurnID: t.id, Prompt: content}, r.header())
	return err
}

// Confirming a dispatch that got no answer: each question to the runner
// waits confirmWait, and they go on for CallTimeout in all, well past the
// runner's move to another node (a reconnect of a few seconds) and its
// stream leader's election, which the runner rides out on its own. The
// first questions come fast: the usual cause is a reply lost in transit.
const (
	confirmWait       = 1500 * time.Millisecond
	confirmBackoffMax = 2 * time.Second
)

// Outcomes of confirmDelivery, the label values of
// acp_session_dispatch_confirms_total.
const (
	confirmWritten   = "written"   // the runner had written the prompt
	confirmResent    = "resent"    // it had not; sent again, and acknowledged
	confirmExited    = "exited"    // the adapter is gone
	confirmUncertain = "uncertain" // the runner answered nothing in time
)

// confirmDelivery settles a dispatch whose request failed with failed
// (no answer, no responders, a refusal other than the adapter's exit): it
// asks the runner for the adapter's status with the turn's ID until the
// runner answers. The prompt written, the dispatch is done; not written,
// it is sent again (the runner writes it once, even if the first request
// arrives too); the adapter gone, the result is adapter_exited. It returns
// the last failure when the runner answers neither within CallTimeout.
func (r *route) confirmDelivery(ctx context.Context, t *turn, content events.JSON, failed error) error {
	sess := r.sess
	sess.lg.Info("prompt dispatch unanswered; asking the runner", events.LogKeyTurn, t.id, events.LogKeyRunner, r.runner, events.LogKeyErr, failed)
	deadline := time.Now().Add(sess.svc.cfg.CallTimeout)
	hdr := r.header()
	hdr.Set(events.HeaderTurnID, t.id)
	backoff := 100 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, confirmWait)
		st, err := rpc.Call[events.AdapterStatus](cctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerStatus),
			&events.AcpGetSessionStateRequest{SessionID: r.acpSessionID}, hdr)
		cancel()
		switch {
		case err != nil:
			failed = err
		case !st.Alive:
			sess.svc.m.dispatchConfirms.WithLabelValues(confirmExited).Inc()
			return events.Errorf(events.CodeAdapterExited, "the agent exited before its prompt was written")
		case st.PromptWritten:
			sess.svc.m.dispatchConfirms.WithLabelValues(confirmWritten).Inc()
			return nil
		default:
			err = r.sendPrompt(ctx, t, content, confirmWait)
			if err == nil {
				sess.svc.m.dispatchConfirms.WithLabelValues(confirmResent).Inc()
				return nil
			}
			if events.AsError(err).Code == events.CodeAdapterExited {
				sess.svc.m.dispatchConfirms.WithLabelValues(confirmExited).Inc()
				return err
			}
			failed = err
		}
		if !time.Now().Add(backoff).Before(deadline) {
			sess.svc.m.dispatchConfirms.WithLabelValues(confirmUncertain).Inc()
			return failed
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			sess.svc.m.dispatchConfirms.WithLabelValues(confirmUncertain).Inc()
			return failed
		}
		backoff = min(2*backoff, confirmBackoffMax)
	}
}

func idempotencyConflict(key string) error {
	return events.Errorf(events.CodeIdempotencyConflict, "idempotency key %q was used for another prompt", key)
}

// endTurn appends the record that closes the active turn and wakes its
// waiters. Only a turn the adapter completed makes its buffered message
// durable: a failed or cancelled turn's chunks are dropped (clients saw them
// live, as ephemeral events, and the turn's end tells them to let go).
// Requests still pending become terminal with the turn's endReason, or
// the reason its outcome gives.
func (sess *session) endTurn(ctx context.Context, at ioPos, outcome, stopReason string, failure *events.Error) {
	t := sess.turn
	if t == nil {
		return
	}
	// Only the TurnFinished says that the record at was applied: the
	// records that go before it (the message made durable, permission
	// requests ended) are stamped with what they come from, the message's
	// last chunk, or with nothing. Should they be stored and the
	// TurnFinished not (a node dying between the two appends), a new owner
	// then reads the record at again and ends the turn itself; stamped
	// with at, they told it the turn's end was applied, and the turn
	// stayed open for ever.
	if outcome == events.OutcomeCompleted {
		if err := sess.flush(ctx, sess.buf.last); err != nil {
			if sess.turn != t {
				return // flush failed the turn itself (abortTurn)
			}
			outcome, failure = events.OutcomeFailed, events.AsError(err)
		}
	} else {
		sess.buf.reset()
	}
	reason := events.ReasonTurnFailed
	switch {
	case t.endReason != "":
		reason = t.endReason
	case outcome == events.OutcomeCancelled:
		reason = events.ReasonPromptCancelled
	case failure != nil && failure.Code == events.CodeAdapterExited:
		reason = events.ReasonAdapterExited
	}
	sess.terminate(ctx, ioPos{}, &t.waiting, reason)
	rec := &events.TurnFinished{TurnID: t.id, Outcome: outcome, StopReason: stopReason, IdempotencyKey: t.key, ContentHash: t.hash}
	rec.Timing = t.finishTiming()
	entry := eventlog.Entry{Kind: events.LogControl, Value: rec, Header: principalHeader(t.cancelledBy)}
	if sess.prompts.goesOn(sess.svc.cfg.QueueOnFailure, outcome) {
		entry.Header = queueNextHeader(entry.Header)
	}
	if t.key != nil {
		entry.Subject = events.KeySubject(sess.ns, sess.sid, *t.key)
	}
	// Stamped now, with the turn's headers, as append would: the entry is
	// kept as it is should the full store refuse it (hold).
	stamped := []eventlog.Entry{entry}
	sess.stamp(at, stamped)
	entry = stamped[0]
	// The turn's queued records first: the finish names the sequence of
	// its message, which is known once the message is stored.
	err := sess.commit(ctx)
	if isStorageFull(err) && sess.turn == t {
		// The turn's last output could not be stored: that is its end.
		outcome, stopReason, failure = events.OutcomeFailed, "", storageFullFailure(err)
		rec.Outcome, rec.StopReason = outcome, stopReason
		err = nil
	}
	if err == nil {
		if failure != nil {
			rec.Error = failure.Response()
		} else {
			rec.Message, rec.MessageSeq = t.lastMessage, t.lastMessageSeq
		}
		_, err = sess.append(ctx, at, entry)
	}
	if sess.turn != t {
		return // the append failed and released the session
	}
	if isStorageFull(err) {
		sess.hold(ctx, t, entry, rec, outcome, stopReason, failure)
		return
	}
	if err != nil {
		// Not recorded: the turn stays open in the log, and whoever loads
		// the session next (this replica's next request, a claim) closes it
		// from there. Here it is forgotten, so that nothing is written
		// past a record the log does not have.
		sess.lg.Warn("record the end of a turn", events.LogKeyTurn, t.id, events.LogKeyErr, err)
		sess.release(err)
		return
	}
	sess.turn = nil
	t.setStalled(sess.svc.m, false)
	sess.finished(ctx, t, rec, outcome, stopReason, failure)
}

// finished completes the end of turn t, whose TurnFinished rec is stored.
func (sess *session) finished(ctx context.Context, t *turn, rec *events.TurnFinished, outcome, stopReason string, failure *events.Error) {
	sess.moved(onFinish)
	sess.last = &finishedTurn{id: t.id, outcome: outcome, at: time.Now()}
	if rec.Timing != nil {
		sess.meta.Info.LastTurnTiming = rec.Timing
	}
	sess.svc.m.turnsFinished.WithLabelValues(outcome).Inc()
	sess.svc.m.prompts.WithLabelValues(outcome, stopReasonLabel(stopReason)).Inc()
	if !t.acceptedAt.IsZero() {
		sess.svc.m.finishedSeconds.WithLabelValues(outcome).Observe(time.Since(t.acceptedAt).Seconds())
	}
	if failure != nil {
		sess.failure = rec.Error
	}
	sess.prompts.afterTurn(sess.svc.cfg.QueueOnFailure, outcome)
	sess.project(ctx)
	kickQueue(sess)
}

// abortTurn ends the running turn before the adapter answered it: the turn
// is recorded with outcome (cancelled, or failed with failure), the adapter
// is sent session/cancel, and the route drains until the adapter answers.
func (sess *session) abortTurn(ctx context.Context, at ioPos, outcome string, failure *events.Error) {
	t := sess.turn
	if t == nil {
		return
	}
	r := sess.adapter
	stopReason := ""
	if outcome == events.OutcomeCancelled {
		stopReason = acp.StopReasonCancelled
	}
	sess.endTurn(ctx, at, outcome, stopReason, failure)
	if r == nil || sess.adapter != r || r.drain != nil {
		return
	}
	d := &drain{turnID: t.id, done: make(chan struct{})}
	r.drain = d
	sess.moved(onCancel)
	d.timer = sess.svc.life.afterFunc(sess.svc.cfg.CancelGrace, func(ctx context.Context) { r.evictDrained(ctx, d) })
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	if _, err := rpc.Call[events.RunnerAck](cctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerCancel),
		&events.RunnerCancelRequest{TurnID: t.id}, r.header()); err != nil {
		sess.lg.Warn("send session/cancel", events.LogKeyErr, err)
	}
}

// endDrain ends r's drain: the adapter answered, exited or was evicted.
func (r *route) endDrain() {
	sess := r.sess
	if d := r.drain; d != nil {
		d.timer.Stop()
		close(d.done)
		r.drain = nil
		sess.moved(onDrained)
		kickQueue(sess)
	}
}

// evictDrained stops an adapter that did not answer a cancelled prompt
// within CancelGrace. The turn was already recorded as ended.
func (r *route) evictDrained(ctx context.Context, d *drain) {
	sess := r.sess
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.adapter != r || r.drain != d {
		return
	}
	sess.lg.Warn("adapter ignored session/cancel; evicting it", events.LogKeyProcess, r.processID)
	r.evictAdapter(ctx, events.UnloadCancelIgnored)
}

// evictAdapter stops the adapter r, draining a cancelled turn, and records why.
// The caller holds sess.mu.
func (r *route) evictAdapter(ctx context.Context, reason string) {
	sess := r.sess
	r.endDrain()
	sess.endLate(ctx, events.ReasonSessionUnloaded)
	r.stopAdapter(ctx)
	if _, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionUnloaded{Reason: reason}}); err != nil {
		sess.lg.Warn("record the eviction of an adapter", events.LogKeyErr, err)
	}
	sess.project(ctx)
}

// cancel is cancelPrompt: first writer wins against the turn's completion,
// decided by which TurnFinished reaches the log first.
func (sess *session) cancel(ctx context.Context, arrived time.Time) (*events.AcpCancelPromptResponse, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.loadExisting(ctx); err != nil {
		return nil, err
	}
	if sess.turn == nil {
		// The turn this cancel aimed at ended while the cancel waited for
		// the session: the turn's outcome won, and is the answer.
		if l := sess.last; l != nil && l.at.After(arrived) {
			return &events.AcpCancelPromptResponse{Status: l.outcome}, nil
		}
		return &events.AcpCancelPromptResponse{Status: events.CancelNoActivePrompt}, nil
	}
	t := sess.turn
	t.cancelledBy = principal(ctx)
	sess.abortTurn(ctx, ioPos{}, events.OutcomeCancelled, nil)
	if l := sess.last; l == nil || l.id != t.id {
		return nil, events.Errorf(events.CodeUnavailable, "the cancellation of turn %s could not be recorded", t.id)
	}
	return &events.AcpCancelPromptResponse{Status: events.CancelCancelled}, nil
}
