package turnwait

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/tail"
)

// Waiting for a turn is a read of the log, never a held request (DESIGN
// invariant 7). The prompt operation answers as soon as the turn is
// accepted (events.PromptAccepted); whoever wants the turn's outcome then
// reads the session's control records after the accepting one until the
// turn's TurnFinished. Whichever session service replica ends the turn,
// and however many die meanwhile, the record lands in the same log, so
// the wait survives the restart of any service.
//
// The wait reads a live tail (package tail): it subscribes to the
// stream's RePublish of the session's control subjects,
// acp.tail.<ns>.<sid>.ctl and acp.tail.<ns>.<sid>.key.* (a keyed prompt's
// TurnFinished is on its key's subject), reads them back from the log
// after the accepting record, then follows them, a Chain each, deduped by
// sequence and with gaps read back.
//
// While JetStream's store is full, a turn's end may not be recordable:
// its owner then ends the turn all the same and, until the store takes
// the record, publishes TurnEndUnrecorded on events.EndNoticeSubject every
// few seconds (services/session, storagefull.go). The wait subscribes to
// that too, and takes the notice for its turn as the turn's end.
//
// The turn ends at the TurnFinished whose TurnID is the accepted one. A
// SessionDeleted after the acceptance ends the wait with
// session_not_found: the deletion purged what the turn left.
//
// A record may be lost in transit with nothing after it to say so (a
// reconnect, a message the library dropped, a leader that died between
// storing and republishing). After a reconnect or a drop the wait reads
// both subjects to their end at once; and every awaitRereadInterval it
// reads them again regardless. A wait therefore costs one subscription per
// subject and O(control records after the acceptance) reads, plus two
// empty reads per interval.

// awaitRereadInterval is how often a waiting reader reads the log again in
// case the live subscription dropped the record it waits for.
const awaitRereadInterval = 2 * time.Second

// DefaultAcceptTimeout bounds Prompt's request for the acceptance of a
// turn (not the wait for its end).
const DefaultAcceptTimeout = 2 * time.Minute

// awaitPending is the live channel's capacity. Control records are few
// (one TurnFinished per turn, a handful of lifecycle records); an overflow
// is dropped by the client library and found by the next read.
const awaitPending = 64

