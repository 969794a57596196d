package history_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
)

// writeTurns writes a session of three turns (completed; failed, its
// finish on a prompt's key subject; one that waits for a permission), an
// unload after the failed turn, an event outside any turn and an adapter
// exit while idle, each record followed by one of another session's. It
// returns what history must show, in order: "change:status@seq" for a
// state change, "type@seq" for an event.
func (h *harness) writeTurns(t *testing.T, sid events.SessionID) []string {
	t.Helper()
	w := eventlog.NewWriter(h.js, "default", sid, eventlog.Position{}, "w")
	other := eventlog.NewWriter(h.js, "default", "other-"+sid, eventlog.Position{}, "w")
	var want []string
	add := func(e eventlog.Entry, shown ...string) {
		t.Helper()
		a, err := w.Append(t.Context(), e)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range shown {
			want = append(want, fmt.Sprintf("%s@%d", s, a[0].Seq))
		}
		if _, err := other.Append(t.Context(), eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"plan","entries":[]}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	inTurn := func(id string, extra ...string) nats.Header {
		h := nats.Header{events.HeaderTurnID: []string{id}}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return h
	}
	update := func(kind string) *events.AcpDurableSessionUpdate {
		return &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"` + kind + `"}`)}
	}
	start := func(id string) {
		add(eventlog.Entry{Kind: events.LogEvents, Header: inTurn(id, events.HeaderTurnAccepted, "1"), Value: update("user_message_chunk")},
			"turn_accepted:running", "user_message_chunk")
		add(eventlog.Entry{Kind: events.LogEvents, Header: inTurn(id), Value: update("agent_message_chunk")}, "agent_message_chunk")
	}
	add(eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test"}})

	start("t1")
	add(eventlog.Entry{Kind: events.LogControl, Header: inTurn("t1"), Value: &events.TurnFinished{TurnID: "t1", Outcome: events.OutcomeCompleted, StopReason: "end_turn"}},
		"turn_finished:idle")

	start("t2")
	add(eventlog.Entry{Kind: events.LogControl, Header: inTurn("t2"), Subject: events.KeySubject("default", sid, "k2"),
		Value: &events.TurnFinished{TurnID: "t2", Outcome: events.OutcomeFailed, Error: &events.AcpErrorResponse{Code: "adapter_error", Message: "boom"}}},
		"turn_finished:failed")
	add(eventlog.Entry{Kind: events.LogControl, Value: &events.ConfigChanged{Revision: 1}})
	add(eventlog.Entry{Kind: events.LogControl, Value: &events.SessionUnloaded{Reason: events.UnloadRequested}}, "unloaded:failed")
	add(eventlog.Entry{Kind: events.LogEvents, Value: update("config_option_update")}, "config_option_update")

	start("t3")
	add(eventlog.Entry{Kind: events.LogEvents, Header: inTurn("t3"), Value: &events.AcpDurablePermissionRequest{RequestID: "perm_1", Request: events.JSON(`{"options":[]}`)}},
		"waiting:waiting", "permission_request")
	add(eventlog.Entry{Kind: events.LogEvents, Header: inTurn("t3"), Value: &events.AcpDurablePermissionResponse{RequestID: "perm_1", Response: events.JSON(`{}`), Status: events.PermissionAccepted}},
		"permission_response")
	add(eventlog.Entry{Kind: events.LogControl, Header: inTurn("t3"), Value: &events.TurnFinished{TurnID: "t3", Outcome: events.OutcomeCompleted, StopReason: "end_turn"}},
		"turn_finished:idle")
	add(eventlog.Entry{Kind: events.LogControl, Value: &events.AcpAgentExitedEvent{ProcessID: "p1"}}, "adapter_exited:idle")
	return want
}

// shown renders a page's entries as writeTurns does.
func shown(t *testing.T, p *events.AcpHistoryPageResponse) []string {
	t.Helper()
	var out []string
	for i := range p.Events {
		e := &p.Events[i]
		if c, ok := e.Event.V.(*events.SessionStateChange); ok {
			out = append(out, fmt.Sprintf("%s:%s@%d", c.Change, c.Status, e.Sequence))
			continue
		}
		data, err := eventjson.Durable(e)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(data), `"type":"`)
		typ, _, _ := strings.Cut(rest, `"`)
		out = append(out, fmt.Sprintf("%s@%d", typ, e.Sequence))
	}
	return out
}

// TestIncludeState: readHistory with includeState interleaves the state
// changes among the events, each before the event that caused it, and
// pages with the cursors of a page without them, forward and backward, at
// every page size; the status after an unload outside a turn is read back
// when the page does not hold the turn's end.
func TestIncludeState(t *testing.T) {
	h := start(t, 0)
	want := h.writeTurns(t, "s1")
	sid := new("s1")
	all := uint32(1000)
	full, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, After: new(uint64(0)), Limit: &all, IncludeState: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := shown(t, full); !slices.Equal(got, want) {
		t.Fatalf("history with state:\n%v\nwant\n%v", got, want)
	}
	plain, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, After: new(uint64(0)), Limit: &all})
	if err != nil {
		t.Fatal(err)
	}
	var plainWant []string
	for _, s := range want {
		if !strings.Contains(s, ":") {
			plainWant = append(plainWant, s)
		}
	}
	if got := shown(t, plain); !slices.Equal(got, plainWant) {
		t.Fatalf("history without state:\n%v\nwant\n%v", got, plainWant)
	}

	for limit := uint32(1); limit <= 5; limit++ {
		var fwd []string
		after := uint64(0)
		for range 100 {
			p, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, After: &after, Limit: &limit, IncludeState: true})
			if err != nil {
				t.Fatal(err)
			}
			fwd = append(fwd, shown(t, p)...)
			if !p.HasMoreAfter {
				break
			}
			after = p.Events[len(p.Events)-1].Sequence
		}
		if !slices.Equal(fwd, want) {
			t.Errorf("limit %d forward:\n%v\nwant\n%v", limit, fwd, want)
		}
		var back [][]string
		var before *uint64
		for range 100 {
			p, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, Before: before, Limit: &limit, IncludeState: true})
			if err != nil {
				t.Fatal(err)
			}
			back = append(back, shown(t, p))
			if !p.HasMoreBefore {
				break
			}
			before = new(p.Events[0].Sequence)
		}
		slices.Reverse(back)
		if got := slices.Concat(back...); !slices.Equal(got, want) {
			t.Errorf("limit %d backward:\n%v\nwant\n%v", limit, got, want)
		}
	}
}
