package sessionstate

import (
	"slices"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// ApplyQueue brings a session's prompt queue, as its info lists it, up to
// one record of a queue entry's subject (events.QueueSubject): a
// PromptQueued adds its entry (once), a PromptDequeued takes it out, and
// the positions are numbered again. The session service rebuilding a
// queue and the history service reading a lagging projection both fold
// the records after the projection with it.
func ApplyQueue(q []events.QueuedPrompt, r *eventlog.Record) ([]events.QueuedPrompt, error) {
	v, err := events.Unmarshal(r.Data)
	if err != nil {
		return q, err
	}
	switch rec := v.(type) {
	case *events.PromptQueued:
		if !slices.ContainsFunc(q, func(p events.QueuedPrompt) bool { return p.ID == rec.QueueID }) {
			q = append(q, events.QueuedPrompt{ID: rec.QueueID, Content: rec.Content, Principal: r.Header.Get(events.HeaderPrincipal),
				QueuedAt: r.Time.UTC().Format(events.TimestampFormat), IdempotencyKey: rec.IdempotencyKey})
		}
	case *events.PromptDequeued:
		q = slices.DeleteFunc(q, func(p events.QueuedPrompt) bool { return p.ID == rec.QueueID })
	}
	for i := range q {
		q[i].Position = uint32(i + 1)
	}
	return q, nil
}
