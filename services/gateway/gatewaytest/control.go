package gatewaytest

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Cancels, unloads, deletes and permission requests, as the session
// service plays them:
//
//   - cancel_prompt ends the turn being played: its context is cancelled,
//     its pending permission requests end as terminal (prompt_cancelled),
//     and its TurnFinished is cancelled (stopReason "cancelled") whatever
//     the PromptFunc returns. Without a running turn the status is
//     no_active_prompt.
//   - unload_session ends the turn being played as cancel_prompt does,
//     records SessionUnloaded and marks the session unloaded (see
//     Unloaded); metadata and history stay, and the next prompt restores
//     it. Unloading twice succeeds.
//   - delete_session ends the turn being played as cancel_prompt does,
//     except that its pending permission requests end with
//     session_deleted, then appends the SessionDeleted tombstone, purges
//     the rest of the session's log and removes its projection: get_session
//     and read_history answer session_not_found, and open_session of the
//     ID starts a new, empty session after the tombstone. Deleting a
//     missing or already deleted session succeeds.
//   - Turn.RequestPermission stores a permission_request event and keeps
//     the request pending until respond_permission answers it, or the turn
//     is cancelled or ends. getSession's state is then "waiting" with the
//     pending requests.
//   - respond_permission accepts an option on offer (stored as an accepted
//     permission_response), rejects one that is not with
//     invalid_permission_option, and answers not_pending, with the reason,
//     for a request that is no longer (or never was) pending.

// CancelFunc answers a cancel_prompt in place of the default, for the
// session sid of ns, which exists.
type CancelFunc func(ctx context.Context, ns events.Namespace, sid events.SessionID) (*events.AcpCancelPromptResponse, error)

// UnloadFunc answers an unload_session in place of the default, for the
// session sid of ns, which exists.
type UnloadFunc func(ctx context.Context, ns events.Namespace, sid events.SessionID) (*events.AcpUnloadSessionResponse, error)

// RespondFunc answers a respond_permission in place of the default. req
// names an existing session.
type RespondFunc func(ctx context.Context, ns events.Namespace, req *events.AcpRespondPermissionRequest) (*events.AcpRespondPermissionResponse, error)

// OnCancel replaces how cancel_prompt is answered; nil restores the
// default.
func (b *Backend) OnCancel(fn CancelFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onCancel = fn
}

// OnUnload replaces how unload_session is answered; nil restores the
// default.
func (b *Backend) OnUnload(fn UnloadFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onUnload = fn
}

// Unloaded reports whether the session was unloaded and not prompted
// since.
func (b *Backend) Unloaded(ns events.Namespace, sid events.SessionID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	return ok && s.unloaded
}

// OnRespond replaces how respond_permission is answered; nil restores the
// default.
func (b *Backend) OnRespond(fn RespondFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onRespond = fn
}

// PermissionOutcome is how a permission request ended.
type PermissionOutcome struct {
	// Status is events.PermissionAccepted or events.PermissionTerminal.
	Status string
	// OptionID is the option chosen, when accepted.
	OptionID string
	// Reason says why the request ended unanswered, when terminal
	// (events.ReasonPromptCancelled, ...).
	Reason string
}

// Permission is a permission request of a turn.
type Permission struct {
	// ID is the request ID clients answer with.
	ID      string
	options []string
	request events.JSON
	done    chan PermissionOutcome // receives the outcome once
}

// Wait returns the request's outcome once it is answered or ended, or
// ctx's error.
func (p *Permission) Wait(ctx context.Context) (PermissionOutcome, error) {
	select {
	case o := <-p.done:
		return o, nil
	case <-ctx.Done():
		return PermissionOutcome{}, ctx.Err()
	}
}

// PermissionRequest returns the params of an ACP session/request_permission
// (without sessionId) that asks about a tool call titled title, offering
// the options given as optionId, name and kind triples.
func PermissionRequest(toolCallID, title string, options ...[3]string) string {
	type option struct {
		OptionID string `json:"optionId"`
		Name     string `json:"name"`
		Kind     string `json:"kind"`
	}
	req := struct {
		ToolCall struct {
			ToolCallID string `json:"toolCallId"`
			Title      string `json:"title"`
		} `json:"toolCall"`
		Options []option `json:"options"`
	}{Options: []option{}}
	req.ToolCall.ToolCallID, req.ToolCall.Title = toolCallID, title
	for _, o := range options {
		req.Options = append(req.Options, option{OptionID: o[0], Name: o[1], Kind: o[2]})
	}
	b, _ := json.Marshal(req) // strings always marshal
	return string(b)
}

