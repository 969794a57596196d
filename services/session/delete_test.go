package session_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

func (h *rig) deleteSession(t *testing.T, sid string) {
	t.Helper()
	if _, err := rpc.Call[events.AcpDeleteSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpDeleteSession),
		&events.AcpDeleteSessionRequest{SessionID: &sid}, nil); err != nil {
		t.Fatalf("delete %s: %v", sid, err)
	}
}

// Deleting tears the runtime down, removes history and metadata, leaves a
// tombstone no stale writer gets past, and is idempotent; reopening the ID
// starts a new, empty session.
func TestDelete(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "d1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "d1", "", "say before"); err != nil {
		t.Fatal(err)
	}
	pos, _, err := eventlog.LoadPosition(ctx, h.js, "default", "d1")
	if err != nil {
		t.Fatal(err)
	}
	h.deleteSession(t, "d1")
	h.deleteSession(t, "d1") // idempotent
	h.deleteSession(t, "never-existed")

	if _, err := h.prompt(ctx, "d1", "", "say after"); code(err) != events.CodeSessionNotFound {
		t.Errorf("prompt after delete = %v, want %s", err, events.CodeSessionNotFound)
	}
	kv, err := h.js.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, events.SessionKey("default", "d1")); err == nil {
		t.Errorf("the session's metadata survived its deletion")
	}
	log, _ := h.readLog(t, "d1")
	if len(log.Records) != 1 || log.Records[0].Header.Get(events.HeaderRecord) != "SessionDeleted" {
		t.Fatalf("after delete the log holds %d records, want only the tombstone", len(log.Records))
	}
	// A writer that still believes the log ends where it did fails.
	stale := eventlog.NewWriter(h.js, "default", "d1", pos, "stale")
	if _, err := stale.Append(ctx, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test"}}); code(err) != events.CodeWriteConflict {
		t.Errorf("stale append after delete = %v, want %s", err, events.CodeWriteConflict)
	}
	fresh := eventlog.NewWriter(h.js, "default", "d1", eventlog.Position{}, "zombie")
	if _, err := fresh.Append(ctx, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test"}}); code(err) != events.CodeWriteConflict {
		t.Errorf("a writer expecting an empty log after delete = %v, want %s", err, events.CodeWriteConflict)
	}

	if err := h.open(t, "d1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	res, err := h.prompt(ctx, "d1", "", "say anew")
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Message) == "" {
		t.Errorf("prompt in the reopened session answered nothing")
	}
	log, evs := h.readLog(t, "d1")
	if len(log.Turns) != 1 || eventlog.EventNo(log.Events[0]) != 1 {
		t.Errorf("reopened session has %d turns, first eventNo %d; want a new, empty session", len(log.Turns), eventlog.EventNo(log.Events[0]))
	}
	for _, e := range evs {
		if e.upd != nil && e.upd.Content.Text == "before" {
			t.Errorf("the deleted session's history is back")
		}
	}
}

// A delete during a turn cancels it, and a permission response that loses
// to the delete is told so.
func TestDeleteRacesTurnAndResponse(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "d2", events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "d2", "", "permission call_1 allow_once=yes\nsay after")
	_, req, err := h.waitPermissionRequest(ctx, "d2", 0)
	if err != nil {
		t.Fatal(err)
	}
	h.deleteSession(t, "d2")
	r := <-done
	if r.err != nil || r.res.StopReason != "cancelled" {
		t.Errorf("prompt during delete = %+v, %v, want stopReason cancelled", r.res, r.err)
	}
	resp, err := h.respondPermission(ctx, "d2", req.RequestID, "yes")
	if err != nil || resp.Status != events.PermissionNotPending || resp.Reason == nil || *resp.Reason != events.ReasonSessionDeleted {
		t.Errorf("response after delete = %+v, %v, want not_pending/session_deleted", resp, err)
	}

	// And a delete while the agent works on a turn (paused) ends it too.
	if err := h.open(t, "d3", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	done = h.promptAsync(ctx, "d3", "", "pause del\nsay late")
	if err := testagent.WaitPaused(ctx, h.control, "del"); err != nil {
		t.Fatal(err)
	}
	h.deleteSession(t, "d3")
	if r := <-done; r.err != nil || r.res.StopReason != "cancelled" {
		t.Errorf("prompt during delete = %+v, %v, want stopReason cancelled", r.res, r.err)
	}
}

