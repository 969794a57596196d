package gatewaytest

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// Cancels, unloads, deletes and permission requests, as the session
// service plays them:
//
//   - cancel_prompt ends the turn being played: its context is cancelled,
//     its pending permission requests end as terminal (prompt_cancelled),
//     and its prompt answers stopReason "cancelled" whatever the PromptFunc
//     returns. Without a running turn the status is no_active_prompt.
//   - unload_session ends the turn being played as cancel_prompt does and
//     marks the session unloaded (see Unloaded); metadata and history stay,
//     and the next prompt restores it. Unloading twice succeeds.
//   - delete_session ends the turn being played as cancel_prompt does,
//     except that its pending permission requests end with
//     session_deleted, then forgets the session and purges its log:
//     get_session and read_history answer session_not_found, and
//     open_session of the ID starts a new, empty session. Deleting a
//     missing or already deleted session succeeds. (The fake leaves no
//     tombstone.)
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
	running := t.state == turnRunning
	b.mu.Unlock()
	if !running {
		p.done <- PermissionOutcome{Status: events.PermissionTerminal, Reason: events.ReasonPromptCancelled}
		return p, nil
	}
	if _, err := b.append(t.NS, t.SID, events.LogEvents, &events.AcpDurablePermissionRequest{RequestID: p.ID, Request: p.request}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t.pending = append(t.pending, p)
	if s, ok := b.sessions[key(t.NS, t.SID)]; ok {
		s.project()
	}
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
	_, sid, err := decodeFor(b, events.OpCancelPrompt, data, func(r *events.AcpCancelPromptRequest) *string { return r.SessionID })
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

	if !b.cancelTurn(ns, sid, false) {
		return &events.AcpCancelPromptResponse{Status: events.CancelNoActivePrompt}, nil
	}
	return &events.AcpCancelPromptResponse{Status: events.CancelCancelled}, nil
}

// cancelTurn cancels the session's running turn, if any, and reports
// whether there was one. With unload, the session is also marked unloaded,
// under the same locks, so no prompt can slip in between.
func (b *Backend) cancelTurn(ns events.Namespace, sid events.SessionID, unload bool) bool {
	b.permMu.Lock()
	defer b.permMu.Unlock()
	b.mu.Lock()
	var t *Turn
	if s, ok := b.sessions[key(ns, sid)]; ok {
		if s.turn != nil && s.turn.state == turnRunning {
			t = s.turn
			t.state = turnCancelled
		}
		s.unloaded = s.unloaded || unload
	}
	b.mu.Unlock()
	if t == nil {
		return false
	}
	t.stop()
	b.terminate(t, events.ReasonPromptCancelled)
	return true
}

func (b *Backend) unloadSession(ns events.Namespace, data []byte) (events.Variant, error) {
	_, sid, err := decodeFor(b, events.OpUnloadSession, data, func(r *events.AcpUnloadSessionRequest) *string { return r.SessionID })
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
	b.cancelTurn(ns, sid, true)
	return &events.AcpUnloadSessionResponse{}, nil
}

func (b *Backend) deleteSession(ns events.Namespace, data []byte) (events.Variant, error) {
	_, sid, err := decodeFor(b, events.OpDeleteSession, data, func(r *events.AcpDeleteSessionRequest) *string { return r.SessionID })
	if err != nil {
		return nil, err
	}
	// permMu is held throughout, so the running turn cannot finish (and
	// release the session) until the session is gone; mu is held except
	// while the turn's requests end, when the turn keeps the session busy.
	b.permMu.Lock()
	defer b.permMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[key(ns, sid)]
	if !ok {
		return &events.AcpDeleteSessionResponse{}, nil
	}
	if t := s.turn; t != nil && t.state == turnRunning {
		t.state = turnCancelled
		b.mu.Unlock()
		t.stop()
		b.terminate(t, events.ReasonSessionDeleted)
		b.mu.Lock()
	}
	delete(b.sessions, key(ns, sid))
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := b.log.Purge(ctx, jetstream.WithPurgeSubject(events.LogFilter(ns, sid))); err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "purge %s: %v", events.LogFilter(ns, sid), err)
	}
	return &events.AcpDeleteSessionResponse{}, nil
}

func (b *Backend) respondPermission(ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpRespondPermissionRequest](data)
	if err != nil {
		return nil, err
	}
	b.remember(events.OpRespondPermission, req)
	sid, err := req.Validate()
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
	s := b.sessions[key(ns, sid)]
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
		b.mu.Unlock()
		return &events.AcpRespondPermissionResponse{Status: events.PermissionNotPending, Reason: &reason}, nil
	}
	b.mu.Unlock()
	if !slices.Contains(p.options, req.OptionID) {
		valid, _ := json.Marshal(p.options) // strings always marshal
		return nil, events.Errorf(events.CodeInvalidPermissionOption, "option %q is not one of %s", req.OptionID, valid)
	}
	optionID, _ := json.Marshal(req.OptionID)
	response := `{"outcome":{"outcome":"selected","optionId":` + string(optionID) + `}}`
	if _, err := b.append(ns, sid, events.LogEvents, &events.AcpDurablePermissionResponse{
		RequestID: p.ID, Response: events.JSON(response), Status: events.PermissionAccepted,
	}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t.pending = slices.DeleteFunc(t.pending, func(x *Permission) bool { return x == p })
	s.resolve(p.ID, events.ReasonAlreadyResolved)
	s.project()
	p.done <- PermissionOutcome{Status: events.PermissionAccepted, OptionID: req.OptionID}
	return &events.AcpRespondPermissionResponse{Status: events.PermissionAccepted}, nil
}

// terminate ends every pending request of t with reason, each recorded as
// a terminal permission_response. The caller holds permMu.
func (b *Backend) terminate(t *Turn, reason string) {
	b.mu.Lock()
	pending := t.pending
	t.pending = nil
	b.mu.Unlock()
	for _, p := range pending {
		r := reason
		if _, err := b.append(t.NS, t.SID, events.LogEvents, &events.AcpDurablePermissionResponse{
			RequestID: p.ID, Response: events.JSON(`{"outcome":{"outcome":"cancelled"}}`), Status: events.PermissionTerminal, Reason: &r,
		}); err != nil {
			b.tb.Errorf("gatewaytest: record terminal permission %s: %v", p.ID, err)
		}
		p.done <- PermissionOutcome{Status: events.PermissionTerminal, Reason: reason}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sessions[key(t.NS, t.SID)]; ok {
		for _, p := range pending {
			s.resolve(p.ID, reason)
		}
		s.project()
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

// project sets the session's state as the session service does: waiting
// (with the pending requests) or running while a turn is played, idle
// otherwise. The caller holds b.mu.
func (s *session) project() {
	type request struct {
		RequestID string      `json:"requestId"`
		Request   events.JSON `json:"request"`
	}
	state := struct {
		Status   string    `json:"status"`
		TurnID   string    `json:"turnId,omitempty"`
		Requests []request `json:"requests,omitempty"`
	}{Status: "idle"}
	if t := s.turn; t != nil {
		state.Status, state.TurnID = "running", t.ID
		for _, p := range t.pending {
			state.Requests = append(state.Requests, request{RequestID: p.ID, Request: p.request})
		}
		if len(state.Requests) > 0 {
			state.Status = "waiting"
		}
	}
	b, err := json.Marshal(state)
	if err != nil {
		// Only an invalid request JSON can fail, and RequestPermission
		// parsed it already.
		panic("gatewaytest: state: " + err.Error())
	}
	s.info.State = b
}