// RequestPermission stores request, the params of an ACP
// session/request_permission without sessionId ({"toolCall":…,
// "options":[…]}, see PermissionRequest), as a durable permission_request
// event, and makes it pending until it is answered or the turn ends. A
// turn already cancelled gets a request that has ended (terminal,
// prompt_cancelled) and stores nothing, as the session service answers an
// agent that asks after a cancel.
func (t *Turn) RequestPermission(request string) (*Permission, error) {
	var parsed struct {
		Options []struct {
			OptionID string `json:"optionId"`
		} `json:"options"`
	}
	if err := json.Unmarshal([]byte(request), &parsed); err != nil {
		return nil, events.Errorf(events.CodeAdapterProtocol, "permission request: %v", err)
	}
	b := t.b
	b.permMu.Lock()
	defer b.permMu.Unlock()
	b.mu.Lock()
	b.nextID++
	p := &Permission{ID: "perm_" + strconv.FormatUint(b.nextID, 10), request: events.JSON(request), done: make(chan PermissionOutcome, 1)}
	for _, o := range parsed.Options {
		p.options = append(p.options, o.OptionID)
	}
	defer b.mu.Unlock()
	s, ok := b.sessions[key(t.NS, t.SID)]
	if t.state != turnRunning || !ok {
		p.done <- PermissionOutcome{Status: events.PermissionTerminal, Reason: events.ReasonPromptCancelled}
		return p, nil
	}
	if _, err := b.appendLocked(s, t.entry(events.LogEvents, &events.AcpDurablePermissionRequest{RequestID: p.ID, Request: p.request})); err != nil {
		return nil, err
	}
	t.pending = append(t.pending, p)
	b.projectLocked(s)
	return p, nil
}

// Pending returns the IDs of the permission requests of the session that
// wait for an answer, oldest first.
func (b *Backend) Pending(ns events.Namespace, sid events.SessionID) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok || s.turn == nil {
		return nil
	}
	var ids []string
	for _, p := range s.turn.pending {
		ids = append(ids, p.ID)
	}
	return ids
}

func (b *Backend) cancelPrompt(ns events.Namespace, data []byte) (events.Variant, error) {
	_, sid, err := decodeFor[events.AcpCancelPromptRequest](b, events.OpCancelPrompt, data)
	if err != nil {
		return nil, err
	}
	if _, ok := b.Session(ns, sid); !ok {
		return nil, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	b.mu.Lock()
	hook := b.onCancel
	b.mu.Unlock()
	if hook != nil {
		return hook(b.ctx, ns, sid)
	}
	if !b.cancelRunning(ns, sid, false) {
		return &events.AcpCancelPromptResponse{Status: events.CancelNoActivePrompt}, nil
	}
	return &events.AcpCancelPromptResponse{Status: events.CancelCancelled}, nil
}

// cancelRunning cancels the session's running turn, if any, and reports
// whether there was one. With unload, the session is also unloaded, under
// the same lock, so no prompt can slip in between.
func (b *Backend) cancelRunning(ns events.Namespace, sid events.SessionID, unload bool) bool {
	b.permMu.Lock()
	defer b.permMu.Unlock()
	b.mu.Lock()
	var t *Turn
	if s, ok := b.sessions[key(ns, sid)]; ok && s.turn != nil && s.turn.state == turnRunning {
		t = s.turn
	}
	b.mu.Unlock()
	if t != nil {
		b.cancelTurn(t, events.ReasonPromptCancelled)
	}
	if unload {
		b.mu.Lock()
		if s, ok := b.sessions[key(ns, sid)]; ok && !s.unloaded {
			s.unloaded = true
			if _, err := b.appendLocked(s, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionUnloaded{Reason: events.UnloadRequested}}); err != nil {
				b.errorf("unload %s: %v", sid, err)
			}
			b.projectLocked(s)
		}
		b.mu.Unlock()
	}
	return t != nil
}

func (b *Backend) unloadSession(ns events.Namespace, data []byte) (events.Variant, error) {
	_, sid, err := decodeFor[events.AcpUnloadSessionRequest](b, events.OpUnloadSession, data)
	if err != nil {
		return nil, err
	}
	if _, ok := b.Session(ns, sid); !ok {
		return nil, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	b.mu.Lock()
	hook := b.onUnload
	b.mu.Unlock()
	if hook != nil {
		return hook(b.ctx, ns, sid)
	}
	b.cancelRunning(ns, sid, true)
	return &events.AcpUnloadSessionResponse{}, nil
}

func (b *Backend) deleteSession(ns events.Namespace, data []byte) (events.Variant, error) {
	_, sid, err := decodeFor[events.AcpDeleteSessionRequest](b, events.OpDeleteSession, data)
	if err != nil {
		return nil, err
	}
	// permMu is held throughout, so no permission request can be asked or
	// answered while the session goes.
	b.permMu.Lock()
	defer b.permMu.Unlock()
	b.mu.Lock()
	s, ok := b.sessions[key(ns, sid)]
	var t *Turn
	if ok && s.turn != nil && s.turn.state == turnRunning {
		t = s.turn
	}
	b.mu.Unlock()
	if !ok {
		return &events.AcpDeleteSessionResponse{}, nil
	}
	if t != nil {
		b.cancelTurn(t, events.ReasonSessionDeleted)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.appendLocked(s, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionDeleted{Reason: events.DeleteRequested}}); err != nil {
		return nil, err
	}
	delete(b.sessions, key(ns, sid))
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	// Everything but the tombstone goes: the events and keyed finishes
	// entirely, the control records but the last.
	for _, purge := range []struct {
		subject string
		keep    uint64
	}{
		{events.LogSubject(ns, sid, events.LogEvents), 0},
		{events.LogSubject(ns, sid, "key") + ".>", 0},
		{events.LogSubject(ns, sid, events.LogControl), 1},
	} {
		opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(purge.subject)}
		if purge.keep > 0 {
			opts = append(opts, jetstream.WithPurgeKeep(purge.keep))
		}
		if err := b.log.Purge(ctx, opts...); err != nil {
			return nil, events.Errorf(events.CodeUnavailable, "purge %s: %v", purge.subject, err)
		}
	}
	if err := b.meta.Delete(ctx, events.SessionKey(ns, sid)); err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "delete the projection of %s: %v", sid, err)
	}
	return &events.AcpDeleteSessionResponse{}, nil
}

