package eventlog_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// OpenTurn finds whether a turn is open, and where it started, from
// whichever record ends the log.
func TestOpenTurn(t *testing.T) {
	rec := func(seq uint64, kv ...string) *eventlog.Record {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &eventlog.Record{Sequence: seq, Header: h}
	}
	for _, tc := range []struct {
		name  string
		last  *eventlog.Record
		open  bool
		start uint64
		bad   bool
	}{
		{"no turn", rec(9), false, 0, false},
		{"the accepting record", rec(9, events.HeaderTurnID, "t", events.HeaderTurnAccepted, "3"), true, 9, false},
		{"another block of the acceptance", rec(11, events.HeaderTurnID, "t", events.HeaderTurnBlock, "2"), true, 9, false},
		{"a later record", rec(20, events.HeaderTurnID, "t", events.HeaderTurnStart, "9"), true, 9, false},
		{"the turn's end", rec(21, events.HeaderTurnID, "t", events.HeaderRecord, events.RecordTurnFinished, events.HeaderTurnStart, "9"), false, 0, false},
		{"a block index past the log's start", rec(2, events.HeaderTurnID, "t", events.HeaderTurnBlock, "2"), false, 0, true},
		{"a block index of 0", rec(5, events.HeaderTurnID, "t", events.HeaderTurnBlock, "0"), false, 0, true},
		{"a turn record without its start", rec(5, events.HeaderTurnID, "t"), false, 0, true},
	} {
		id, start, open, err := eventlog.OpenTurn(tc.last)
		if (err != nil) != tc.bad || open != tc.open || start != tc.start || (open && id != "t") {
			t.Errorf("%s: OpenTurn = %q, %d, %v, %v; want open %v at %d (error %v)", tc.name, id, start, open, err, tc.open, tc.start, tc.bad)
		}
	}
}
