package acpbridge

import (
	"context"
	"encoding/json"
	"strings"
)

// The update kinds Skein streams as deltas before storing them joined.
const (
	kindMessageChunk = "agent_message_chunk"
	kindThoughtChunk = "agent_thought_chunk"
)

// chunks is the message in progress on a follow: what of its text went to
// the client as deltas, and what of it is stored. Skein streams a message
// as deltas and then stores it joined; the client, which appends chunks,
// must see its text once.
type chunks struct {
	key    string // the message: its kind and messageId
	deltas bool   // a delta of it went to the client
	sent   string // its text the client has
	stored string // its text in stored events so far
}

func (t *chunks) reset() { *t = chunks{} }

// take makes key the message in progress.
func (t *chunks) take(key string) {
	if t.key != key {
		*t = chunks{key: key}
	}
}

// chunk is what the bridge reads of a message chunk.
type chunk struct {
	MessageID string `json:"messageId"`
	Content   struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

func isChunk(kind string) bool { return kind == kindMessageChunk || kind == kindThoughtChunk }

// ephemeral forwards a live delta of the message being streamed.
func (f *follow) ephemeral(ctx context.Context, data []byte) {
	var h head
	var ch chunk
	if json.Unmarshal(data, &h) != nil || !isChunk(h.Type) || json.Unmarshal(data, &ch) != nil {
		return
	}
	upd, err := acpUpdate(data, h, false)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.text.take(h.Type + "\x00" + ch.MessageID)
	f.text.deltas = true
	if ch.Content.Type == "text" {
		f.text.sent += ch.Content.Text
	}
	f.mu.Unlock()
	f.c.notify(ctx, "session/update", updateParams{SessionID: f.sid, Update: upd})
}

// forwardDurable forwards a stored update. A message whose deltas went to
// the client already is forwarded only for the text they missed.
func (f *follow) forwardDurable(ctx context.Context, h head, data []byte) {
	if isChunk(h.Type) {
		var ch chunk
		if json.Unmarshal(data, &ch) != nil {
			return
		}
		var ok bool
		if data, ok = f.unseen(h, ch, data); !ok {
			return
		}
	} else {
		f.mu.Lock()
		f.text.reset() // any other update ends the message in progress
		f.mu.Unlock()
	}
	upd, err := acpUpdate(data, h, true)
	if err != nil {
		f.c.lg.Warn("an event that is not an update", "session", f.sid, "sequence", h.Sequence, "err", err)
		return
	}
	f.c.notify(ctx, "session/update", updateParams{SessionID: f.sid, Update: upd})
}

// unseen returns the stored chunk data as the client should get it: all of
// it when no delta of its message went by, the text the deltas lacked when
// some did, or nothing (ok false) when they carried it all.
func (f *follow) unseen(h head, ch chunk, data []byte) (out []byte, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &f.text
	t.take(h.Type + "\x00" + ch.MessageID)
	if ch.Content.Type != "text" {
		return data, !t.deltas
	}
	t.stored += ch.Content.Text
	if !t.deltas {
		t.sent = t.stored
		return data, true
	}
	switch {
	case strings.HasPrefix(t.sent, t.stored):
		return nil, false // the deltas carried it
	case strings.HasPrefix(t.stored, t.sent):
		rest := t.stored[len(t.sent):]
		t.sent = t.stored
		out, err := withText(data, rest)
		return out, err == nil
	}
	// The deltas and the stored text differ (a delta lost in between):
	// what the client shows cannot be taken back.
	f.c.lg.Debug("a message's deltas differ from its stored text", "session", f.sid, "sequence", h.Sequence)
	return nil, false
}

// withText returns a chunk's event with its text content replaced by text.
func withText(data []byte, text string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	var content map[string]json.RawMessage
	if err := json.Unmarshal(m["content"], &content); err != nil {
		return nil, err
	}
	b, err := json.Marshal(text)
	if err != nil {
		return nil, err
	}
	content["text"] = b
	if m["content"], err = json.Marshal(content); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// raiseOpen raises the requests a session waits on when the follow starts:
// those of its state (state, a session's state JSON), or those a replay
// left open.
func (f *follow) raiseOpen(ctx context.Context, state json.RawMessage, open openSet) {
	for rid, raw := range open {
		var h head
		if json.Unmarshal(raw, &h) == nil {
			f.raise(ctx, h.Type, rid, raw)
		}
	}
	if len(state) == 0 {
		return
	}
	var st sessionState
	if json.Unmarshal(state, &st) != nil {
		return
	}
	for _, r := range st.Requests {
		f.raise(ctx, typePermissionRequest, r.RequestID, r.Request)
	}
	for _, r := range st.Inputs {
		f.raise(ctx, typeInputRequest, r.RequestID, r.Request)
	}
}

// raise asks the client a permission request (session/request_permission)
// or an input request (elicitation/create, when the client takes forms)
// of the session, once; its answer goes to Skein, where the first answer
// from anywhere wins. data holds the request's members.
func (f *follow) raise(ctx context.Context, kind, requestID string, data []byte) {
	if requestID == "" {
		return
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return
	}
	for _, k := range envelopeKeys {
		delete(m, k)
	}
	delete(m, "requestId")
	delete(m, "turnId")
	sid, _ := json.Marshal(f.sid)
	m["sessionId"] = sid
	method := "session/request_permission"
	if kind == typeInputRequest {
		f.c.mu.Lock()
		forms := f.c.elicitation
		f.c.mu.Unlock()
		if !forms {
			return // the client takes no forms: another viewer answers
		}
		method = "elicitation/create"
	}
	f.mu.Lock()
	if f.raised[requestID] != nil {
		f.mu.Unlock()
		return
	}
	r := &raised{}
	f.raised[requestID] = r
	f.mu.Unlock()
	r.call = f.c.request(ctx, method, m)
	f.c.wg.Go(func() { f.await(ctx, r, kind, requestID) })
}

// await waits for the client's answer to a raised request, and gives it to
// Skein unless the request was answered elsewhere first.
func (f *follow) await(ctx context.Context, r *raised, kind, requestID string) {
	var m *message
	select {
	case m = <-r.call.result:
	case <-ctx.Done():
		f.c.forget(r.call)
		return
	}
	f.mu.Lock()
	late := r.answered
	r.answered = true
	f.mu.Unlock()
	if late || m.Error != nil {
		return
	}
	var err error
	if kind == typeInputRequest {
		var res struct {
			Action  string          `json:"action"`
			Content json.RawMessage `json:"content,omitempty"`
		}
		if err = json.Unmarshal(m.Result, &res); err == nil {
			err = f.c.api.answer(ctx, f.sid, "inputs", requestID, res)
		}
	} else {
		var res struct {
			Outcome struct {
				Outcome  string `json:"outcome"`
				OptionID string `json:"optionId"`
			} `json:"outcome"`
		}
		if err = json.Unmarshal(m.Result, &res); err == nil && res.Outcome.Outcome == "selected" {
			err = f.c.api.answer(ctx, f.sid, "permissions", requestID, struct {
				OptionID string `json:"optionId"`
			}{res.Outcome.OptionID})
		}
	}
	if err != nil {
		f.c.lg.Warn("pass on the client's answer", "session", f.sid, "request", requestID, "err", err)
	}
}

// answered withdraws a request from the client once it was answered
// anywhere (the client's own answer included): ACP's $/cancel_request,
// which the client answers, and the bridge ignores.
func (f *follow) answered(ctx context.Context, requestID string) {
	f.mu.Lock()
	r := f.raised[requestID]
	if r == nil {
		f.raised[requestID] = &raised{answered: true} // never raise it now
		f.mu.Unlock()
		return
	}
	withdraw := !r.answered
	r.answered = true
	f.mu.Unlock()
	if withdraw && r.call != nil {
		f.c.notify(ctx, "$/cancel_request", map[string]int64{"requestId": r.call.id})
	}
}