func (b *Backend) respondPermission(ns events.Namespace, data []byte) (events.Variant, error) {
	req, sid, err := decodeFor[events.AcpRespondPermissionRequest](b, events.OpRespondPermission, data)
	if err != nil {
		return nil, err
	}
	if _, ok := b.Session(ns, sid); !ok {
		return nil, events.Errorf(events.CodeSessionNotFound, "no session %s", sid)
	}
	b.mu.Lock()
	hook := b.onRespond
	b.mu.Unlock()
	if hook != nil {
		return hook(b.ctx, ns, req)
	}

	b.permMu.Lock()
	defer b.permMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.sessionLocked(ns, sid)
	if err != nil {
		return nil, err
	}
	t := s.turn
	var p *Permission
	if t != nil {
		if i := slices.IndexFunc(t.pending, func(p *Permission) bool { return p.ID == req.RequestID }); i >= 0 {
			p = t.pending[i]
		}
	}
	if p == nil {
		reason, ok := s.resolved[req.RequestID]
		if !ok {
			reason = events.ReasonUnknownRequest
		}
		return &events.AcpRespondPermissionResponse{Status: events.PermissionNotPending, Reason: &reason}, nil
	}
	if !slices.Contains(p.options, req.OptionID) {
		valid, _ := json.Marshal(p.options) // strings always marshal
		return nil, events.Errorf(events.CodeInvalidPermissionOption, "option %q is not one of %s", req.OptionID, valid)
	}
	optionID, _ := json.Marshal(req.OptionID)
	response := `{"outcome":{"outcome":"selected","optionId":` + string(optionID) + `}}`
	if _, err := b.appendLocked(s, t.entry(events.LogEvents, &events.AcpDurablePermissionResponse{
		RequestID: p.ID, Response: events.JSON(response), Status: events.PermissionAccepted,
	})); err != nil {
		return nil, err
	}
	t.pending = slices.DeleteFunc(t.pending, func(x *Permission) bool { return x == p })
	s.resolve(p.ID, events.ReasonAlreadyResolved)
	b.projectLocked(s)
	p.done <- PermissionOutcome{Status: events.PermissionAccepted, OptionID: req.OptionID}
	return &events.AcpRespondPermissionResponse{Status: events.PermissionAccepted}, nil
}

// terminate ends every pending request of t with reason, each recorded as
// a terminal permission_response. The caller holds permMu, not mu.
func (b *Backend) terminate(t *Turn, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pending := t.pending
	t.pending = nil
	s, ok := b.sessions[key(t.NS, t.SID)]
	for _, p := range pending {
		if ok {
			r := reason
			if _, err := b.appendLocked(s, t.entry(events.LogEvents, &events.AcpDurablePermissionResponse{
				RequestID: p.ID, Response: events.JSON(`{"outcome":{"outcome":"cancelled"}}`), Status: events.PermissionTerminal, Reason: &r,
			})); err != nil {
				b.errorf("record terminal permission %s: %v", p.ID, err)
			}
			s.resolve(p.ID, reason)
		}
		p.done <- PermissionOutcome{Status: events.PermissionTerminal, Reason: reason}
	}
	if ok && len(pending) > 0 {
		b.projectLocked(s)
	}
}

// resolve remembers why a permission request is no longer pending. The
// caller holds b.mu.
func (s *session) resolve(requestID, reason string) {
	if s.resolved == nil {
		s.resolved = map[string]string{}
	}
	s.resolved[requestID] = reason
}

// state is the session's state as the session service projects it:
// waiting (with the pending requests) or running while a turn is played,
// idle otherwise. The caller holds b.mu.
func (s *session) state() events.JSON {
	state := events.SessionState{Status: events.StatusIdle}
	if t := s.turn; t != nil {
		state.Status, state.TurnID = events.StatusRunning, t.ID
		for _, p := range t.pending {
			state.Requests = append(state.Requests, events.PendingPermission{RequestID: p.ID, Request: p.request})
		}
		if len(state.Requests) > 0 {
			state.Status = events.StatusWaiting
		}
	}
	b, err := state.Encode()
	if err != nil {
		// Only an invalid request JSON can fail, and RequestPermission
		// parsed it already.
		panic("gatewaytest: state: " + err.Error())
	}
	return b
}
