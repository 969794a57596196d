package history

import (
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// lastTurnTiming is the session's last turn's timing as getSession shows
// it. The projection has it once its writer projects the end of the turn,
// which comes after the turn's TurnFinished in the log; a client whose
// prompt returned has read that TurnFinished, and is shown its timing even
// when the projection lags: last, the session's newest record, is that
// TurnFinished then. A TurnFinished without timing (a turn another replica
// took over, which measured nothing) leaves the previous turn's in place,
// as the session service does.
func lastTurnTiming(meta *events.SessionMeta, last *eventlog.Record) *events.TurnTiming {
	if last == nil || last.Sequence <= meta.LogPosition || last.Header.Get(events.HeaderRecord) != events.RecordTurnFinished {
		return meta.Info.LastTurnTiming
	}
	f, err := events.Decode[events.TurnFinished](last.Data)
	if err != nil || f.Timing == nil {
		return meta.Info.LastTurnTiming
	}
	return f.Timing
}
