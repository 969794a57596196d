package session

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/sessionstate"
)

// The prompt queue. A prompt sent with queue while a turn runs (or while
// prompts already wait) is recorded in the session's log (PromptQueued, on
// the entry's own QueueSubject) and answered at once; it runs as its own
// turn when the turns before it end. Starting it is one atomic append: the
// turn's acceptance and the entry's PromptDequeued (started). A withdrawn
// entry, or one that could not start, gets its PromptDequeued too. So the
// log says what waits, and any owner rebuilds the queue from it: from the
// projection's list and the queue records after it (loadQueue).
//
// The queue goes on after a turn that completed. After a cancelled or
// failed one it goes on too, unless session.queue-on-failure is hold: then
// it is held, as it is by an unload, and waits for the next prompt sent
// without queue; that prompt runs first, and the queue goes on after it.
//
// A TurnFinished (or a failed PromptDequeued) after which the next entry
// is to start carries HeaderQueueNext: should the owner die before it
// starts, a claim takes the session up, as it does an open turn.

// Policies of Config.QueueOnFailure.
const (
	QueueContinue = "continue"
	QueueHold     = "hold"
)

// promptQueue is what waits in a session's queue, in order, and whether
// it is held. Guarded by sess.mu. Its entries are as the session's info
// lists them (their positions numbered by list).
type promptQueue struct {
	entries []events.QueuedPrompt
	held    bool
}

// ready reports whether the queue's next entry may start once the session
// is idle.
func (q *promptQueue) ready() bool { return !q.held && len(q.entries) > 0 }

// goesOn reports whether the next entry starts after a turn that ended
// with outcome, under policy.
func (q *promptQueue) goesOn(policy, outcome string) bool {
	return q.ready() && (outcome == events.OutcomeCompleted || policy == QueueContinue)
}

// afterTurn holds the queue when a turn that ended with outcome stops it.
func (q *promptQueue) afterTurn(policy, outcome string) {
	if !q.goesOn(policy, outcome) && len(q.entries) > 0 {
		q.held = true
	}
}

// index returns the position in entries of the entry id, or -1.
func (q *promptQueue) index(id string) int {
	return slices.IndexFunc(q.entries, func(e events.QueuedPrompt) bool { return e.ID == id })
}

// keyed returns the index of the waiting entry sent with idempotency key
// key, or -1.
func (q *promptQueue) keyed(key string) int {
	return slices.IndexFunc(q.entries, func(e events.QueuedPrompt) bool { return e.IdempotencyKey != nil && *e.IdempotencyKey == key })
}

// remove takes entry id out of the queue.
func (q *promptQueue) remove(id string) {
	q.entries = slices.DeleteFunc(q.entries, func(e events.QueuedPrompt) bool { return e.ID == id })
	if len(q.entries) == 0 {
		q.held = false
	}
}

// list is the queue as a session's info shows it.
func (q *promptQueue) list() []events.QueuedPrompt {
	out := slices.Clone(q.entries)
	for i := range out {
		out[i].Position = uint32(i + 1)
	}
	return out
}

// loadQueue rebuilds sess's queue: the projection's list, brought up to
// date with the queue records after the log position it reflects (all of
// them when there is no projection).
func loadQueue(ctx context.Context, sess *session) error {
	q := promptQueue{entries: slices.Clone(sess.meta.Info.Queue), held: sess.meta.Info.QueueHeld}
	for r, err := range eventlog.Replay(ctx, sess.svc.js, events.StreamLog, events.QueueSubjects(sess.ns, sess.sid), sess.meta.LogPosition) {
		if err != nil {
			return events.Errorf(events.CodeUnavailable, "read the queue of %s: %v", sess.sid, err)
		}
		if q.entries, err = sessionstate.ApplyQueue(q.entries, r); err != nil {
			sess.lg.Warn("a queue record that does not decode", events.LogKeyErr, err)
		}
	}
	if len(q.entries) == 0 {
		q.held = false
	}
	sess.prompts = q
	return nil
}

// hashOf is contentHash of a content array.
func hashOf(content events.JSON) string {
	var blocks []json.RawMessage
	_ = json.Unmarshal(content, &blocks)
	return contentHash(blocks)
}

// queueRecord is a record of queue entry qid, on its own subject.
func queueRecord(sess *session, qid string, v events.Variant, hdr nats.Header) eventlog.Entry {
	return eventlog.Entry{Kind: events.LogControl, Subject: events.QueueSubject(sess.ns, sess.sid, qid), Value: v, Header: hdr}
}

