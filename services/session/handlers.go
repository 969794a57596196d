package session

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

func (s *Service) handleOpen(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.AcpOpenSessionRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	opened := s.normalizeOpen(req, ns, sess.sid)
	opened.CreatedBy = principal(ctx) // a reopen by another is no conflict: sameOptions
	if err := s.checkOpen(ctx, ns, opened); err != nil {
		return nil, err
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.open(ctx, opened, req.Budget); err != nil {
		return nil, err
	}
	return &events.AcpOpenSessionResponse{}, nil
}

func (s *Service) handlePrompt(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpPromptRequest](data)
	if err != nil {
		return nil, err
	}
	lim := events.PromptLimits{MaxBytes: s.cfg.MaxPromptBytes, MaxBlocks: s.cfg.MaxPromptBlocks}
	sid, err := req.Validate(lim)
	if err != nil {
		return nil, err
	}
	blocks, err := events.PromptBlocks(req.Content, lim) // checked: this only splits
	if err != nil {
		return nil, err
	}
	if err := checkAttachmentRefs(blocks); err != nil {
		return nil, err
	}
	return s.session(ns, sid).prompt(ctx, req, blocks)
}

// requestFor decodes a request of type T, validates it (pkg/events holds
// every request's rules, which the gateway applies too), and finds the
// session it names (omitted: main).
func requestFor[T any, PT interface {
	*T
	events.Variant
	Validate() (events.SessionID, error)
}](s *Service, ns events.Namespace, data []byte) (PT, *session, error) {
	req, err := events.Decode[T, PT](data)
	if err != nil {
		return nil, nil, err
	}
	sid, err := req.Validate()
	if err != nil {
		return nil, nil, err
	}
	return req, s.session(ns, sid), nil
}

func (s *Service) handleCancel(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	arrived := time.Now()
	_, sess, err := requestFor[events.AcpCancelPromptRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return sess.cancel(ctx, arrived)
}

func (s *Service) handleRespond(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.AcpRespondPermissionRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return sess.respond(ctx, req.RequestID, req.OptionID)
}

func (s *Service) handleUnload(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	_, sess, err := requestFor[events.AcpUnloadSessionRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	if cause := rpc.RequestHeaders(ctx).Get(events.HeaderEvict); cause != "" {
		if err := sess.evictIfIdle(ctx, cause); err != nil {
			return nil, err
		}
		return &events.AcpUnloadSessionResponse{}, nil
	}
	sess.mu.Lock()
	err = sess.unload(ctx, events.UnloadRequested)
	sess.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &events.AcpUnloadSessionResponse{}, nil
}

func (s *Service) handleDelete(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	_, sess, err := requestFor[events.AcpDeleteSessionRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	sess.mu.Lock()
	err = sess.delete(ctx)
	sess.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &events.AcpDeleteSessionResponse{}, nil
}

// handleWithdraw serves OpWithdrawPrompt (queue.go).
func (s *Service) handleWithdraw(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.WithdrawPromptRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	sess.mu.Lock()
	err = withdraw(ctx, sess, req.QueueID)
	sess.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &events.PromptWithdrawn{QueueID: req.QueueID}, nil
}

// handleRename serves OpRenameSession. The request's Validate applies the
// title rules (events.NormalizeTitle); a bad title changes nothing.
func (s *Service) handleRename(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.RenameSessionRequest](data)
	if err != nil {
		return nil, err
	}
	sid, title, err := req.Validate()
	if err != nil {
		return nil, err
	}
	return s.session(ns, sid).rename(ctx, title, req.Budget)
}

func (s *Service) handleSetConfig(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.AcpSetSessionConfigOptionRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return sess.setConfigOption(ctx, req.ConfigID, req.Value)
}

// principal is the principal the gateway authenticated for the request
// ctx serves (events.HeaderPrincipal): its token's name, "" for a caller
// that named none.
func principal(ctx context.Context) string {
	return rpc.RequestHeaders(ctx).Get(events.HeaderPrincipal)
}

// principalHeader records principal p on a log record, as who caused it:
// a user message, an answer to a request, a cancel. Nil for none.
func principalHeader(p string) nats.Header {
	if p == "" {
		return nil
	}
	return nats.Header{events.HeaderPrincipal: []string{p}}
}
