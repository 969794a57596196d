package session_test

import (
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

func (h *rig) deleteSession(t *testing.T, sid string) {
	t.Helper()
	if _, err := events.Call[events.AcpDeleteSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpDeleteSession),
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
