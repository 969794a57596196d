package session

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
)

// logReader reads one session's records in ACP_LOG. It changes nothing:
// the session's owner writes through its eventlog.Writer (append.go).
type logReader struct {
	lg  *slog.Logger
	js  jetstream.JetStream
	ns  events.Namespace
	sid events.SessionID
}

// logOf reads the log of session sid of namespace ns.
func (s *Service) logOf(ns events.Namespace, sid events.SessionID) logReader {
	return logReader{lg: s.lg, js: s.js, ns: ns, sid: sid}
}

// opened returns the record that opened the session, or nil: the last one
// on the session's OpenedSubject.
func (l logReader) opened(ctx context.Context) (*eventlog.Record, error) {
	return eventlog.Last(ctx, l.js, events.StreamLog, events.OpenedSubject(l.ns, l.sid))
}

// title returns the session's title and where it came from, as its
// newest TitleChanged record says, ignoring one older than the session's
// opening at opened (left by a session of the same ID that was deleted,
// if its purge failed): "" when it has none.
func (l logReader) title(ctx context.Context, opened uint64) (title, source string, err error) {
	rec, err := eventlog.Last(ctx, l.js, events.StreamLog, events.TitleSubject(l.ns, l.sid))
	if err != nil {
		return "", "", events.Errorf(events.CodeUnavailable, "read the title of %s: %v", l.sid, err)
	}
	if rec == nil || rec.Sequence < opened {
		return "", "", nil
	}
	tc, err := events.Decode[events.TitleChanged](rec.Data)
	if err != nil {
		// Only a bug writes one that does not decode: the session goes on
		// without a title rather than not at all.
		l.lg.Error("undecodable title record", events.LogKeyNamespace, string(l.ns), events.LogKeySession, string(l.sid),
			events.LogKeySeq, rec.Sequence, events.LogKeyErr, err)
		return "", "", nil
	}
	return tc.Title, tc.Source, nil
}

// forked returns the SessionForked that follows the session's opening
// record (at sequence opened), in the same append, or nil when there is
// none.
func (l logReader) forked(ctx context.Context, opened uint64) (*events.SessionForked, error) {
	recs, err := eventlog.Forward(ctx, l.js, events.StreamLog, events.LogSubject(l.ns, l.sid, events.LogControl), opened, 1)
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "read log of %s: %v", l.sid, err)
	}
	if len(recs) == 0 || recs[0].Sequence != opened+1 || recs[0].Header.Get(events.HeaderRecord) != events.RecordSessionForked {
		return nil, nil
	}
	return events.Decode[events.SessionForked](recs[0].Data)
}

// budget returns the session's cap and spend, as its newest
// BudgetChanged record says, ignoring one older than the session's opening
// at opened (as title does): none when it has none.
func (l logReader) budget(ctx context.Context, opened uint64) (events.BudgetChanged, error) {
	rec, err := eventlog.Last(ctx, l.js, events.StreamLog, events.BudgetSubject(l.ns, l.sid))
	if err != nil {
		return events.BudgetChanged{}, events.Errorf(events.CodeUnavailable, "read the budget of %s: %v", l.sid, err)
	}
	if rec == nil || rec.Sequence < opened {
		return events.BudgetChanged{}, nil
	}
	b, err := events.Decode[events.BudgetChanged](rec.Data)
	if err != nil {
		return events.BudgetChanged{}, events.Errorf(events.CodeInternal, "undecodable budget record of %s at %d: %v", l.sid, rec.Sequence, err)
	}
	return *b, nil
}

// records reads the session's records from start to end, inclusive: a
// turn's, from its acceptance.
func (l logReader) records(ctx context.Context, start, end uint64) ([]*eventlog.Record, error) {
	var out []*eventlog.Record
	after := start - 1
	for after < end {
		recs, err := eventlog.Forward(ctx, l.js, events.StreamLog, events.LogFilter(l.ns, l.sid), after, 1000)
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if r.Sequence <= end {
				out = append(out, r)
			}
		}
		after = recs[len(recs)-1].Sequence
	}
	if len(out) == 0 || out[0].Sequence != start {
		return nil, fmt.Errorf("the turn's accepting record %d is gone", start)
	}
	return out, nil
}

// holdsUserMessage reports whether the session's log holds a user message
// of a prompt (a turn was ever accepted here), reading its public events
// from the oldest. History pruned from the front means it was used.
func (l logReader) holdsUserMessage(ctx context.Context) (bool, error) {
	subject := events.LogSubject(l.ns, l.sid, events.LogEvents)
	var after uint64
	for read := 0; read < maxDiscardScan; {
		recs, err := eventlog.Forward(ctx, l.js, events.StreamLog, subject, after, 256)
		if err != nil {
			return false, events.Errorf(events.CodeUnavailable, "read log of %s: %v", l.sid, err)
		}
		if len(recs) == 0 {
			return false, nil
		}
		if read == 0 && eventlog.EventNo(recs[0]) > 1 {
			return true, nil // pruned: something was there
		}
		if slices.ContainsFunc(recs, userPrompt) {
			return true, nil
		}
		read += len(recs)
		after = recs[len(recs)-1].Sequence
	}
	return true, nil
}

// preamble builds the continuation preamble from the session's updates
// before the log sequence before (permission events left out), newest
// first until maxBytes, then written oldest first.
func (l logReader) preamble(ctx context.Context, before uint64, maxBytes int) (string, error) {
	recs, err := eventlog.Backward(ctx, l.js, events.StreamLog, events.LogSubject(l.ns, l.sid, events.LogEvents),
		before, preambleEvents)
	if err != nil {
		return "", err
	}
	budget := maxBytes - len(preambleHead)
	var lines []string
	for _, r := range slices.Backward(recs) {
		u, err := events.Decode[events.AcpDurableSessionUpdate](r.Data)
		if err != nil {
			continue // a permission event
		}
		if k, _ := eventjson.Type(u.Update); k == acp.UpdateUserMessageChunk && !userPrompt(r) {
			// The agent said the user said it: never the user's words to
			// the agent that takes over (agentupdate.go).
			continue
		}
		if len(u.Update)+1 > budget {
			break
		}
		budget -= len(u.Update) + 1
		lines = append(lines, string(u.Update))
	}
	if len(lines) == 0 {
		return "", nil
	}
	slices.Reverse(lines)
	return preambleHead + strings.Join(lines, "\n") + "\n", nil
}

// keyedOutcome looks up the finished turn of an earlier prompt with the same
// idempotency key: its TurnFinished lives on the key's own subject. It
// returns that turn, finished, nil when the key was never used, or
// idempotency_conflict when it was used for other content.
func (l logReader) keyedOutcome(ctx context.Context, key, hash string) (*events.PromptAccepted, error) {
	rec, err := eventlog.Last(ctx, l.js, events.StreamLog, events.KeySubject(l.ns, l.sid, key))
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "look up idempotency key: %v", err)
	}
	if rec == nil {
		return nil, nil
	}
	f, err := events.Decode[events.TurnFinished](rec.Data)
	if err != nil {
		return nil, err
	}
	if f.IdempotencyKey == nil || *f.IdempotencyKey != key {
		return nil, nil // a hash collision of two keys: treat as unused
	}
	if f.ContentHash != hash {
		return nil, idempotencyConflict(key)
	}
	start, _ := strconv.ParseUint(rec.Header.Get(events.HeaderTurnStart), 10, 64)
	return &events.PromptAccepted{SessionID: string(l.sid), TurnID: f.TurnID, Sequence: start, Finished: f}, nil
}
