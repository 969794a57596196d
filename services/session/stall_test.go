package session_test

import (
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// A running turn whose agent says nothing for session.stall-after is
// stalled (issue 32 §5): recorded in the log (TurnStall), status stalled,
// counted; its agent's next words resume it (TurnStall, not stalled,
// status running), and the turn completes. A turn that waits on a person
// is not stalled, however long the wait.
func TestTurnStalls(t *testing.T) {
	const stallAfter = 300 * time.Millisecond
	h := startRig(t, session.Config{StallAfter: stallAfter, SweepInterval: 50 * time.Millisecond})
	ctx := t.Context()
	if err := h.open(t, "quiet", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	acc, err := h.accept(ctx, "quiet", "", "pause quiet\nsay back again")
	if err != nil {
		t.Fatal(err)
	}
	if err := testagent.WaitPaused(ctx, h.control, "quiet"); err != nil {
		t.Fatal(err)
	}
	status := func(sid string) events.SessionStatus {
		st, err := events.ParseSessionState(h.getSession(t, sid).State)
		if err != nil {
			t.Fatal(err)
		}
		return st.Status
	}
	if err := testutil.Poll(ctx, "the silent turn stalled", func() (bool, error) {
		return status("quiet") == events.StatusStalled, nil
	}); err != nil {
		t.Fatal(err)
	}
	if g := testutil.Metric(t, h.reg, "acp_session_stalled_turns"); g != 1 {
		t.Errorf("stalled turns %v, want 1", g)
	}
	if err := testagent.Release(ctx, h.control, "quiet"); err != nil {
		t.Fatal(err)
	}
	f := (&ioScript{h: h, sid: "quiet", acc: acc}).await(t)
	if f.Outcome != events.OutcomeCompleted {
		t.Fatalf("the turn ended %s (%v), want completed", f.Outcome, f.Error)
	}
	var stalls []bool
	recs, err := h.ctl(ctx, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if s, ok := r.(*events.TurnStall); ok {
			stalls = append(stalls, s.Stalled)
			if s.Stalled && s.QuietMs < stallAfter.Milliseconds() {
				t.Errorf("stalled after %d ms of silence, want at least %v", s.QuietMs, stallAfter)
			}
		}
	}
	if len(stalls) != 2 || !stalls[0] || stalls[1] {
		t.Errorf("TurnStall records %v, want stalled then resumed", stalls)
	}
	if n, g := testutil.Metric(t, h.reg, "acp_session_stalls_total"), testutil.Metric(t, h.reg, "acp_session_stalled_turns"); n != 1 || g != 0 {
		t.Errorf("stalls %v, stalled turns now %v; want 1 and 0", n, g)
	}
	h.readLog(t, "quiet") // audits
	// Every viewer reads it: history with its state changes, as the event
	// stream and watch derive them (sessionstate.ChangeOf).
	sid := "quiet"
	page, err := rpc.Call[events.AcpHistoryPageResponse](ctx, h.nc, events.APISubject("default", events.OpReadHistory),
		&events.AcpReadHistoryRequest{SessionID: &sid, IncludeState: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, e := range page.Events {
		if c, ok := e.Event.V.(*events.SessionStateChange); ok {
			changes = append(changes, c.Change+":"+string(c.Status))
		}
	}
	if got, want := strings.Join(changes, " "), "turn_accepted:running stalled:stalled resumed:running turn_finished:idle"; !strings.HasSuffix(got, want) {
		t.Errorf("history's state changes %s, want them to end %s", got, want)
	}

	// Waiting on a person is not a stall: the request waits four times the
	// bound, and the turn never stalls.
	if err := h.open(t, "asks", events.AcpOpenSessionRequest{PermissionPolicy: new(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	acc, err = h.accept(ctx, "asks", "", "permission call_1 allow_once=allow,reject_once=reject\nsay done")
	if err != nil {
		t.Fatal(err)
	}
	rec, req, err := h.waitPermissionRequest(ctx, "asks", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, "the request waiting four times session.stall-after", func() (bool, error) {
		return time.Since(rec.Time) >= 4*stallAfter, nil
	}); err != nil {
		t.Fatal(err)
	}
	if s := status("asks"); s != events.StatusWaiting {
		t.Errorf("a turn waiting on a person is %s, want waiting", s)
	}
	if _, err := h.respondPermission(ctx, "asks", req.RequestID, "allow"); err != nil {
		t.Fatal(err)
	}
	(&ioScript{h: h, sid: "asks", acc: acc}).await(t)
	if n, err := h.countCtl(ctx, "asks", events.RecordTurnStall); err != nil || n != 0 {
		t.Errorf("TurnStall records of a turn that waited on a person: %d (%v), want none", n, err)
	}
}
