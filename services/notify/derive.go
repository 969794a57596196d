package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/webhook"
)

// The subjects whose records can raise a notification: control records
// (TurnFinished, TurnStall), keyed prompts' TurnFinished, and public events
// (permission and input requests). Titles and the opened record cannot.
var deriveSubjects = []string{"acp.log.*.*.ctl", "acp.log.*.*.key.*", "acp.log.*.*.ev"}

// deriverAckWait is how long a record handed to the deriver stays its own:
// its notification is one publish away.
const deriverAckWait = 30 * time.Second

// startDeriver creates (or finds) the durable consumer on ACP_LOG and
// consumes it. A consumer created now starts at the log's end: what was
// logged before notifications existed raises none.
func (s *Service) startDeriver(ctx context.Context) (jetstream.ConsumeContext, error) {
	cons, err := s.js.CreateOrUpdateConsumer(ctx, events.StreamLog, jetstream.ConsumerConfig{
		Durable:        DeriverConsumer,
		Description:    "Skein notify: notifications derived from the session logs",
		FilterSubjects: deriveSubjects,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        deriverAckWait,
		MaxAckPending:  10_000,
	})
	if err != nil {
		return nil, fmt.Errorf("notify: consumer on %s: %w", events.StreamLog, err)
	}
	return cons.Consume(func(msg jetstream.Msg) { s.derive(ctx, msg) },
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				s.lg.Debug("deriver consume", events.LogKeyErr, err)
			}
		}))
}

// derive publishes the notification msg raises, if any, then acks msg. A
// record that fails to publish is not acked: it comes back, and its
// Nats-Msg-Id keeps a second publish from storing it twice.
func (s *Service) derive(ctx context.Context, msg jetstream.Msg) {
	body, ns, err := notification(msg)
	if err != nil {
		s.lg.Warn("log record not notified", "subject", msg.Subject(), events.LogKeyErr, err)
		_ = msg.Term()
		return
	}
	if body == nil {
		_ = msg.Ack()
		return
	}
	md, _ := msg.Metadata()
	data, err := body.Marshal()
	if err == nil {
		out := &nats.Msg{Subject: events.NotifySubject(ns, body.Type), Data: data, Header: nats.Header{}}
		out.Header.Set(jetstream.MsgIDHeader, webhook.EventID(md.Sequence.Stream))
		_, err = s.js.PublishMsg(ctx, out)
	}
	if err != nil {
		s.lg.Warn("notification not stored, retried", "type", body.Type, events.LogKeyErr, err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	s.metrics.events.WithLabelValues(body.Type).Inc()
	_ = msg.Ack()
}

// notification returns the notification a log record raises, nil if none.
func notification(msg jetstream.Msg) (*webhook.Body, events.Namespace, error) {
	kind := msg.Headers().Get(events.HeaderRecord)
	switch kind {
	case events.RecordTurnFinished, events.RecordTurnStall, "AcpDurablePermissionRequest", "InputRequest":
	default:
		return nil, "", nil
	}
	ns, sid, ok := subjectSession(msg.Subject())
	if !ok {
		return nil, "", fmt.Errorf("not a session's log subject")
	}
	md, err := msg.Metadata()
	if err != nil {
		return nil, "", err
	}
	d := webhook.Data{SessionID: string(sid), Sequence: md.Sequence.Stream, TurnID: msg.Headers().Get(events.HeaderTurnID)}
	v, err := events.Unmarshal(msg.Data())
	if err != nil {
		return nil, "", err
	}
	var typ string
	switch r := v.(type) {
	case *events.TurnFinished:
		d.TurnID, d.Outcome, d.StopReason = r.TurnID, r.Outcome, r.StopReason
		switch {
		case r.Outcome == events.OutcomeBudgetExhausted:
			// budget.exhausted alone, not also turn.failed or
			// turn.finished: a receiver that takes both would act twice
			// on one end.
			typ = webhook.TypeBudgetExhausted
		case r.Failed():
			typ = webhook.TypeTurnFailed
			f := r.Failure()
			d.ErrorCode, d.Message = f.Code, events.Truncate(f.Message, 1024)
		default:
			typ = webhook.TypeTurnFinished
		}
	case *events.TurnStall:
		if !r.Stalled {
			return nil, "", nil
		}
		typ, d.QuietMs = webhook.TypeSessionStalled, r.QuietMs
	case *events.AcpDurablePermissionRequest:
		typ, d.Kind, d.RequestID = webhook.TypeSessionWaiting, webhook.KindPermission, r.RequestID
	case *events.InputRequest:
		typ, d.Kind, d.RequestID = webhook.TypeSessionWaiting, webhook.KindInput, r.RequestID
	default:
		return nil, "", nil
	}
	return webhook.NewBody(typ, md.Timestamp, d), ns, nil
}
