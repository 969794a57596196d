package session_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

// commands reads sid's cached commands from the history service, as a
// client does.
func (h *harness) commands(t *testing.T, sid string) string {
	t.Helper()
	resp, err := rpc.Call[events.SessionCommandsResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSessionCommands),
		&events.GetSessionCommandsRequest{SessionID: &sid}, nil)
	if err != nil {
		t.Fatalf("getSessionCommands %s: %v", sid, err)
	}
	return string(resp.Commands)
}

// lastFinish returns sid's newest TurnFinished.
func (h *harness) lastFinish(t *testing.T, sid string) *events.TurnFinished {
	t.Helper()
	ctl, err := h.ctl(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(ctl) - 1; i >= 0; i-- {
		if f, ok := ctl[i].(*events.TurnFinished); ok {
			return f
		}
	}
	t.Fatalf("%s has no TurnFinished", sid)
	return nil
}

// wantTiming checks a turn's timing: dispatch, first reply (when the turn
// had text) and finish were each observed, in that order.
func wantTiming(t *testing.T, what string, got *events.TurnTiming, replied bool) {
	t.Helper()
	if got == nil || got.DispatchMs == nil || got.FinishedMs == nil || (got.FirstReplyMs != nil) != replied {
		t.Fatalf("%s timing = %s, want dispatch and finish, and a first reply: %v", what, timingString(got), replied)
	}
	if *got.DispatchMs > *got.FinishedMs || replied && (*got.FirstReplyMs < *got.DispatchMs || *got.FirstReplyMs > *got.FinishedMs) {
		t.Errorf("%s timing = %s, want dispatch <= first reply <= finished", what, timingString(got))
	}
}

func timingString(tt *events.TurnTiming) string {
	if tt == nil {
		return "nil"
	}
	ms := func(v *uint64) string {
		if v == nil {
			return "nil"
		}
		return strconv.FormatUint(*v, 10)
	}
	return fmt.Sprintf("{dispatch %s, first reply %s, finished %s}", ms(tt.DispatchMs), ms(tt.FirstReplyMs), ms(tt.FinishedMs))
}

// What the agent announces (its commands, its usage) is cached as it
// comes, and each turn is timed: getSession and getSessionCommands, served
// by the history service, show the newest, and each TurnFinished carries
// its turn's timing. Updates that read as nothing usable change nothing.
func TestOffersCachedAndTurnsTimed(t *testing.T) {
	h := startRig(t, session.Config{})
	const sid = "o1"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if info := h.getSession(t, sid); info.Usage != nil || info.LastTurnTiming != nil {
		t.Fatalf("a new session shows usage %+v, timing %s; want neither", info.Usage, timingString(info.LastTurnTiming))
	}
	if got := h.commands(t, sid); got != "" {
		t.Fatalf("a new session's commands = %s, want none", got)
	}

	h.mustPrompt(t, sid, "commands review=Review the code | test\ncost 1200 200000 0.42 USD\nsay hi")
	info := h.getSession(t, sid)
	want := &events.SessionUsage{Used: 1200, Size: 200000, Cost: events.JSON(`{"amount":0.42,"currency":"USD"}`)}
	if diff := cmp.Diff(want, info.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	wantTiming(t, "getSession's last turn", info.LastTurnTiming, true)
	if f := h.lastFinish(t, sid); !cmp.Equal(f.Timing, info.LastTurnTiming) {
		t.Errorf("TurnFinished timing %s, getSession's %s: want the same", timingString(f.Timing), timingString(info.LastTurnTiming))
	}
	wantCommands := `[{"name":"review","description":"Review the code","input":null},{"name":"test","description":"test","input":null}]`
	if got := h.commands(t, sid); got != wantCommands {
		t.Errorf("commands = %s, want %s", got, wantCommands)
	}

	// A turn without text has no first reply; usage without a cost has
	// none; an empty command list is a list.
	h.mustPrompt(t, sid, "usage 5 10\ncommands\nstop end_turn")
	info = h.getSession(t, sid)
	if diff := cmp.Diff(&events.SessionUsage{Used: 5, Size: 10}, info.Usage); diff != "" {
		t.Errorf("usage without a cost (-want +got):\n%s", diff)
	}
	wantTiming(t, "a turn without text", info.LastTurnTiming, false)
	if got := h.commands(t, sid); got != "[]" {
		t.Errorf("commands after an empty list = %s, want []", got)
	}

	// Commands that are not objects with a string name and description are
	// left out, the others kept byte for byte; a usage_update without
	// integer used and size changes nothing, and a malformed cost is none.
	h.mustPrompt(t, sid, `update {"sessionUpdate":"available_commands_update","availableCommands":[{"name":"ok","description":"d","_meta":{"x":[1]}},{"name":1,"description":"n"},"x",{"description":"no name"}]}
update {"sessionUpdate":"usage_update","used":-1,"size":3}
update {"sessionUpdate":"usage_update","used":1.5,"size":3}
update {"sessionUpdate":"usage_update","used":7,"size":8,"cost":{"amount":"1","currency":"USD"}}
say done`)
	if got, want := h.commands(t, sid), `[{"name":"ok","description":"d","_meta":{"x":[1]}}]`; got != want {
		t.Errorf("commands = %s, want %s", got, want)
	}
	if diff := cmp.Diff(&events.SessionUsage{Used: 7, Size: 8}, h.getSession(t, sid).Usage); diff != "" {
		t.Errorf("usage after malformed updates (-want +got):\n%s", diff)
	}

	// The caches are served without the adapter: an unloaded session
	// answers what its agent said last, and stays unloaded.
	h.unload(t, sid)
	before, err := h.lastSeq(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.commands(t, sid), `[{"name":"ok","description":"d","_meta":{"x":[1]}}]`; got != want {
		t.Errorf("commands of the unloaded session = %s, want %s", got, want)
	}
	info = h.getSession(t, sid)
	if info.Usage == nil || info.Usage.Used != 7 {
		t.Errorf("usage of the unloaded session = %+v, want used 7", info.Usage)
	}
	wantTiming(t, "the unloaded session's last turn", info.LastTurnTiming, true)
	if after, err := h.lastSeq(t.Context(), sid); err != nil || after != before {
		t.Errorf("reading the caches moved the log from %d to %d (%v): something was started", before, after, err)
	}
}

// A lost projection is rebuilt from the log with its caches: the newest
// commands and usage the agent announced, and the last turn's timing.
func TestOffersRebuiltFromTheLog(t *testing.T) {
	h := startRig(t, session.Config{})
	const sid = "o2"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "commands old\ncost 1 2 3 USD")
	h.mustPrompt(t, sid, "commands review=Review the code\nusage 30 40\nsay hi")
	before, commands := h.getSession(t, sid), h.commands(t, sid)
	if before.Usage == nil || before.LastTurnTiming == nil {
		t.Fatalf("before the loss: usage %+v, timing %s", before.Usage, timingString(before.LastTurnTiming))
	}

	h.stopSvc()
	kv, err := h.js.KeyValue(t.Context(), events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(t.Context(), events.SessionKey("default", sid)); err != nil {
		t.Fatal(err)
	}
	h.startSession()
	// A rename loads the session, rebuilding it, and projects it.
	if _, err := h.rename(t.Context(), sid, "rebuilt"); err != nil {
		t.Fatal(err)
	}

	after := h.getSession(t, sid)
	if diff := cmp.Diff(before.Usage, after.Usage); diff != "" {
		t.Errorf("rebuilt usage (-before +after):\n%s", diff)
	}
	if !cmp.Equal(before.LastTurnTiming, after.LastTurnTiming) {
		t.Errorf("rebuilt timing %s, want %s", timingString(after.LastTurnTiming), timingString(before.LastTurnTiming))
	}
	if got := h.commands(t, sid); got != commands || got != `[{"name":"review","description":"Review the code","input":null}]` {
		t.Errorf("rebuilt commands = %s, want %s", got, commands)
	}
}