// Await blocks until the turn acc accepted is finished in the session's
// log and returns its TurnFinished. When acc.Finished is set (a keyed
// retry of a turn that already ended) it returns that without reading.
//
// The wait has no deadline of its own: ctx bounds it, and its end returns
// ctx's cause. A SessionDeleted after the acceptance, without the turn's
// TurnFinished before it, is CodeSessionNotFound. Transient read failures
// (a timeout, a reconnect) are retried at the next interval; other read
// failures are returned.
func Await(ctx context.Context, js jetstream.JetStream, ns events.Namespace, sid events.SessionID, acc *events.PromptAccepted) (*events.TurnFinished, error) {
	if acc == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "await turn: no acceptance")
	}
	if acc.Finished != nil {
		return acc.Finished, nil
	}
	if !ns.Valid() {
		return nil, events.Errorf(events.CodeInvalidNamespace, "await turn: namespace %q is not valid", ns)
	}
	if !sid.Valid() {
		return nil, events.Errorf(events.CodeInvalidSessionID, "await turn: session ID %q is not valid", sid)
	}
	if acc.TurnID == "" || acc.Sequence == 0 {
		return nil, events.Errorf(events.CodeInvalidPayload, "await turn: acceptance without a turn ID or a sequence")
	}
	w := &turnWaiter{sid: sid, turnID: acc.TurnID, accepted: acc.Sequence}

	// Subscribe before any read. The control subject says when the session
	// is deleted, and carries the finish of a turn without a key; a keyed
	// turn's finish is on the key subjects (acc.Keyed nil: either). No
	// flush is needed before the read: the server handles one connection's
	// protocol in order, so the subscriptions exist before the read's
	// request arrives, and a record stored after the read looked is
	// delivered live.
	ctlTail := events.TailSubject(ns, sid, events.LogControl)
	notices := events.EndNoticeSubject(ns, sid)
	subjects := []string{ctlTail, notices, tailKeyFilter(ns, sid)}
	chains := []*tail.Chain{tail.NewChain(js, events.StreamLog, events.LogSubject(ns, sid, events.LogControl), acc.Sequence)}
	if acc.Keyed != nil && !*acc.Keyed {
		subjects = subjects[:2]
	} else {
		// One chain for every key subject: a keyed record whose
		// predecessor on its own subject is past the chain's place proves
		// a record of the filter missed all the same.
		chains = append(chains, tail.NewChain(js, events.StreamLog, keyFilter(ns, sid), acc.Sequence))
	}
	sub, err := tail.Open(js.Conn(), awaitPending, subjects...)
	if err != nil {
		return nil, fmt.Errorf("await turn %s: %w", acc.TurnID, err)
	}
	defer sub.Stop()

	tr := traceOf(ctx)
	if f, err := w.read(ctx, chains); f != nil || err != nil {
		return tr.found(f, err, foundByRead)
	}
	tr.onAwaitFirstRead()

	tick := time.NewTicker(awaitRereadInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("await turn %s: %w", acc.TurnID, context.Cause(ctx))
		case <-sub.Reconnected():
			if f, err := w.read(ctx, chains); f != nil || err != nil {
				return tr.found(f, err, foundByRead)
			}
		case <-tick.C:
			if f, err := w.read(ctx, chains); f != nil || err != nil {
				return tr.found(f, err, foundByRead)
			}
		case m := <-sub.Messages():
			if sub.Lost() > 0 {
				// What was lost came before m: read it back first.
				if f, err := w.read(ctx, chains); f != nil || err != nil {
					return tr.found(f, err, foundByRead)
				}
			}
			if m.Subject == notices {
				if f := w.notice(m); f != nil {
					return tr.found(f, nil, foundNotice)
				}
				continue
			}
			chain := chains[0]
			if m.Subject != ctlTail {
				if len(chains) == 1 {
					continue
				}
				chain = chains[1]
			}
			how := foundLive
			if _, a := chain.Decide(m); a == tail.Fill {
				how = foundByRead // what it fills is read back, and m with it
			}
			if f, err := w.done(ctx, chain.Offer(ctx, m, w.deliver)); f != nil || err != nil {
				return tr.found(f, err, how)
			}
		}
	}
}

// How a wait found its end, for its trace (export_test.go).
const (
	foundByRead = "read"
	foundLive   = "live"
	foundNotice = "notice"
)

// found returns a wait's end, telling the trace how it was found.
func (t *trace) found(f *events.TurnFinished, err error, how string) (*events.TurnFinished, error) {
	t.onAwaitFound(how)
	return f, err
}

// Prompt sends req to acp.api.<ns>.prompt and, once the turn is accepted,
// waits for it (Await): the helper for Go callers on NATS. It returns
// the turn's result (TurnFinished.Result): the AcpPromptResponse of a turn
// that completed or was cancelled, the turn's error otherwise. A refusal
// (session_busy, idempotency_conflict, ...) is returned as the service
// answered it.
//
// The request for the acceptance is bounded by DefaultAcceptTimeout, or
// ctx's deadline when that comes first: accepting may restore an unloaded
// session, but a replica that died holding the request must not hold the
// caller. Whether a prompt whose acceptance timed out was accepted is
// unknown; retry it with the same idempotency key to find out. The wait
// for the turn is bounded by ctx only.
func Prompt(ctx context.Context, js jetstream.JetStream, ns events.Namespace, req *events.AcpPromptRequest) (*events.AcpPromptResponse, error) {
	if req == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "prompt: nil request")
	}
	sid, err := events.OptionalSessionID(req.SessionID)
	if err != nil {
		return nil, err
	}
	if !ns.Valid() {
		return nil, events.Errorf(events.CodeInvalidNamespace, "namespace %q must match [a-z0-9][a-z0-9_-]{0,62}", ns)
	}
	actx, cancel := context.WithTimeout(ctx, DefaultAcceptTimeout)
	acc, err := Accept(actx, js.Conn(), ns, req)
	cancel()
	if err != nil {
		return nil, err
	}
	if acc.Queued != nil {
		// Sent with queue behind a running turn: its own turn starts
		// once the turns before it end.
		if acc, err = AwaitStart(ctx, js, ns, sid, acc.Queued.ID); err != nil {
			return nil, err
		}
	}
	f, err := Await(ctx, js, ns, sid, acc)
	if err != nil {
		return nil, err
	}
	return Result(ctx, js, ns, sid, f)
}

