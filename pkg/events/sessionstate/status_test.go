package sessionstate_test

import (
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/sessionstate"
)

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		facts sessionstate.Facts
		want  events.SessionStatus
	}{
		{sessionstate.Facts{}, events.StatusIdle},
		{sessionstate.Facts{LastFailed: true}, events.StatusFailed},
		{sessionstate.Facts{TurnOpen: true}, events.StatusRunning},
		{sessionstate.Facts{TurnOpen: true, LastFailed: true}, events.StatusRunning},
		{sessionstate.Facts{TurnOpen: true, Waiting: true}, events.StatusWaiting},
		{sessionstate.Facts{TurnOpen: true, Stalled: true}, events.StatusStalled},
		{sessionstate.Facts{TurnOpen: true, Stalled: true, Waiting: true}, events.StatusWaiting},
		{sessionstate.Facts{Stalled: true}, events.StatusIdle},
		{sessionstate.Facts{TurnOpen: true, Waiting: true, LastFailed: true}, events.StatusWaiting},
		// A request raised outside a turn waits for its answer too.
		{sessionstate.Facts{Waiting: true}, events.StatusWaiting},
		{sessionstate.Facts{Waiting: true, LastFailed: true}, events.StatusWaiting},
	} {
		if got := tc.facts.Status(); got != tc.want {
			t.Errorf("%+v.Status() = %s, want %s", tc.facts, got, tc.want)
		}
	}
}
