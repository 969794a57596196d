package sessionstate

import "skein.dev/pkg/events"

// Facts are what a session's status is derived from, however the reader
// learned them: the session service from the session it holds, the history
// service from the log's newest records, a state change from the one record
// that causes it.
type Facts struct {
	// TurnOpen: a turn was accepted and its TurnFinished is not written.
	TurnOpen bool
	// Waiting: a request of the session (a permission or an input
	// request) waits for a person's answer.
	Waiting bool
	// LastFailed: the session's last finished turn failed.
	LastFailed bool
	// Stalled: the open turn's agent has said nothing for
	// session.stall-after (TurnStall).
	Stalled bool
}

// Status is the session's status: waiting while a request waits for an
// answer, stalled while an open turn's agent is silent, running while a
// turn is open otherwise, failed when the last turn failed,
// idle otherwise. It is the one place a status is derived: getSession's
// state, the history service's view of a lagging projection and every state
// change agree because each asks it.
func (f Facts) Status() events.SessionStatus {
	switch {
	case f.Waiting:
		return events.StatusWaiting
	case f.TurnOpen && f.Stalled:
		return events.StatusStalled
	case f.TurnOpen:
		return events.StatusRunning
	case f.LastFailed:
		return events.StatusFailed
	default:
		return events.StatusIdle
	}
}