// delete is deleteSession for the loops of parallelLoops.
func (h *harness) delete(ctx context.Context, sid string) error {
	_, err := rpc.Call[events.AcpDeleteSessionResponse](ctx, h.nc, events.APISubject("default", events.OpDeleteSession),
		&events.AcpDeleteSessionRequest{SessionID: &sid}, nil)
	return err
}

// tailRecorder keeps every record stored on a session's log, as the
// stream's RePublish delivers it (acp.tail): a delete purges what the log
// held, so what the race left must be caught as it is written.
type tailRecorder struct {
	ch   chan *nats.Msg
	subs []*nats.Subscription
	last map[string]uint64 // per log subject, the last sequence seen
}

func (h *harness) recordTail(sid string) (*tailRecorder, error) {
	r := &tailRecorder{ch: make(chan *nats.Msg, 4096), last: map[string]uint64{}}
	// The session's SessionOpened is on a subject of its own.
	opened := strings.Replace(events.OpenedSubject("default", events.SessionID(sid)), "acp.log.", "acp.tail.", 1)
	for _, subj := range []string{events.TailSubject("default", events.SessionID(sid), events.LogEvents), events.TailSubject("default", events.SessionID(sid), events.LogControl), opened} {
		sub, err := h.nc.ChanSubscribe(subj, r.ch)
		if err != nil {
			r.stop()
			return nil, err
		}
		r.subs = append(r.subs, sub)
	}
	return r, h.nc.Flush()
}

func (r *tailRecorder) stop() {
	for _, s := range r.subs {
		_ = s.Unsubscribe()
	}
}

// until returns the records stored from now on, in stream order, up to and
// including the first whose Acp-Record is record. A record the tail
// dropped (Nats-Last-Sequence names one not seen) is an error: the caller
// could not tell the log's story.
func (r *tailRecorder) until(ctx context.Context, record string) ([]*eventlog.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, testutil.PollTimeout)
	defer cancel()
	var out []*eventlog.Record
	for {
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("waiting for %s on the tail: %w", record, ctx.Err())
		case m := <-r.ch:
			seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return out, fmt.Errorf("tail record without a sequence: %v", err)
			}
			subject := m.Header.Get(jetstream.SubjectHeader)
			prev, _ := strconv.ParseUint(m.Header.Get(jetstream.LastSequenceHeader), 10, 64)
			if seen, ok := r.last[subject]; ok && prev != seen {
				return out, fmt.Errorf("the tail of %s skipped from %d to %d (its record says %d)", subject, seen, seq, prev)
			}
			r.last[subject] = seq
			out = append(out, &eventlog.Record{Subject: subject, Sequence: seq, Header: m.Header, Data: m.Data})
			if m.Header.Get(events.HeaderRecord) == record {
				slices.SortFunc(out, func(a, b *eventlog.Record) int { return cmp.Compare(a.Sequence, b.Sequence) })
				return out, nil
			}
		}
	}
}

