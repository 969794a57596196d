package session

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/tail"
)

// session is one session's state, derived from its log. Every field is
// guarded by mu; the IO consumer and the API handlers take it in turn.
// Which state the fields put it in, and what moves it, is state.go.
type session struct {
	svc *Service
	ns  events.Namespace
	sid events.SessionID
	lg  *slog.Logger

	// lease is the revision of this replica's owner lease on the session
	// in ACP_OWNERS, 0 when it holds none. It is set under mu and renewed
	// without it (atomically).
	lease atomic.Uint64

	mu sync.Mutex
	// checked is the state the session was in when its last move was
	// checked (state.go).
	checked   state
	loaded    bool
	w         *eventlog.Writer
	opened    *events.SessionOpened // nil: no such session
	createdAt time.Time
	updatedAt time.Time
	adapter   *route   // nil: no adapter attached
	turn      *turn    // nil: idle
	held      *heldEnd // a turn's end the full store refused (storagefull.go)
	buf       coalescer
	pending   []eventlog.Entry         // queued adapter output, see queue
	failure   *events.AcpErrorResponse // the last turn's error, while the session is failed
	preamble  string                   // armed by a fallback restore for the next prompt only
	last      *finishedTurn            // the last turn that ended here
	meta      events.SessionMeta
	metaRev   uint64 // the ACP_SESSIONS revision of meta, as last read or written here (0: none)

	// title is the session's title ("": none yet) and titleSource where it
	// came from (events.Title*), as its newest TitleChanged says (title.go).
	title       string
	titleSource string

	// forked is the session's SessionForked record, nil unless it is a
	// fork (fork.go).
	forked *events.SessionForked

	// budget is the session's cap and spend, as its newest BudgetChanged
	// says (budget.go).
	budget events.BudgetChanged

	// resolved remembers, for recently resolved permission requests, what
	// resolved them (bounded by maxResolved, oldest first out).
	resolved      map[string]resolution
	resolvedOrder []string

	// late are the requests the agent raised outside any turn, waiting
	// for a person (waiting.go).
	late waiting

	// prompts is the prompt queue: what waits to run (queue.go).
	prompts promptQueue

	// projectionStale: the last projection could not be written (a
	// KV_ACP_SESSIONS election, say); the sweep writes it again.
	projectionStale bool
}

