package session

import "fmt"

// The session state machine. A session's state is not a field of its own:
// it is what its fields say (state), under sess.mu. What moves it is a
// record appended to its log or an event of its adapter, and every place
// in the code that moves it says which (moved). transitions is the whole
// list, with the records of each move. A move the list does not hold is a
// defect: the tests panic on it, and a service logs it.

// state is where a session is in its life on this replica.
type state int

const (
	// stateUnloaded: not read from its log on this replica (sess.loaded
	// is false). Every request loads it first.
	stateUnloaded state = iota
	// stateAbsent: read, and never opened, or deleted (sess.opened nil).
	stateAbsent
	// stateDetached: opened, with no adapter (sess.adapter nil).
	stateDetached
	// stateAttaching: a route follows the session's ACP_IO and a runner
	// is asked for the adapter (the route has no ACP session yet).
	stateAttaching
	// stateIdle: an adapter is attached and no turn runs.
	stateIdle
	// stateRunning: a turn runs (sess.turn). It may wait for a person's
	// answer to a request (a permission, an input): that is status, not
	// state.
	stateRunning
	// stateDraining: no turn runs, and the adapter owes the answer to a
	// turn that ended before it did (route.drain): a new prompt waits.
	stateDraining
	// stateEndHeld: a turn ended, and the full store refused its
	// TurnFinished (sess.held, storagefull.go): it goes first of
	// anything the session appends next.
	stateEndHeld

	// stateAny, as the from of a transition, is every state.
	stateAny state = -1
)

var stateNames = [...]string{"unloaded", "absent", "detached", "attaching", "idle", "running", "draining", "end-held"}

func (s state) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	if s == stateAny {
		return "any"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// move names what moves a session: the reason a place in the code changes
// what state reads.
type move string

const (
	onLoad     move = "load"     // the session was read from its log (load, rebuild)
	onOpen     move = "open"     // SessionOpened appended (open, fork)
	onAttach   move = "attach"   // a route follows ACP_IO; the runner is asked for an adapter
	onAttached move = "attached" // the runner started the adapter (AdapterAttached follows)
	onAccept   move = "accept"   // a prompt's user message, with Acp-Turn-Accepted, appended
	onFinish   move = "finish"   // TurnFinished appended (endTurn, storeHeld)
	onHold     move = "hold"     // a turn ended; the full store refused its TurnFinished (hold)
	onCancel   move = "cancel"   // the turn ended before its adapter did: session/cancel sent
	onDrained  move = "drained"  // the drain ended: the adapter answered, exited or went
	onDetach   move = "detach"   // the route ended (detach): SessionUnloaded, AgentExited, a delete, a failed start
	onDelete   move = "delete"   // SessionDeleted appended, the session's records purged
	onRelease  move = "release"  // the session left this replica (release)
)

// transition is one move of the machine: from a state, on a move, to a
// state, and the records and events that make it.
type transition struct {
	from state
	on   move
	to   state
	what string
}

// transitions is every move a session makes. Moves that leave the state
// as it was (a detach while a turn runs: the turn still does) are not
// listed.
var transitions = []transition{
	{stateUnloaded, onLoad, stateAbsent, "the log holds no SessionOpened, or ends in SessionDeleted"},
	{stateUnloaded, onLoad, stateDetached, "the log holds a SessionOpened; OwnerChanged fences the last owner off, and a turn it left open is closed (TurnFinished, prompt_delivery_uncertain)"},
	{stateUnloaded, onLoad, stateRunning, "the log ends in an open turn whose adapter still runs: the turn is taken over (takeover.go)"},
	{stateUnloaded, onLoad, stateIdle, "a turn taken over ends while its ACP_IO is read again: its AdapterPromptResult was there"},
	{stateUnloaded, onLoad, stateDraining, "a turn taken over fails a cap while its ACP_IO is read again: RunnerCancel sent"},
	{stateAbsent, onOpen, stateDetached, "SessionOpened, on its own subject (open; fork, with SessionForked)"},
	{stateDetached, onAttach, stateAttaching, "the owner follows ACP_IO and asks a runner for the adapter (RunnerCreate, RunnerRestore)"},
	{stateAttaching, onAttached, stateIdle, "the runner's AcpSessionCreatedResponse or AdapterReady; AdapterAttached is appended"},
	{stateAttaching, onDetach, stateDetached, "the adapter did not start"},
	{stateIdle, onAccept, stateRunning, "the prompt's user message, with Acp-Turn-Accepted"},
	{stateRunning, onFinish, stateIdle, "TurnFinished: the adapter's AdapterPromptResult, or a failure"},
	{stateRunning, onFinish, stateDetached, "TurnFinished after the adapter went first (AgentExited, its runner gone)"},
	{stateRunning, onHold, stateEndHeld, "a turn ended (its output refused, or its end), and the full store refused its TurnFinished: held; RunnerCancel sent unless the adapter answered"},
	{stateEndHeld, onFinish, stateIdle, "the held TurnFinished stored: the store takes writes again"},
	{stateEndHeld, onFinish, stateDraining, "the held TurnFinished stored while the adapter still owes the cancelled turn's answer"},
	{stateEndHeld, onFinish, stateDetached, "the held TurnFinished stored after the adapter went"},
	{stateIdle, onCancel, stateDraining, "a TurnFinished (cancelled, or failed by a cap) before the adapter answered: RunnerCancel sent"},
	{stateDraining, onDrained, stateIdle, "the adapter's AdapterPromptResult for the ended turn, AgentExited, or the route's end"},
	{stateIdle, onDetach, stateDetached, "SessionUnloaded (unload, reclaim, eviction), AgentExited, or a delete"},
	{stateDetached, onDelete, stateAbsent, "SessionDeleted"},
	{stateAny, onRelease, stateUnloaded, "another replica's append (write_conflict), a lost lease, the idle sweep, shutdown"},
}

// state is the session's state, from its fields. The caller holds sess.mu.
func (sess *session) state() state {
	switch r := sess.adapter; {
	case !sess.loaded:
		return stateUnloaded
	case sess.opened == nil:
		return stateAbsent
	case sess.held != nil:
		return stateEndHeld
	case sess.turn != nil:
		return stateRunning
	case r == nil:
		return stateDetached
	case r.acpSessionID == "":
		return stateAttaching
	case r.drain != nil:
		return stateDraining
	}
	return stateIdle
}

// strictStates makes a move that transitions does not list panic (the
// tests set it); otherwise it is logged.
var strictStates = false

// observeMove, when set (by the tests), sees every move a session makes,
// in the order they are made.
var observeMove func(sess *session, from state, on move, to state)

// moved checks the move on that the caller just made: from the state the
// session was last checked in to the state its fields say now. The caller
// holds sess.mu.
func (sess *session) moved(on move) {
	from, to := sess.checked, sess.state()
	sess.checked = to
	if from == to {
		return
	}
	if observeMove != nil {
		observeMove(sess, from, on, to)
	}
	for _, t := range transitions {
		if (t.from == from || t.from == stateAny) && t.on == on && t.to == to {
			return
		}
	}
	if strictStates {
		panic(fmt.Sprintf("session %s/%s moved %s -%s-> %s, which transitions does not list", sess.ns, sess.sid, from, on, to))
	}
	sess.lg.Error("session moved in a way its state machine does not list", "from", from.String(), "move", string(on), "to", to.String())
}