// delete_session against respond_permission on a pending ask request, both
// at once, in both launch orders, on several sessions deleted and reopened
// over and over: the log records exactly one resolution of the request
// before the tombstone (the response, accepted, or the deletion's terminal
// response, session_deleted), and every answer agrees with it.
func TestDeleteRacesRespond(t *testing.T) {
	h := startRig(t, session.Config{})
	sids := []string{"dr0", "dr1", "dr2", "dr3"}
	n := iterations(200)
	ctx := t.Context()
	var mu sync.Mutex
	counts := map[string]int{}
	parallelLoops(t, sids, n, func(sid string, i int) error {
		tail, err := h.recordTail(sid)
		if err != nil {
			return err
		}
		defer tail.stop()
		if err := h.open(t, sid, events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
			return fmt.Errorf("open: %w", err)
		}
		done := h.promptAsync(ctx, sid, "", permissionScript)
		_, req, err := h.waitPermissionRequest(ctx, sid, 0)
		if err != nil {
			return err
		}
		var resp *events.AcpRespondPermissionResponse
		var rerr, derr error
		race(i,
			func() { derr = h.delete(ctx, sid) },
			func() { resp, rerr = h.respondPermission(ctx, sid, req.RequestID, "yes") })
		if err := errors.Join(derr, rerr); err != nil {
			return err
		}
		pr := <-done

		// The session's life, as it was written, up to its tombstone.
		recs, err := tail.until(ctx, events.RecordSessionDeleted)
		if err != nil {
			return err
		}
		if first := recs[0].Header.Get(events.HeaderRecord); first != events.RecordSessionOpened {
			return fmt.Errorf("the tail starts with %s, want %s", first, events.RecordSessionOpened)
		}
		log, evs, err := auditRecords(sid, eventlogtest.Group("default", events.SessionID(sid), recs))
		if err != nil {
			return err
		}
		if len(log.Turns) != 1 || log.Turns[0].Finish == nil {
			return fmt.Errorf("%d turns before the tombstone, want 1 finished", len(log.Turns))
		}
		turn := log.Turns[0]
		resps := permissionResponses(evs, req.RequestID)
		if len(resps) != 1 {
			return fmt.Errorf("%d permission responses to %s before the tombstone, want 1", len(resps), req.RequestID)
		}
		logged := resps[0].resp
		switch {
		case logged.Status == events.PermissionAccepted:
			if resp.Status != events.PermissionAccepted {
				return fmt.Errorf("the log accepted the response; respond answered %+v", resp)
			}
			// The deletion cancelled the rest of the turn, or found it done.
			if o := turn.Finish.Outcome; o != events.OutcomeCancelled && o != events.OutcomeCompleted {
				return fmt.Errorf("the response won; the turn ended %s (%+v)", o, turn.Finish.Error)
			}
		case logged.Status == events.PermissionTerminal && logged.Reason != nil && *logged.Reason == events.ReasonSessionDeleted:
			if resp.Status != events.PermissionNotPending || resp.Reason == nil || *resp.Reason != events.ReasonSessionDeleted {
				return fmt.Errorf("the log ended the request session_deleted; respond answered %+v", resp)
			}
			if turn.Finish.Outcome != events.OutcomeCancelled {
				return fmt.Errorf("the deletion won; the turn ended %s", turn.Finish.Outcome)
			}
		default:
			return fmt.Errorf("the log resolved %s with %+v", req.RequestID, logged)
		}
		// The prompt's wait read the turn's end, or, if it read the log
		// only after the purge, the deletion.
		promptSaw := "outcome"
		switch {
		case code(pr.err) == events.CodeSessionNotFound:
			promptSaw = "deleted"
		case pr.err != nil || pr.res.StopReason != turn.Finish.StopReason:
			return fmt.Errorf("prompt = %+v, %v; the turn ended %s/%s", pr.res, pr.err, turn.Finish.Outcome, turn.Finish.StopReason)
		}
		// A late response is told the same.
		late, err := h.respondPermission(ctx, sid, req.RequestID, "no")
		want := events.ReasonAlreadyResolved
		if logged.Status != events.PermissionAccepted {
			want = events.ReasonSessionDeleted
		}
		if err != nil || late.Status != events.PermissionNotPending || late.Reason == nil || *late.Reason != want {
			return fmt.Errorf("late respond = %+v, %v, want not_pending/%s", late, err, want)
		}
		// What stays: the tombstone alone, and no metadata.
		stored, err := eventlogtest.Read(ctx, h.js, "default", events.SessionID(sid))
		if err != nil {
			return err
		}
		if len(stored.Records) != 1 || stored.Records[0].Sequence != recs[len(recs)-1].Sequence {
			return fmt.Errorf("after the delete the log holds %d records, want only the tombstone", len(stored.Records))
		}
		if err := h.noMeta(ctx, sid); err != nil {
			return err
		}
		mu.Lock()
		counts[fmt.Sprintf("%s/%s, prompt saw the %s", logged.Status, turn.Finish.Outcome, promptSaw)]++
		mu.Unlock()
		return nil
	})
	t.Logf("%d races (response in the log / turn outcome): %v", n, counts)
}

// noMeta fails unless sid has no ACP_SESSIONS entry.
func (h *harness) noMeta(ctx context.Context, sid string) error {
	kv, err := h.js.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		return err
	}
	e, err := kv.Get(ctx, events.SessionKey("default", events.SessionID(sid)))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil
	case err != nil:
		return err
	}
	m, err := events.Decode[events.SessionMeta](e.Value())
	if err != nil {
		return fmt.Errorf("%s has metadata (revision %d) that does not decode: %v; want none", sid, e.Revision(), err)
	}
	return fmt.Errorf("%s has metadata (revision %d, log position %d, process %q); want none", sid, e.Revision(), m.LogPosition, m.ProcessID)
}