// Result is the prompt's answer once its turn finished with f: the
// protocol's AcpPromptResponse, or the turn's error. The message is the
// turn's last completed agent message in its public form, exactly as
// history shows it (eventjson.Durable), read from its record: the
// envelope (sessionId, sequence, eventNo, timestamp) is Skein's, never
// what the agent wrote into the update. A message whose record retention
// pruned is left out, and so is one of a turn that sent none.
func Result(ctx context.Context, js jetstream.JetStream, ns events.Namespace, sid events.SessionID, f *events.TurnFinished) (*events.AcpPromptResponse, error) {
	if e := f.Failure(); e != nil {
		return nil, &events.Error{Code: events.Code(e.Code), Message: e.Message}
	}
	resp := &events.AcpPromptResponse{SessionID: string(sid), StopReason: f.StopReason}
	if f.MessageSeq == 0 {
		return resp, nil // the turn sent no message
	}
	rec, err := messageAt(ctx, js, f.MessageSeq)
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "read the message of turn %s: %v", f.TurnID, err)
	}
	if rec == nil || rec.Subject != events.LogSubject(ns, sid, events.LogEvents) {
		return resp, nil
	}
	entry, err := eventlog.HistoryEntry(sid, rec.Sequence, rec.Time, rec.Header, rec.Data)
	if err != nil {
		return nil, err
	}
	msg, err := eventjson.Durable(entry)
	if err != nil {
		return nil, err
	}
	resp.Message = msg
	return resp, nil
}

// messageLag bounds how long a turn's message is looked for when a read
// finds nothing at its sequence: a direct get may be answered by a
// replica still catching up (after a partition, TestClusterPartitions
// saw one answer a completed turn without its message), while the
// record, older than the TurnFinished that names it, is stored. One that
// retention pruned is never found: the answer goes without it then.
const messageLag = 2 * time.Second

