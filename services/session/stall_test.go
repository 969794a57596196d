package session_test

import (
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
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
	// Stalled, then resumed, in turn: on a loaded machine the agent may
	// be silent past the bound again before its last words.
	alternate := len(stalls) >= 2 && len(stalls)%2 == 0
	for i, st := range stalls {
		alternate = alternate && st == (i%2 == 0)
	}
	if !alternate {
		t.Errorf("TurnStall records %v, want stalled then resumed, in turn", stalls)
	}
	if n, g := testutil.Metric(t, h.reg, "acp_session_stalls_total"), testutil.Metric(t, h.reg, "acp_session_stalled_turns"); n != float64(len(stalls)/2) || g != 0 {
		t.Errorf("stalls %v, stalled turns now %v; want %d and 0", n, g, len(stalls)/2)
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
	want := []string{"turn_accepted:running"}
	for range len(stalls) / 2 {
		want = append(want, "stalled:stalled", "resumed:running")
	}
	want = append(want, "turn_finished:idle")
	if got := strings.Join(changes, " "); !strings.HasSuffix(got, strings.Join(want, " ")) {
		t.Errorf("history's state changes %s, want them to end %s", got, strings.Join(want, " "))
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
	// None while the request waited (before it, on a loaded machine, the
	// agent may have been silent past the bound: that is a stall).
	all, err := eventlog.Forward(ctx, h.js, events.StreamLog, events.LogFilter("default", "asks"), rec.Sequence, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.Header.Get(events.HeaderRecord) == (events.AcpDurablePermissionResponse{}).VariantName() {
			break
		}
		if r.Header.Get(events.HeaderRecord) == events.RecordTurnStall {
			t.Errorf("a TurnStall record (%d) while the turn waited on a person", r.Sequence)
		}
	}
}