// enqueue puts req, a prompt sent with queue, at the end of sess's queue
// and answers where it is. The same keyed prompt sent again gets its
// entry's answer. Called under sess.mu.
func enqueue(ctx context.Context, sess *session, req *events.AcpPromptRequest, blocks []json.RawMessage, hash string) (*events.PromptAccepted, error) {
	q := &sess.prompts
	if req.IdempotencyKey != nil {
		if i := q.keyed(*req.IdempotencyKey); i >= 0 {
			if hashOf(q.entries[i].Content) != hash {
				return nil, idempotencyConflict(*req.IdempotencyKey)
			}
			return queuedAnswer(sess, q.entries[i].ID), nil
		}
	}
	if err := checkBudget(ctx, sess); err != nil {
		return nil, err // it could not start anyway
	}
	if len(q.entries) >= sess.svc.cfg.MaxQueued {
		return nil, events.Errorf(events.CodePayloadTooLarge, "session %s has %d prompts queued, the most it holds (session.max-queued)", sess.sid, len(q.entries))
	}
	if len(blocks) >= events.MaxPromptBlocks {
		// Its start appends its blocks and its PromptDequeued in one batch.
		return nil, events.Errorf(events.CodePayloadTooLarge, "a queued prompt has at most %d blocks, this one %d", events.MaxPromptBlocks-1, len(blocks))
	}
	e := events.QueuedPrompt{ID: "q_" + nuid.Next(), Content: req.Content, Principal: principal(ctx), IdempotencyKey: req.IdempotencyKey}
	rec := &events.PromptQueued{QueueID: e.ID, Position: uint32(len(q.entries) + 1), Content: e.Content, ContentHash: hash,
		IdempotencyKey: e.IdempotencyKey, Status: sess.status()}
	if _, err := sess.append(ctx, ioPos{}, queueRecord(sess, e.ID, rec, principalHeader(e.Principal))); err != nil {
		return nil, err
	}
	e.QueuedAt = time.Now().UTC().Format(events.TimestampFormat)
	q.entries = append(q.entries, e)
	sess.svc.m.queued.Inc()
	sess.project(ctx)
	return queuedAnswer(sess, e.ID), nil
}

// queuedAnswer is a prompt's answer for waiting entry qid.
func queuedAnswer(sess *session, qid string) *events.PromptAccepted {
	return &events.PromptAccepted{SessionID: string(sess.sid), Queued: &events.QueueChange{ID: qid, Position: uint32(sess.prompts.index(qid) + 1)}}
}

// withdraw takes entry qid out of sess's queue before it starts. An entry
// that already left the queue is prompt_dequeued; one the session never
// had, not_queued. Called under sess.mu.
func withdraw(ctx context.Context, sess *session, qid string) error {
	if err := sess.loadExisting(ctx); err != nil {
		return err
	}
	q := &sess.prompts
	if q.index(qid) < 0 {
		last, err := eventlog.Last(ctx, sess.svc.js, events.StreamLog, events.QueueSubject(sess.ns, sess.sid, qid))
		if err != nil {
			return events.Errorf(events.CodeUnavailable, "read queue entry %s: %v", qid, err)
		}
		if last == nil {
			return events.Errorf(events.CodeNotQueued, "session %s has no queue entry %s", sess.sid, qid)
		}
		why := "left the queue"
		if d, err := events.Decode[events.PromptDequeued](last.Data); err == nil {
			why = d.Reason
			if d.TurnID != "" {
				why += " as turn " + d.TurnID
			}
		}
		return events.Errorf(events.CodePromptDequeued, "queue entry %s of session %s already %s", qid, sess.sid, why)
	}
	q.remove(qid)
	rec := &events.PromptDequeued{QueueID: qid, Reason: events.DequeueWithdrawn, Status: sess.status()}
	if _, err := sess.append(ctx, ioPos{}, queueRecord(sess, qid, rec, principalHeader(principal(ctx)))); err != nil {
		return err
	}
	sess.svc.m.dequeued.WithLabelValues(events.DequeueWithdrawn).Inc()
	sess.project(ctx)
	return nil
}

// kickQueue starts the queue's next entry soon, in a goroutine of its own:
// its caller holds sess.mu, and is ending a turn or a drain.
func kickQueue(sess *session) {
	if !sess.prompts.ready() {
		return
	}
	sess.svc.life.afterFunc(0, func(ctx context.Context) {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		startQueued(ctx, sess)
	})
}

// startQueued starts the queue's next entry as a turn, if the session is
// loaded here, idle and not draining a cancelled prompt, and its queue is
// ready. An entry that cannot start (its agent cannot be attached, say) is
// dequeued failed, and what follows it goes on, or is held, as after a
// failed turn. Called under sess.mu.
func startQueued(ctx context.Context, sess *session) {
	q := &sess.prompts
	for sess.loaded && sess.opened != nil && sess.turn == nil && sess.held == nil && q.ready() {
		if r := sess.adapter; r != nil && r.drain != nil {
			return // endDrain kicks the queue again
		}
		e := q.entries[0]
		var blocks []json.RawMessage
		err := json.Unmarshal(e.Content, &blocks)
		if err == nil {
			_, err = start(ctx, sess, turnStart{key: e.IdempotencyKey, hash: contentHash(blocks), blocks: blocks, content: e.Content, principal: e.Principal, from: e.ID})
		}
		if err == nil || !sess.loaded {
			return // started; or an append failed and released the session
		}
		q.remove(e.ID)
		q.afterTurn(sess.svc.cfg.QueueOnFailure, events.OutcomeFailed)
		rec := &events.PromptDequeued{QueueID: e.ID, Reason: events.DequeueFailed, Error: events.AsError(err).Response(), Status: sess.status()}
		var hdr nats.Header
		if q.ready() {
			hdr = queueNextHeader(nil)
		}
		entry := queueRecord(sess, e.ID, rec, hdr)
		sess.lg.Warn("a queued prompt could not start", "queue_id", e.ID, events.LogKeyErr, err)
		sess.svc.m.dequeued.WithLabelValues(events.DequeueFailed).Inc()
		if _, err := sess.append(ctx, ioPos{}, entry); err != nil {
			return
		}
		sess.project(ctx)
	}
}

// queueNextHeader adds HeaderQueueNext to hdr (nil: a new header).
func queueNextHeader(hdr nats.Header) nats.Header {
	if hdr == nil {
		hdr = nats.Header{}
	}
	hdr.Set(events.HeaderQueueNext, "1")
	return hdr
}
