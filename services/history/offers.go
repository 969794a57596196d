package history

import (
	"context"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// currentBudget is the session's cap and spend as getSession shows them:
// the projection's, or, when it lags the log (last is newer), the newest
// BudgetChanged's if that is newer than the projection. A client whose
// turn ended budget_exhausted has read its TurnFinished, and is shown the
// spend that ended it.
func (s *Service) currentBudget(ctx context.Context, ns events.Namespace, sid events.SessionID, meta *events.SessionMeta, last *eventlog.Record) (*events.BudgetInfo, error) {
	if last == nil || last.Sequence <= meta.LogPosition {
		return meta.Info.Budget, nil
	}
	rec, err := eventlog.Last(ctx, s.js, events.StreamLog, events.BudgetSubject(ns, sid))
	if err != nil {
		return nil, unavailable(err)
	}
	if rec == nil || rec.Sequence <= meta.LogPosition {
		return meta.Info.Budget, nil
	}
	b, err := events.Decode[events.BudgetChanged](rec.Data)
	if err != nil {
		return nil, err
	}
	return b.Info(), nil
}

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
