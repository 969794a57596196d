package session

import (
	"context"
	"time"

	"skein.dev/pkg/events"
)

func (s *Service) handleOpen(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpOpenSessionRequest](data)
	if err != nil {
		return nil, err
	}
	sid, err := events.OptionalSessionID(req.SessionID)
	if err != nil {
		return nil, err
	}
	opened, err := s.normalizeOpen(req)
	if err != nil {
		return nil, err
	}
	sess := s.session(ns, sid)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.open(ctx, opened); err != nil {
		return nil, err
	}
	return &events.AcpOpenSessionResponse{}, nil
}

func (s *Service) handlePrompt(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpPromptRequest](data)
	if err != nil {
		return nil, err
	}
	sid, err := events.OptionalSessionID(req.SessionID)
	if err != nil {
		return nil, err
	}
	blocks, err := s.validatePrompt(req.Content)
	if err != nil {
		return nil, err
	}
	if err := validateIdempotencyKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	return s.session(ns, sid).prompt(ctx, req, blocks)
}

// requestFor decodes a request of type T and finds the session it names
// through id (omitted: main).
func requestFor[T any, PT interface {
	*T
	events.Variant
}](s *Service, ns events.Namespace, data []byte, id func(PT) *string) (PT, *session, error) {
	req, err := events.Decode[T, PT](data)
	if err != nil {
		return nil, nil, err
	}
	sid, err := events.OptionalSessionID(id(req))
	if err != nil {
		return nil, nil, err
	}
	return req, s.session(ns, sid), nil
}

func (s *Service) handleCancel(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	arrived := time.Now()
	_, sess, err := requestFor(s, ns, data, func(r *events.AcpCancelPromptRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	return sess.cancel(ctx, arrived)
}

func (s *Service) handleRespond(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpRespondPermissionRequest](data)
	if err != nil {
		return nil, err
	}
	sid, err := req.Validate()
	if err != nil {
		return nil, err
	}
	return s.session(ns, sid).respond(ctx, req.RequestID, req.OptionID)
}

func (s *Service) handleUnload(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	_, sess, err := requestFor(s, ns, data, func(r *events.AcpUnloadSessionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	if err := sess.unload(ctx, events.UnloadRequested); err != nil {
		return nil, err
	}
	return &events.AcpUnloadSessionResponse{}, nil
}

func (s *Service) handleDelete(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	_, sess, err := requestFor(s, ns, data, func(r *events.AcpDeleteSessionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	if err := sess.delete(ctx); err != nil {
		return nil, err
	}
	return &events.AcpDeleteSessionResponse{}, nil
}

func (s *Service) handleSetConfig(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor(s, ns, data, func(r *events.AcpSetSessionConfigOptionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	if req.ConfigID == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "configId is required")
	}
	return sess.setConfigOption(ctx, req.ConfigID, req.Value)
}
