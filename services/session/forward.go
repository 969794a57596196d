package session

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// routed serves op for sessions this replica owns, and forwards requests
// for sessions another replica owns to it. A forwarded request whose owner
// is gone (nobody serves its subject) evicts that lease and is served here.
func (s *Service) routed(op events.Op, h rpc.OpHandler) rpc.OpHandler {
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
		return s.afterEviction(ctx, ns, op, data, h, moved.owner)
	}
}

// afterEviction serves a request for a session whose dead owner's lease was
// just evicted. Another replica may have taken the session meanwhile: the
// request is forwarded to it. And the lease is read with a direct get,
// which a replica of the bucket that has not applied the delete yet may
// answer with the dead owner still in it: the request is served again, a
// few times over about a second, while the lease still names that owner.
func (s *Service) afterEviction(ctx context.Context, ns events.Namespace, op events.Op, data []byte, h rpc.OpHandler, dead string) (events.Variant, error) {
	wait := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		v, err := h(ctx, ns, data)
		moved, ok := errors.AsType[*ownedElsewhere](err)
		switch {
		case !ok:
			return v, err
		case moved.owner != dead:
			s.m.forwards.Inc()
			return s.forward(ctx, ns, op, data, moved)
		case attempt == 4:
			return v, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return v, err
		}
		wait *= 2
	}
}

// forward passes a request to the session's owner and returns its answer.
// Every request is short: a prompt is answered once its turn is accepted,
// and its caller then waits on the log, not on this replica. The wait is
// bounded by what the slowest acceptance may take (a restore, then a
// cancelled prompt's drain, then the dispatch).
func (s *Service) forward(ctx context.Context, ns events.Namespace, op events.Op, data []byte, to *ownedElsewhere) (events.Variant, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AttachTimeout+s.cfg.CancelGrace+s.cfg.CallTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: events.OwnerSubject(to.owner, ns, op), Data: data}
	// The principal counts against its quota on the owner, and an
	// eviction is one there too (evict.go): their headers go along.
	for _, h := range []string{events.HeaderPrincipal, events.HeaderEvict} {
		if v := rpc.RequestHeaders(ctx).Get(h); v != "" {
			if msg.Header == nil {
				msg.Header = nats.Header{}
			}
			msg.Header.Set(h, v)
		}
	}
	return rpc.RequestMsg(ctx, s.nc, msg)
}
