package sessionstate_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/sessionstate"
)

// record is a log record as ChangeOf reads it: its headers and payload.
func record(t *testing.T, v events.Variant, hdr ...string) (nats.Header, []byte) {
	t.Helper()
	data, err := events.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{events.HeaderRecord: []string{v.VariantName()}}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	return h, data
}

func TestStateChangeOf(t *testing.T) {
	reason := "prompt_cancelled"
	cases := []struct {
		name       string
		v          events.Variant
		hdr        []string
		lastFailed bool
		want       *events.SessionStateChange
	}{
		{"accepting message", &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"user_message_chunk"}`)},
			[]string{events.HeaderTurnID, "t1", events.HeaderTurnAccepted, "1"}, false,
			&events.SessionStateChange{Change: events.ChangeTurnAccepted, Status: events.StatusRunning, TurnID: "t1"}},
		{"another block of the prompt", &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"user_message_chunk"}`)},
			[]string{events.HeaderTurnID, "t1", events.HeaderTurnBlock, "1"}, false, nil},
		{"agent message", &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"agent_message_chunk"}`)},
			[]string{events.HeaderTurnID, "t1"}, false, nil},
		{"permission request", &events.AcpDurablePermissionRequest{RequestID: "perm_1", Request: events.JSON(`{}`)},
			[]string{events.HeaderTurnID, "t1"}, false,
			&events.SessionStateChange{Change: events.ChangeWaiting, Status: events.StatusWaiting, TurnID: "t1",
				WaitingFor: &events.WaitingFor{Kind: events.WaitingPermission, RequestID: "perm_1"}}},
		{"input request", &events.InputRequest{RequestID: "input_1", Request: events.JSON(`{}`)},
			[]string{events.HeaderTurnID, "t1"}, false,
			&events.SessionStateChange{Change: events.ChangeWaiting, Status: events.StatusWaiting, TurnID: "t1",
				WaitingFor: &events.WaitingFor{Kind: events.WaitingInput, RequestID: "input_1"}}},
		{"permission response", &events.AcpDurablePermissionResponse{RequestID: "perm_1", Response: events.JSON(`{}`), Status: "terminal", Reason: &reason},
			[]string{events.HeaderTurnID, "t1"}, false, nil},
		{"completed", &events.TurnFinished{TurnID: "t1", Outcome: events.OutcomeCompleted, StopReason: "end_turn"},
			[]string{events.HeaderTurnID, "t1"}, true,
			&events.SessionStateChange{Change: events.ChangeTurnFinished, Status: events.StatusIdle, TurnID: "t1", StopReason: "end_turn"}},
		{"cancelled", &events.TurnFinished{TurnID: "t1", Outcome: events.OutcomeCancelled, StopReason: "cancelled"},
			nil, false,
			&events.SessionStateChange{Change: events.ChangeTurnFinished, Status: events.StatusIdle, TurnID: "t1", StopReason: "cancelled", DiscardDeltas: true}},
		{"failed", &events.TurnFinished{TurnID: "t1", Outcome: events.OutcomeFailed, Error: &events.AcpErrorResponse{Code: "adapter_exited", Message: "gone"}},
			nil, false,
			&events.SessionStateChange{Change: events.ChangeTurnFinished, Status: events.StatusFailed, TurnID: "t1",
				Error: &events.StateChangeError{Code: "adapter_exited", Message: "gone"}, DiscardDeltas: true}},
		{"failed without an error recorded", &events.TurnFinished{TurnID: "t1", Outcome: events.OutcomeFailed},
			nil, false,
			&events.SessionStateChange{Change: events.ChangeTurnFinished, Status: events.StatusFailed, TurnID: "t1",
				Error: &events.StateChangeError{Code: string(events.CodeInternal), Message: "the turn failed"}, DiscardDeltas: true}},
		{"stalled", &events.TurnStall{Stalled: true, QuietMs: 600000}, []string{events.HeaderTurnID, "t3"}, false,
			&events.SessionStateChange{Change: events.ChangeStalled, Status: events.StatusStalled, TurnID: "t3"}},
		{"resumed", &events.TurnStall{QuietMs: 1000}, []string{events.HeaderTurnID, "t3"}, false,
			&events.SessionStateChange{Change: events.ChangeResumed, Status: events.StatusRunning, TurnID: "t3"}},
		{"unloaded while idle", &events.SessionUnloaded{Reason: events.UnloadIdle}, nil, false,
			&events.SessionStateChange{Change: events.ChangeUnloaded, Status: events.StatusIdle}},
		{"unloaded after a failed turn", &events.SessionUnloaded{Reason: events.UnloadRequested}, nil, true,
			&events.SessionStateChange{Change: events.ChangeUnloaded, Status: events.StatusFailed}},
		{"exited in a turn", &events.AcpAgentExitedEvent{ProcessID: "p1"}, []string{events.HeaderTurnID, "t2"}, true,
			&events.SessionStateChange{Change: events.ChangeAdapterExited, Status: events.StatusRunning, TurnID: "t2"}},
		{"exited while idle", &events.AcpAgentExitedEvent{ProcessID: "p1"}, nil, false,
			&events.SessionStateChange{Change: events.ChangeAdapterExited, Status: events.StatusIdle}},
		{"config", &events.ConfigChanged{Revision: 2}, nil, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdr, data := record(t, c.v, c.hdr...)
			asked := false
			got, err := sessionstate.ChangeOf(hdr, data, func() (bool, error) { asked = true; return c.lastFailed, nil })
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("change (-want +got):\n%s", diff)
			}
			// Only an unload or an exit outside a turn asks how the last
			// turn ended.
			wantAsk := c.want != nil && c.want.TurnID == "" && (c.want.Change == events.ChangeUnloaded || c.want.Change == events.ChangeAdapterExited)
			if asked != wantAsk {
				t.Errorf("asked for the last turn's outcome: %v, want %v", asked, wantAsk)
			}
			if got != nil && got.CausedByEvent() != (c.want.Change == events.ChangeTurnAccepted || c.want.Change == events.ChangeWaiting) {
				t.Errorf("CausedByEvent = %v for %s", got.CausedByEvent(), got.Change)
			}
		})
	}
}

// A turn failed when it carries an error or its outcome says so; its
// failure is the error recorded, else a generic one. Every reader of a
// turn's end (state events, history's current state, a prompt's answer)
// decides by these two.
func TestTurnFinishedFailure(t *testing.T) {
	gone := &events.AcpErrorResponse{Code: "adapter_exited", Message: "gone"}
	for _, c := range []struct {
		name string
		f    events.TurnFinished
		want *events.AcpErrorResponse
	}{
		{"completed", events.TurnFinished{Outcome: events.OutcomeCompleted, StopReason: "end_turn"}, nil},
		{"cancelled", events.TurnFinished{Outcome: events.OutcomeCancelled, StopReason: "cancelled"}, nil},
		{"failed", events.TurnFinished{Outcome: events.OutcomeFailed, Error: gone}, gone},
		{"failed, no error", events.TurnFinished{Outcome: events.OutcomeFailed}, &events.AcpErrorResponse{Code: string(events.CodeInternal), Message: "the turn failed"}},
		{"an error, another outcome", events.TurnFinished{Outcome: events.OutcomeCancelled, Error: gone}, gone},
	} {
		if got := c.f.Failure(); !cmp.Equal(got, c.want) || c.f.Failed() != (c.want != nil) {
			t.Errorf("%s: Failure() = %+v, Failed() = %v; want %+v", c.name, got, c.f.Failed(), c.want)
		}
	}
}

// TestStateTracker: the tracker asks its lookup once at most, and not
// after it saw a turn end.
func TestStateTracker(t *testing.T) {
	lookups := 0
	tr := &sessionstate.Tracker{Lookup: func(uint64) (bool, error) { lookups++; return true, nil }}
	change := func(seq uint64, v events.Variant, hdr ...string) *events.SessionStateChange {
		t.Helper()
		h, data := record(t, v, hdr...)
		c, err := tr.Change(seq, h, data)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := change(1, &events.SessionUnloaded{}); c.Status != events.StatusFailed || lookups != 1 {
		t.Fatalf("first unload: %+v after %d lookups, want failed after 1", c, lookups)
	}
	if c := change(2, &events.AcpAgentExitedEvent{}); c.Status != events.StatusFailed || lookups != 1 {
		t.Fatalf("exit: %+v after %d lookups, want failed, no new lookup", c, lookups)
	}
	change(3, &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"user_message_chunk"}`)},
		events.HeaderTurnID, "t1", events.HeaderTurnAccepted, "1")
	if c := change(4, &events.SessionUnloaded{}); c.Status != events.StatusIdle || lookups != 1 {
		t.Fatalf("unload after an accepted turn: %+v, want idle, no new lookup", c)
	}
	change(5, &events.TurnFinished{TurnID: "t1", Outcome: events.OutcomeFailed})
	if c := change(6, &events.SessionUnloaded{}); c.Status != events.StatusFailed || lookups != 1 {
		t.Fatalf("unload after a failed turn: %+v, want failed", c)
	}

	failing := &sessionstate.Tracker{Lookup: func(uint64) (bool, error) { return false, errors.New("log away") }}
	h, data := record(t, &events.SessionUnloaded{})
	if _, err := failing.Change(1, h, data); err == nil {
		t.Error("a failed lookup gave no error")
	}
}

