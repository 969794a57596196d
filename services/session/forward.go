package session

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// routed serves op for sessions this replica owns, and forwards requests
// for sessions another replica owns to it. A forwarded request whose owner
// is gone (nobody serves its subject) evicts that lease and is served here.
func (s *Service) routed(op events.Op, h events.OpHandler) events.OpHandler {
	return func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
		v, err := h(ctx, ns, data)
		moved, ok := errors.AsType[*ownedElsewhere](err)
		if !ok {
			return v, err
		}
		s.m.forwards.Inc()
		v, err = s.forward(ctx, ns, op, data, moved)
		if err == nil || events.AsError(err).Code != events.CodeUnavailable || s.answers(ctx, moved.owner) {
			return v, err
		}
		s.evictLease(ctx, moved)
		return h(ctx, ns, data)
	}
}

// forward passes a request to the session's owner and returns its answer.
// While it waits (a prompt waits through its turn), the lease is checked
// every third of its TTL: when it leaves that owner, waiting ends with a
// retryable error.
func (s *Service) forward(ctx context.Context, ns events.Namespace, op events.Op, data []byte, to *ownedElsewhere) (events.Variant, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go every(ctx, s.cfg.OwnerTTL/3, func() bool {
		e, err := s.owners.Get(ctx, to.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && string(e.Value()) != to.owner) {
			cancel(events.Errorf(events.CodeUnavailable, "the owner of session %s changed while the request waited; retry", to.key))
			return false
		}
		return true
	})
	v, err := events.RequestMsg(ctx, s.nc, &nats.Msg{Subject: events.OwnerSubject(to.owner, ns, op), Data: data})
	if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && err != nil {
		return nil, cause
	}
	return v, err
}