// messageAt reads the record at seq, looking again for up to messageLag
// while no replica that answers has it.
func messageAt(ctx context.Context, js jetstream.JetStream, seq uint64) (*eventlog.Record, error) {
	deadline := time.Now().Add(messageLag)
	for {
		rec, err := eventlog.At(ctx, js, events.StreamLog, seq)
		if err != nil || rec != nil || time.Now().After(deadline) {
			return rec, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Accept sends req to acp.api.<ns>.prompt and returns its acceptance: the
// first half of Prompt, for callers that wait for the turn themselves
// (the gateway). ctx bounds it.
//
// A prompt with an idempotency key is safe to send again: the session
// service joins the turn it already accepted, or answers the stored outcome
// of one that ended. So when no answer comes — the replica that took the
// request died before answering, or none serves yet — a keyed prompt is
// sent again, each attempt bounded by AcceptAttempt, until ctx ends: a
// caller in flight across a session service's kill -9 gets its turn. A
// prompt without a key is sent once; if its answer is lost, whether it was
// accepted is unknown (timeout).
func Accept(ctx context.Context, nc *nats.Conn, ns events.Namespace, req *events.AcpPromptRequest) (*events.PromptAccepted, error) {
	return AcceptWith(ctx, nc, ns, req, nil)
}

// AcceptWith is Accept with the request's headers hdr: the gateway names
// the principal it authenticated (events.HeaderPrincipal).
func AcceptWith(ctx context.Context, nc *nats.Conn, ns events.Namespace, req *events.AcpPromptRequest, hdr nats.Header) (*events.PromptAccepted, error) {
	subject := events.APISubject(ns, events.OpPrompt)
	if req.IdempotencyKey == nil {
		return rpc.Call[events.PromptAccepted](ctx, nc, subject, req, hdr)
	}
	// Unavailable (none serves yet, or the replica is stopping) and
	// write_conflict (the session moved between replicas) say to retry.
	return rpc.CallAgain[events.PromptAccepted](ctx, nc, subject, req, hdr, AcceptAttempt, events.CodeUnavailable, events.CodeWriteConflict)
}

// AcceptAttempt bounds one attempt of a keyed prompt's acceptance: longer
// than an acceptance takes without a restore, short enough that a replica
// that died holding the request costs the caller little. An attempt cut
// short while a restore runs is harmless: the next joins the same turn.
const AcceptAttempt = 5 * time.Second

// turnWaiter is the state of one Await: the turn it waits for, and,
// once a record ends the wait, how.
type turnWaiter struct {
	sid      events.SessionID
	turnID   string
	accepted uint64 // the accepting record's sequence

	finished *events.TurnFinished
	err      error
}

// errEnded stops a chain's delivery at the record that ends the wait.
var errEnded = errors.New("the wait ended")

// deliver checks one record of the chains, ending the delivery at the
// turn's end.
func (w *turnWaiter) deliver(r *tail.Record) error {
	w.finished, w.err = w.check(r.Header, r.Sequence, r.Data)
	if w.finished != nil || w.err != nil {
		return errEnded
	}
	return nil
}

// read reads every chain to the log's end, and returns the turn's end if
// it is there. A transient failure returns nothing: the next interval
// reads again.
func (w *turnWaiter) read(ctx context.Context, chains []*tail.Chain) (*events.TurnFinished, error) {
	for _, c := range chains {
		if f, err := w.done(ctx, c.CatchUp(ctx, 0, w.deliver)); f != nil || err != nil {
			return f, err
		}
	}
	return nil, nil
}

// done returns the turn's end after a chain's delivery returned err.
func (w *turnWaiter) done(ctx context.Context, err error) (*events.TurnFinished, error) {
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, errEnded):
		return w.finished, w.err
	case ctx.Err() != nil:
		return nil, fmt.Errorf("await turn %s: %w", w.turnID, context.Cause(ctx))
	case transient(err):
		return nil, nil
	}
	return nil, fmt.Errorf("await turn %s: %w", w.turnID, err)
}

// check returns the turn's TurnFinished when the record at seq is it, or
// CodeSessionNotFound when it is the session's deletion. Records up to the
// acceptance, and other records, are neither.
func (w *turnWaiter) check(hdr nats.Header, seq uint64, data []byte) (*events.TurnFinished, error) {
	switch hdr.Get(events.HeaderRecord) {
	case events.RecordTurnFinished:
		if id := hdr.Get(events.HeaderTurnID); id != "" && id != w.turnID {
			return nil, nil // another turn's, named without decoding
		}
		f, err := events.Decode[events.TurnFinished](data)
		if err != nil {
			return nil, fmt.Errorf("await turn %s: record %d: %w", w.turnID, seq, err)
		}
		if f.TurnID != w.turnID {
			return nil, nil
		}
		return f, nil
	case events.RecordSessionDeleted:
		if seq <= w.accepted {
			return nil, nil // an earlier life of the session ID, republished late
		}
		return nil, events.Errorf(events.CodeSessionNotFound, "session %s was deleted before turn %s finished", w.sid, w.turnID)
	}
	return nil, nil
}

// notice returns the turn's end a TurnEndUnrecorded of its owner says,
// when m is one for the awaited turn: the TurnFinished the owner holds
// for a full store to take, as the log will have it once it does.
func (w *turnWaiter) notice(m *nats.Msg) *events.TurnFinished {
	if m.Header.Get(events.HeaderRecord) != events.RecordTurnEndUnrecorded {
		return nil
	}
	n, err := events.Decode[events.TurnEndUnrecorded](m.Data)
	if err != nil || n.TurnID != w.turnID {
		return nil
	}
	return &events.TurnFinished{TurnID: n.TurnID, Outcome: n.Outcome, Error: n.Error}
}

// keyFilter returns "acp.log.<ns>.<sid>.key.*", every keyed-finish subject
// of the session (events.KeySubject).
func keyFilter(ns events.Namespace, sid events.SessionID) string {
	return events.LogSubject(ns, sid, "key") + ".*"
}

// tailKeyFilter is keyFilter's RePublish: "acp.tail.<ns>.<sid>.key.*".
func tailKeyFilter(ns events.Namespace, sid events.SessionID) string {
	return events.TailSubject(ns, sid, "key") + ".*"
}

// transient reports a read failure worth retrying at the next interval: a
// timeout, no responder (a stream leader changing), a reconnect.
func transient(err error) bool {
	return eventlog.Transient(err)
}