// TestStateChangePublicJSON: the public form of a state change, and its
// trip through a history page's msgpack.
func TestStateChangePublicJSON(t *testing.T) {
	stored := time.Date(2026, 11, 30, 8, 13, 23, 483104535, time.UTC)
	cases := []struct {
		c    *events.SessionStateChange
		want string
	}{
		{&events.SessionStateChange{Change: events.ChangeTurnAccepted, Status: events.StatusRunning, TurnID: "t_1"},
			`{"sessionId":"s1","sequence":12,"timestamp":"2026-11-30T08:13:23.483104535Z","durability":"durable","type":"session_state","change":"turn_accepted","status":"running","turnId":"t_1"}`},
		{&events.SessionStateChange{Change: events.ChangeTurnFinished, Status: events.StatusFailed, TurnID: "t_1",
			Error: &events.StateChangeError{Code: "adapter_exited", Message: "the \"agent\" exited"}, DiscardDeltas: true},
			`{"sessionId":"s1","sequence":12,"timestamp":"2026-11-30T08:13:23.483104535Z","durability":"durable","type":"session_state","change":"turn_finished","status":"failed","turnId":"t_1","error":{"code":"adapter_exited","message":"the \"agent\" exited"},"discardDeltas":true}`},
		{&events.SessionStateChange{Change: events.ChangeWaiting, Status: events.StatusWaiting, TurnID: "t_1",
			WaitingFor: &events.WaitingFor{Kind: events.WaitingInput, RequestID: "input_2"}},
			`{"sessionId":"s1","sequence":12,"timestamp":"2026-11-30T08:13:23.483104535Z","durability":"durable","type":"session_state","change":"waiting","status":"waiting","turnId":"t_1","waitingFor":{"kind":"input","requestId":"input_2"}}`},
		{&events.SessionStateChange{Change: events.ChangeTurnFinished, Status: events.StatusIdle, TurnID: "t_1", StopReason: "cancelled", DiscardDeltas: true},
			`{"sessionId":"s1","sequence":12,"timestamp":"2026-11-30T08:13:23.483104535Z","durability":"durable","type":"session_state","change":"turn_finished","status":"idle","turnId":"t_1","stopReason":"cancelled","discardDeltas":true}`},
	}
	for _, c := range cases {
		e := sessionstate.Entry("s1", 12, stored, c.c)
		got, err := eventjson.Durable(e)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("public JSON\n%s\nwant\n%s", got, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("not JSON: %s", got)
		}
		// Through a history page and back: the same public JSON.
		page := &events.AcpHistoryPageResponse{Events: []events.AcpDurableHistoryEntry{*e}}
		data, err := events.Marshal(page)
		if err != nil {
			t.Fatal(err)
		}
		back, err := events.Decode[events.AcpHistoryPageResponse](data)
		if err != nil {
			t.Fatal(err)
		}
		again, err := eventjson.Durable(&back.Events[0])
		if err != nil || string(again) != c.want {
			t.Errorf("after a history page's round trip: %s, %v; want %s", again, err, c.want)
		}
	}
	// The request's flag travels.
	data, err := events.Marshal(&events.AcpReadHistoryRequest{IncludeState: true})
	if err != nil {
		t.Fatal(err)
	}
	if req, err := events.Decode[events.AcpReadHistoryRequest](data); err != nil || !req.IncludeState {
		t.Errorf("includeState after a round trip: %+v, %v", req, err)
	}
}
