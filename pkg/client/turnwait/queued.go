package turnwait

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// AwaitStart waits until queue entry qid of session sid leaves the queue,
// reading its records from the log (a prompt sent with queue is answered
// Queued, without a turn: docs/API.md, The prompt queue), and returns the
// acceptance of the turn it started as, for Await. An entry that was
// withdrawn is prompt_dequeued; one that could not start, its error.
func AwaitStart(ctx context.Context, js jetstream.JetStream, ns events.Namespace, sid events.SessionID, qid string) (*events.PromptAccepted, error) {
	cons, err := js.OrderedConsumer(ctx, events.StreamLog, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.QueueSubject(ns, sid, qid)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "follow queue entry %s: %v", qid, err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "follow queue entry %s: %v", qid, err)
	}
	defer msgs.Stop()
	for {
		m, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil, events.Errorf(events.CodeTimeout, "queue entry %s did not start in time", qid)
			}
			return nil, events.Errorf(events.CodeUnavailable, "follow queue entry %s: %v", qid, err)
		}
		if m.Headers().Get(events.HeaderRecord) != events.RecordPromptDequeued {
			continue
		}
		d, err := events.Decode[events.PromptDequeued](m.Data())
		if err != nil {
			return nil, err
		}
		switch {
		case d.Reason == events.DequeueStarted:
			meta, err := m.Metadata()
			if err != nil {
				return nil, events.Errorf(events.CodeUnavailable, "follow queue entry %s: %v", qid, err)
			}
			// The entry's PromptDequeued ends its turn's accepting append.
			block, _ := strconv.ParseUint(m.Headers().Get(events.HeaderTurnBlock), 10, 64)
			return &events.PromptAccepted{SessionID: string(sid), TurnID: d.TurnID, Sequence: meta.Sequence.Stream - block}, nil
		case d.Error != nil:
			return nil, &events.Error{Code: events.Code(d.Error.Code), Message: d.Error.Message}
		default:
			return nil, events.Errorf(events.CodePromptDequeued, "queue entry %s of session %s was %s", qid, sid, d.Reason)
		}
	}
}
