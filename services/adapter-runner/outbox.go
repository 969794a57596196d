package adapterrunner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// The edge outbox. A runner on a developer's machine (skein runner --join)
// reaches the hub over a leaf link that drops: the laptop sleeps, the
// Wi-Fi changes. Its adapters must go on meanwhile, and none of their
// output may be lost, so the runner does not publish their records to the
// hub's ACP_IO directly. Each process's window (iowindow.go) stores its
// records in OutboxStream, a stream of the local leaf node's own JetStream
// on the runner's disk, which takes them whether or not the link is up;
// the Outbox forwards that stream's records to ACP_IO, in order, each
// under its own subject and Nats-Msg-Id, through a window of its own that
// sends again until the hub stores it, and removes what the hub stored.
//
// The stream is bounded (Config.OutboxBytes, discard new): a link down so
// long that it fills makes the local store refuse, the process's window
// keeps what it holds and retries, and the adapter blocks on its pipe, as
// with a full store at the hub. A runner restarted while the link is down
// finds the stream on its disk and forwards it once the link is back: the
// output of adapters that died with the runner still arrives, in order.

const (
	// OutboxStream is the local stream of an edge runner's records.
	OutboxStream = "SKEIN_OUTBOX"
	// outboxPrefix is put before a record's ACP_IO subject in the outbox.
	outboxPrefix = "skein.outbox."
	// OutboxSubjects are the outbox's subjects, which never leave the
	// edge runner's leaf node.
	OutboxSubjects = outboxPrefix + ">"
	// DefaultOutboxBytes bounds the outbox: hours of a busy agent's output.
	DefaultOutboxBytes = 1 << 30
	// outboxConfirmEvery is how often the records the hub stored are
	// removed from the outbox.
	outboxConfirmEvery = 200 * time.Millisecond
)

// Outbox is an edge runner's outbox: Publisher is what its windows
// publish to, Run forwards.
type Outbox struct {
	local jetstream.JetStream
	hub   jetstream.JetStream
	str   jetstream.Stream
	lg    *slog.Logger
	m     *metrics

	mu sync.Mutex
	// done are the outbox sequences the hub stored (or refused for
	// good), not yet removed; next is the lowest not yet removed.
	done map[uint64]bool
	next uint64
}

// OutboxConfig makes a runner an edge runner: its records go to the hub
// through an outbox in Local, the JetStream of its own leaf node.
type OutboxConfig struct {
	Local jetstream.JetStream
	// MaxBytes bounds the outbox (DefaultOutboxBytes when 0).
	MaxBytes int64
}

// openOutbox makes (or finds) the outbox stream in local, of at most
// maxBytes, for records to be forwarded to hub.
func openOutbox(ctx context.Context, local, hub jetstream.JetStream, maxBytes int64, lg *slog.Logger, m *metrics) (*Outbox, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultOutboxBytes
	}
	str, err := local.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        OutboxStream,
		Description: "an edge runner's ACP_IO records, until the hub stores them",
		Subjects:    []string{OutboxSubjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    maxBytes,
		Duplicates:  2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("outbox stream: %w", err)
	}
	return &Outbox{local: local, hub: hub, str: str, lg: lg.With("outbox", OutboxStream), m: m, done: map[uint64]bool{}}, nil
}

// publisher is the JetStream an edge runner's windows publish to: the
// local one, each record under outboxPrefix.
type publisher struct{ jetstream.JetStream }

func (p publisher) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return p.JetStream.PublishMsgAsync(&nats.Msg{Subject: outboxPrefix + m.Subject, Header: m.Header, Data: m.Data}, opts...)
}

// Publisher is what the runner's process windows publish through.
func (o *Outbox) Publisher() jetstream.JetStream { return publisher{o.local} }

// Run forwards the outbox to the hub until ctx ends. What the hub has not
// acknowledged then stays in the outbox, for the next Run.
func (o *Outbox) Run(ctx context.Context) error {
	err := o.run(ctx)
	if ctx.Err() != nil {
		return nil // stopped
	}
	return err
}

func (o *Outbox) run(ctx context.Context) error {
	info, err := o.str.Info(ctx)
	if err != nil {
		return fmt.Errorf("outbox stream: %w", err)
	}
	o.mu.Lock()
	o.next = max(info.State.FirstSeq, 1) // 0 in a stream never written
	o.mu.Unlock()
	w := newIOWindow(o.hub, o.lg, o.m, DefaultIOWindowRecords, DefaultIOWindowBytes)
	w.finished = o.finished
	// Stopping the window also frees an add waiting for room in it.
	stopWindow := context.AfterFunc(ctx, w.stop)
	defer func() {
		stopWindow()
		w.stop()
		<-w.done
	}()
	cons, err := o.str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("outbox consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("outbox consumer: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var confirming sync.WaitGroup
	defer confirming.Wait()
	confirming.Go(func() {
		t := time.NewTicker(outboxConfirmEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				o.confirm(ctx)
			}
		}
	})
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("outbox consumer: %w", err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("outbox record: %w", err)
		}
		w.add(md.Sequence.Stream, &nats.Msg{Subject: strings.TrimPrefix(msg.Subject(), outboxPrefix), Header: msg.Headers(), Data: msg.Data()})
	}
}

// finished notes that the hub stored outbox record seq, or refused it for
// good.
func (o *Outbox) finished(seq uint64) {
	o.mu.Lock()
	o.done[seq] = true
	o.mu.Unlock()
}

// confirm removes from the outbox every record up to the first the hub
// has not stored.
func (o *Outbox) confirm(ctx context.Context) {
	o.mu.Lock()
	upTo := o.next
	for o.done[upTo] {
		delete(o.done, upTo)
		upTo++
	}
	from := o.next
	o.mu.Unlock()
	if upTo == from {
		return
	}
	if err := o.str.Purge(ctx, jetstream.WithPurgeSequence(upTo)); err != nil {
		o.lg.Warn("remove stored records from the outbox", events.LogKeyErr, err)
		// Tried again at the next tick: put them back.
		o.mu.Lock()
		for s := from; s < upTo; s++ {
			o.done[s] = true
		}
		o.mu.Unlock()
		return
	}
	o.mu.Lock()
	o.next = upTo
	o.mu.Unlock()
}
