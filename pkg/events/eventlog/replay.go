package eventlog

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/nats-io/nats.go/jetstream"
)

// replayPull is how many records an ordered consumer asks for at once in
// Replay: enough that a replay is never waiting on a pull request.
const replayPull = 1000

// Replay yields the records on subject (which may hold wildcards, as
// LogFilter) with sequences greater than after, oldest first, up to the
// subject's newest record when Replay starts. It stops at the first error,
// which it yields with a nil record.
//
// It reads through a JetStream ordered consumer filtered on subject: the
// server pushes records while the previous ones are handled, so a whole
// session streams at the consumer's speed (measured in BenchmarkReplay
// beside a bare ordered consumer and a loop of batch direct gets, which
// waits a round trip per batch). Creating the consumer costs a round trip or
// two, so read a few records with Forward, and a whole session with Replay.
func Replay(ctx context.Context, js jetstream.JetStream, stream, subject string, after uint64) iter.Seq2[*Record, error] {
	return func(yield func(*Record, error) bool) {
		last, err := Last(ctx, js, stream, subject)
		if err != nil {
			yield(nil, fmt.Errorf("replay %s: %w", subject, err))
			return
		}
		if last == nil || last.Sequence <= after {
			return
		}
		cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subject},
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:    after + 1,
		})
		if err != nil {
			yield(nil, fmt.Errorf("replay %s: %w", subject, err))
			return
		}
		msgs, err := cons.Messages(jetstream.PullMaxMessages(replayPull))
		if err != nil {
			yield(nil, fmt.Errorf("replay %s: %w", subject, err))
			return
		}
		defer msgs.Stop()
		for {
			m, err := msgs.Next(jetstream.NextContext(ctx))
			if err != nil {
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					err = ctx.Err()
				}
				yield(nil, fmt.Errorf("replay %s: %w", subject, err))
				return
			}
			meta, err := m.Metadata()
			if err != nil {
				yield(nil, fmt.Errorf("replay %s: %w", subject, err))
				return
			}
			r := &Record{Subject: m.Subject(), Sequence: meta.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: meta.Timestamp}
			// NumPending is what the filter still matches past r: none
			// means the end, should the records up to last be gone.
			if !yield(r, nil) || r.Sequence >= last.Sequence || meta.NumPending == 0 {
				return
			}
		}
	}
}
