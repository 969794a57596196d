package session

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"skein.dev/pkg/events"
)

// Every test of the package runs with the state machine checked: a move
// that transitions does not list panics. The moves are kept, for MovesOf.
func init() {
	strictStates = true
	observeMove = func(sess *session, from state, on move, to state) {
		movesMu.Lock()
		defer movesMu.Unlock()
		k := sess.key()
		moves[k] = append(moves[k], from.String()+" -"+string(on)+"-> "+to.String())
	}
}

var (
	movesMu sync.Mutex
	moves   = map[string][]string{}
)

// MovesOf returns the moves session sid of namespace ns made in this test
// binary, in order, as "from -move-> to".
func MovesOf(ns events.Namespace, sid events.SessionID) []string {
	movesMu.Lock()
	defer movesMu.Unlock()
	return slices.Clone(moves[events.SessionKey(ns, sid)])
}

// The table is a machine: every state is reached from unloaded, and every
// state but unloaded can be left.
func TestTransitionsFormAMachine(t *testing.T) {
	seen := map[[3]string]bool{}
	for _, tr := range transitions {
		k := [3]string{tr.from.String(), string(tr.on), tr.to.String()}
		if seen[k] {
			t.Errorf("transition %v listed twice", k)
		}
		seen[k] = true
		if tr.from == tr.to {
			t.Errorf("transition %v moves nowhere", k)
		}
		if tr.what == "" {
			t.Errorf("transition %v does not say what makes it", k)
		}
	}
	reached := map[state]bool{stateUnloaded: true}
	for changed := true; changed; {
		changed = false
		for _, tr := range transitions {
			if (tr.from == stateAny || reached[tr.from]) && !reached[tr.to] {
				reached[tr.to], changed = true, true
			}
		}
	}
	for s := stateUnloaded; int(s) < len(stateNames); s++ {
		if !reached[s] {
			t.Errorf("state %s is never reached", s)
		}
		left := false
		for _, tr := range transitions {
			left = left || tr.from == s || tr.from == stateAny
		}
		if !left {
			t.Errorf("state %s is never left", s)
		}
	}
}

func TestStateOfFields(t *testing.T) {
	r := &route{}
	for _, tc := range []struct {
		sess *session
		want state
	}{
		{&session{}, stateUnloaded},
		{&session{loaded: true}, stateAbsent},
		{&session{loaded: true, opened: new(events.SessionOpened)}, stateDetached},
		{&session{loaded: true, opened: new(events.SessionOpened), adapter: r}, stateAttaching},
		{&session{loaded: true, opened: new(events.SessionOpened), adapter: &route{acpSessionID: "a"}}, stateIdle},
		{&session{loaded: true, opened: new(events.SessionOpened), adapter: &route{acpSessionID: "a"}, turn: &turn{}}, stateRunning},
		{&session{loaded: true, opened: new(events.SessionOpened), adapter: &route{acpSessionID: "a", drain: &drain{}}}, stateDraining},
		// The adapter exited during the turn: the turn runs until its
		// TurnFinished.
		{&session{loaded: true, opened: new(events.SessionOpened), turn: &turn{}}, stateRunning},
	} {
		if got := tc.sess.state(); got != tc.want {
			t.Errorf("state of %+v = %s, want %s", tc.sess, got, tc.want)
		}
	}
}

// A move the table does not list is caught where it is made.
func TestUnlistedMovePanics(t *testing.T) {
	sess := &session{loaded: true, checked: stateAbsent}
	sess.turn = &turn{}
	sess.opened = new(events.SessionOpened)
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "absent -accept-> running") {
			t.Errorf("recover() = %q, want the move absent -accept-> running named", msg)
		}
	}()
	sess.moved(onAccept)
}
