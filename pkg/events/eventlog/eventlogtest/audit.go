// Package eventlogtest checks a session's log against the invariants every
// Skein log must keep. Tests of any service that writes or reads logs use
// it after they are done with a session:
//
//	log := eventlogtest.Audit(t, js, "default", "s1")
//	if len(log.Turns) != 3 { ... }
package eventlogtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Turn is one turn as the log tells it.
type Turn struct {
	ID       string
	Accepted uint64 // sequence of the accepting record
	Finished uint64 // sequence of its TurnFinished
	Finish   *events.TurnFinished
	Records  []*eventlog.Record // every record of the turn, acceptance and finish included
}

// Log is a session's records, decoded and grouped.
type Log struct {
	Records []*eventlog.Record
	Events  []*eventlog.Record // the public events (LogEvents)
	Turns   []*Turn
}

// Outcomes returns the turns' outcomes in order.
func (l *Log) Outcomes() []string {
	out := make([]string, len(l.Turns))
	for i, t := range l.Turns {
		out[i] = t.Finish.Outcome
	}
	return out
}

// Audit reads every record of (ns, sid) and fails tb unless:
//   - sequences strictly increase and every payload decodes to the variant
//     its Acp-Record header names;
//   - public events are numbered contiguously (from 1 unless pruned);
//   - every accepted turn has exactly one TurnFinished, after it, and turns
//     do not overlap; nothing carries a turn's ID after its finish;
//   - no update is stored twice (same ACP_IO record, same payload) and no
//     message ID repeats;
//   - no turn is accepted twice.
func Audit(tb testing.TB, js jetstream.JetStream, ns events.Namespace, sid events.SessionID) *Log {
	tb.Helper()
	log, err := Read(tb.Context(), js, ns, sid)
	if err != nil {
		tb.Fatalf("audit %s/%s: %v", ns, sid, err)
	}
	for _, problem := range log.Check() {
		tb.Errorf("audit %s/%s: %s", ns, sid, problem)
	}
	return log
}

// Read loads the session's records and groups its turns, without judging.
func Read(ctx context.Context, js jetstream.JetStream, ns events.Namespace, sid events.SessionID) (*Log, error) {
	var recs []*eventlog.Record
	for r, err := range eventlog.Replay(ctx, js, events.StreamLog, events.LogFilter(ns, sid), 0) {
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return Group(ns, sid, recs), nil
}

// Group groups a session's records, in stream order, into its public
// events and its turns: for a reader that has the records already (caught
// from the tail, say, before a deletion purged them).
func Group(ns events.Namespace, sid events.SessionID, recs []*eventlog.Record) *Log {
	log := &Log{Records: recs}
	evSubject := events.LogSubject(ns, sid, events.LogEvents)
	var open *Turn
	for _, r := range recs {
		if r.Subject == evSubject {
			log.Events = append(log.Events, r)
		}
		id := r.Header.Get(events.HeaderTurnID)
		if r.Header.Get(events.HeaderTurnAccepted) != "" {
			open = &Turn{ID: id, Accepted: r.Sequence}
			log.Turns = append(log.Turns, open)
		}
		if open != nil && id == open.ID {
			open.Records = append(open.Records, r)
			if r.Header.Get(events.HeaderRecord) == events.RecordTurnFinished {
				if f, err := events.Decode[events.TurnFinished](r.Data); err == nil {
					open.Finish = f
					open.Finished = r.Sequence
				}
			}
		}
	}
	return log
}

// Check returns every invariant the log breaks, as sentences.
func (l *Log) Check() []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	var prev uint64
	msgIDs := map[string]uint64{}
	type applied struct {
		ioSeq string
		part  string
		data  string
	}
	updates := map[applied]uint64{}
	for _, r := range l.Records {
		if r.Sequence <= prev {
			add("record %d follows %d", r.Sequence, prev)
		}
		prev = r.Sequence
		v, err := events.Unmarshal(r.Data)
		if err != nil {
			add("record %d does not decode: %v", r.Sequence, err)
		} else if name := r.Header.Get(events.HeaderRecord); name != v.VariantName() {
			add("record %d is a %s but its header says %q", r.Sequence, v.VariantName(), name)
		}
		if id := r.Header.Get(jetstream.MsgIDHeader); id != "" {
			if first, dup := msgIDs[id]; dup {
				add("records %d and %d share message ID %s", first, r.Sequence, id)
			}
			msgIDs[id] = r.Sequence
		}
		if io := r.Header.Get(events.HeaderIOSeq); io != "" {
			k := applied{io, r.Header.Get(events.HeaderPart), string(r.Data)}
			if first, dup := updates[k]; dup {
				add("records %d and %d store the same update of ACP_IO record %s", first, r.Sequence, io)
			}
			updates[k] = r.Sequence
		}
	}

	if len(l.Events) > 0 {
		next := eventlog.EventNo(l.Events[0])
		if next == 0 {
			add("event %d has no event number", l.Events[0].Sequence)
		}
		for _, e := range l.Events {
			if n := eventlog.EventNo(e); n != next {
				add("event %d has eventNo %d, want %d", e.Sequence, n, next)
				next = n
			}
			next++
		}
	}

	accepted := map[string]bool{}
	for i, t := range l.Turns {
		if t.ID == "" {
			add("the turn accepted at %d has no turn ID", t.Accepted)
			continue
		}
		if accepted[t.ID] {
			add("turn %s is accepted twice", t.ID)
		}
		accepted[t.ID] = true
		finishes := 0
		for _, r := range t.Records {
			if r.Header.Get(events.HeaderRecord) == events.RecordTurnFinished {
				finishes++
			}
		}
		last := i == len(l.Turns)-1
		switch {
		case finishes == 0 && !last:
			add("turn %s (accepted at %d) never finished, yet turn %s followed", t.ID, t.Accepted, l.Turns[i+1].ID)
		case finishes > 1:
			add("turn %s finished %d times", t.ID, finishes)
		}
		if t.Finish != nil {
			for _, r := range t.Records {
				if r.Sequence > t.Finished {
					add("record %d of turn %s comes after its finish at %d", r.Sequence, t.ID, t.Finished)
				}
			}
			if t.Finish.TurnID != t.ID {
				add("turn %s is finished by a record of turn %s", t.ID, t.Finish.TurnID)
			}
		}
		if !last && t.Finish != nil && l.Turns[i+1].Accepted < t.Finished {
			add("turn %s was accepted at %d before turn %s finished at %d", l.Turns[i+1].ID, l.Turns[i+1].Accepted, t.ID, t.Finished)
		}
	}
	// A record that names a turn the log never accepted, or names a turn
	// after its finish, is an orphan.
	finishedAt := map[string]uint64{}
	for _, t := range l.Turns {
		finishedAt[t.ID] = t.Finished
	}
	for _, r := range l.Records {
		id := r.Header.Get(events.HeaderTurnID)
		if id == "" {
			continue
		}
		f, ok := finishedAt[id]
		if !ok {
			add("record %d names turn %s, which was never accepted", r.Sequence, id)
		} else if f != 0 && r.Sequence > f {
			add("record %d names turn %s after its finish at %d", r.Sequence, id, f)
		}
	}
	return problems
}

// Open returns the turn still running, if any: only the newest may be
// (Check fails a log where another is).
func (l *Log) Open() *Turn {
	if n := len(l.Turns); n > 0 && l.Turns[n-1].Finish == nil {
		return l.Turns[n-1]
	}
	return nil
}