// route is the attached adapter, and the path of its output: it follows
// the session's ACP_IO, orders its process's records and applies them to
// its session (io.go, ioorder.go). Its methods run under sess.mu; the
// callbacks take it (onTail, gapTimedOut, evictDrained).
type route struct {
	sess         *session
	runner       events.RunnerID
	processID    string
	acpSessionID string
	sub          *nats.Subscription // the session's IOTailSubject
	// ioTail is the owner's place in the session's ACP_IO: the one
	// live-tail reader (package tail) delivers each record once, in
	// stream order, gaps read back from the stream, to io.
	ioTail *tail.Chain
	// io orders the records of processID: it knows how far ACP_IO was
	// applied, and holds what waits behind a gap (ioorder.go).
	io         *ioApplier
	gap        *gapWait // the wait for missing records (nil when none is held)
	drain      *drain   // a turn that ended before the adapter answered it
	attachedAt time.Time
	arrived    time.Time    // when the owner last received a record of the session off the live tail
	received   time.Time    // when the record being applied reached this replica, for acp_session_live_delta_seconds
	owed       []owedAnswer // answers its edge runner has not taken yet (owed.go)
	foreigners sync.Map     // runners whose records for the session it dropped (foreign)
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
	if err := sess.svc.keep(sess); err != nil {
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
	sess.moved(onLoad)
	kickQueue(sess) // an owner that died between a turn's end and the next
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
	sess.w.OnPruneError(func(err error) { sess.lg.Warn("history over its byte cap not pruned", events.LogKeyErr, err) })
	if last != nil {
		opened, err := sess.svc.logOf(sess.ns, sess.sid).opened(ctx)
		if err != nil {
			return events.Errorf(events.CodeUnavailable, "read log of %s: %v", sess.sid, err)
		}
		if opened != nil && last.Header.Get(events.HeaderRecord) != events.RecordSessionDeleted {
			if o, err := events.Decode[events.SessionOpened](opened.Data); err == nil {
				sess.opened = o
				sess.createdAt = opened.Time
			}
		}

		sess.updatedAt = last.Time
		if sess.opened != nil {
			if sess.title, sess.titleSource, err = sess.svc.logOf(sess.ns, sess.sid).title(ctx, opened.Sequence); err != nil {
				return err
			}
			if sess.forked, err = sess.svc.logOf(sess.ns, sess.sid).forked(ctx, opened.Sequence); err != nil {
				return err
			}
			if sess.budget, err = sess.svc.logOf(sess.ns, sess.sid).budget(ctx, opened.Sequence); err != nil {
				return err
			}
			if err := sess.loadMeta(ctx); err != nil {
				return err
			}
			if err := loadQueue(ctx, sess); err != nil {
				return err
			}
			if err := sess.fence(ctx, last); err != nil {
				return err
			}
		}
		if err := sess.reconcile(ctx, last); err != nil {
			return err
		}
		if sess.opened != nil {
			sess.adoptLate(ctx)
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
	if id, start, ok, err := eventlog.OpenTurn(last); err != nil {
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

// reconcile closes a turn that an earlier owner accepted and never finished:
// nothing proves the adapter received it, and Skein never replays a prompt.
// The turn is open when the newest record belongs to a turn and is not the
// record that finished it. Its finish carries the acceptance's idempotency
// key and content hash (so a keyed retry gets this outcome, not a new
// turn), and its pending permission requests become terminal.
func (sess *session) reconcile(ctx context.Context, last *eventlog.Record) error {
	turnID, start, open, err := eventlog.OpenTurn(last)
	if !open {
		return err
	}
	recs, err := sess.svc.logOf(sess.ns, sess.sid).records(ctx, start, last.Sequence)
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
	unanswered := openRequests(sess.lg, recs)
	entries := unanswered.terminals(events.ReasonTurnFailed)
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
	if sess.prompts.goesOn(sess.svc.cfg.QueueOnFailure, events.OutcomeFailed) {
		queueNextHeader(entries[len(entries)-1].Header)
	}
	sess.prompts.afterTurn(sess.svc.cfg.QueueOnFailure, events.OutcomeFailed)
	if _, err := sess.append(ctx, ioPos{}, entries...); err != nil {
		return err
	}
	sess.resolveAll(&unanswered, events.ReasonTurnFailed)
	sess.failure = events.ErrDeliveryUncertain.Response()
	// The projection still says what the earlier owner last wrote: the
	// turn running. Listing reads it, so it says failed now, as reading
	// the session does, not whenever the session next changes.
	sess.project(ctx)
	return nil
}

// release drops the session from this replica, because of err (nil: it
// was idle): the IO consumer stops, the state is forgotten and the owner
// lease given up. The adapter keeps running, and an open turn stays open in
// the log: the next owner takes it over or closes it. Whoever waits for
// the turn reads the log, so nothing here answers them.
func (sess *session) release(err error) {
	if err != nil && sess.turn != nil {
		sess.lg.Info("leaving an open turn to the next owner", events.LogKeyTurn, sess.turn.id, events.LogKeyErr, err)
	}
	sess.detach()
	if sess.turn != nil {
		sess.turn.setStalled(sess.svc.m, false) // this replica's count
	}
	sess.turn = nil
	sess.held.drop(sess) // the next owner closes the turn the log has open
	sess.pending = nil
	sess.loaded = false
	sess.moved(onRelease)
	sess.releaseLease()
	sess.svc.forget(sess)
}
