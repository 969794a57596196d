package gatewaytest

import (
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// renameSession plays rename_session as the session service does: the
// title rules (the request's Validate), a TitleChanged on the session's
// title subject, the projection, and the session as the answer.
func (b *Backend) renameSession(ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.RenameSessionRequest](data)
	if err != nil {
		return nil, err
	}
	b.remember(events.OpRenameSession, req)
	sid, title, err := req.Validate()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.sessionLocked(ns, sid)
	if err != nil {
		return nil, err
	}
	if _, err := b.appendLocked(s, eventlog.Entry{
		Kind:    events.LogControl,
		Subject: events.TitleSubject(ns, sid),
		Value:   &events.TitleChanged{Title: title, Source: events.TitleRenamed},
	}); err != nil {
		return nil, err
	}
	s.meta.Info.Title = new(title)
	b.projectLocked(s)
	return &events.RenameSessionResponse{Session: s.meta.Info}, nil
}
