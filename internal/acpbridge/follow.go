package acpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"
)

// Skein's own event types, which are not ACP session updates: they are
// raised to the client as requests, or read for the turn's end.
const (
	typePermissionRequest  = "permission_request"
	typePermissionResponse = "permission_response"
	typeInputRequest       = "input_request"
	typeInputResponse      = "input_response"
	typeSessionState       = "session_state"
)

// Skein's members of an event's public JSON (docs/API.md, Events): the
// rest is the ACP update.
var envelopeKeys = []string{"sessionId", "sequence", "eventNo", "timestamp", "durability", "type", "afterSequence"}

// head is what the bridge reads of any event.
type head struct {
	Type      string `json:"type"`
	Sequence  uint64 `json:"sequence"`
	EventNo   uint64 `json:"eventNo"`
	RequestID string `json:"requestId"`
	Change    string `json:"change"`
	TurnID    string `json:"turnId"`
	Error     *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Queue *struct {
		ID     string `json:"id"`
		Reason string `json:"reason"`
	} `json:"queue"`
}

// follow is one session this connection follows: its events go to the
// client as they are stored, and its deltas as they stream.
type follow struct {
	c      *conn
	sid    string
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	finished map[string]bool            // turns whose end went by
	waiters  map[string][]chan struct{} // prompts waiting for a turn's end
	dequeued map[string]*head           // queue entries whose dequeued change went by
	qwaiters map[string][]chan struct{} // prompts waiting for their entry to leave the queue
	raised   map[string]*raised         // requests raised to the client, by Skein's requestId
	text     chunks
}

// raised is a permission or input request raised to the client.
type raised struct {
	call     *call
	answered bool // answered anywhere: the client's answer no longer counts
}

// openSet is the requests a replay left open: Skein's requestId to the
// event that raised it.
type openSet map[string]json.RawMessage

// startFollow makes sid followed from after on, first raising the
// requests that wait in its state (a session's state JSON) or that a
// replay left open, and returns the function that starts it. A method
// makes the follow before its answer, so that a request the client sends
// once it has the answer (a prompt) finds it, and starts it after, so
// that nothing of the session goes out before the answer.
func (c *conn) startFollow(sid string, after uint64, state json.RawMessage, open openSet) (start func()) {
	ctx, cancel := context.WithCancel(c.life)
	f := &follow{c: c, sid: sid, cancel: cancel, done: make(chan struct{}),
		finished: map[string]bool{}, waiters: map[string][]chan struct{}{}, raised: map[string]*raised{},
		dequeued: map[string]*head{}, qwaiters: map[string][]chan struct{}{}}
	gate := make(chan struct{})
	c.mu.Lock()
	old := c.follows[sid]
	c.follows[sid] = f
	c.mu.Unlock()
	if old != nil {
		old.stop()
	}
	c.wg.Go(func() {
		defer close(f.done)
		select {
		case <-gate:
		case <-ctx.Done():
			return
		}
		f.raiseOpen(ctx, state, open)
		f.run(ctx, after)
	})
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// stop ends the follow and waits for it.
func (f *follow) stop() {
	f.cancel()
	<-f.done
}

// stopFollow stops following sid on this connection.
func (c *conn) stopFollow(sid string) {
	c.mu.Lock()
	f := c.follows[sid]
	delete(c.follows, sid)
	c.mu.Unlock()
	if f != nil {
		f.stop()
	}
}

// stopAll stops every follow: the connection ends.
func (c *conn) stopAll() {
	c.mu.Lock()
	fs := make([]*follow, 0, len(c.follows))
	for _, f := range c.follows {
		fs = append(fs, f)
	}
	c.follows = map[string]*follow{}
	c.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
}

// followed returns the follow of sid, which a prompt needs to forward its
// turn: a session the client prompts without loading or resuming it first
// is followed from its newest record.
func (c *conn) followed(ctx context.Context, sid string) (*follow, error) {
	c.mu.Lock()
	f := c.follows[sid]
	c.mu.Unlock()
	if f != nil {
		return f, nil
	}
	info, err := c.api.session(ctx, sid)
	if err != nil {
		return nil, err
	}
	c.startFollow(sid, info.LatestSequence, info.State, nil)()
	c.mu.Lock()
	f = c.follows[sid]
	c.mu.Unlock()
	return f, nil
}

// awaitTurn waits until the end of turnID went by on the session's
// stream, and so every update of the turn before it, or at most settle.
func (f *follow) awaitTurn(ctx context.Context, turnID string, settle time.Duration) {
	f.mu.Lock()
	if f.finished[turnID] {
		f.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	f.waiters[turnID] = append(f.waiters[turnID], ch)
	f.mu.Unlock()
	t := time.NewTimer(settle)
	defer t.Stop()
	select {
	case <-ch:
	case <-f.done:
	case <-ctx.Done():
	case <-t.C:
		f.c.lg.Warn("a turn's end did not go by on the session's stream; answering the prompt", "session", f.sid, "turn", turnID)
	}
}

// awaitDequeued waits until queue entry qid's dequeued change went by on
// the session's stream, and returns it; nil when the follow or ctx ended
// first.
func (f *follow) awaitDequeued(ctx context.Context, qid string) *head {
	f.mu.Lock()
	if h := f.dequeued[qid]; h != nil {
		f.mu.Unlock()
		return h
	}
	ch := make(chan struct{})
	f.qwaiters[qid] = append(f.qwaiters[qid], ch)
	f.mu.Unlock()
	select {
	case <-ch:
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.dequeued[qid]
	case <-f.done:
	case <-ctx.Done():
	}
	return nil
}

// left records a queue entry's dequeued change, and wakes its prompts.
func (f *follow) left(h *head) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dequeued[h.Queue.ID] = h
	for _, ch := range f.qwaiters[h.Queue.ID] {
		close(ch)
	}
	delete(f.qwaiters, h.Queue.ID)
}

// turnEnded records that turnID's end went by, and wakes its prompts.
func (f *follow) turnEnded(turnID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished[turnID] = true
	for _, ch := range f.waiters[turnID] {
		close(ch)
	}
	delete(f.waiters, turnID)
	f.text.reset()
}

// Waits between attempts to follow a session's stream again.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 5 * time.Second
)

// run follows the session's event stream after after, again after each
// drop from the last event it read, until ctx ends or Skein refuses for
// good (the session is gone, the token no longer valid).
func (f *follow) run(ctx context.Context, after uint64) {
	wait := retryMin
	for ctx.Err() == nil {
		last, err := f.stream(ctx, after)
		if last > after {
			after, wait = last, retryMin
		}
		if ctx.Err() != nil {
			return
		}
		if e, ok := errors.AsType[*apiError](err); ok {
			switch e.Code {
			case "session_not_found", "unauthenticated", "forbidden", "cursor_expired":
				f.c.lg.Info("stopped following a session", "session", f.sid, "err", err)
				return
			}
		}
		f.c.lg.Debug("follow the session again", "session", f.sid, "after", after, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// stream reads one event stream after after, and returns the sequence of
// the last stored record it delivered.
func (f *follow) stream(ctx context.Context, after uint64) (uint64, error) {
	s, err := f.c.api.events(ctx, f.sid, after)
	if err != nil {
		return after, err
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = &apiError{Code: "unavailable", Message: "the event stream ended"}
			}
			return after, err
		}
		if ev.ID != "" {
			if n, err := strconv.ParseUint(ev.ID, 10, 64); err == nil && n > after {
				after = n
			}
		}
		switch ev.Name {
		case "durable":
			f.durable(ctx, ev.Data)
		case "ephemeral":
			f.ephemeral(ctx, ev.Data)
		case "state":
			var h head
			if json.Unmarshal(ev.Data, &h) == nil && h.Change == "turn_finished" && h.TurnID != "" {
				f.turnEnded(h.TurnID)
			}
			if h.Change == "dequeued" && h.Queue != nil {
				f.left(&h)
			}
		case "error":
			return after, streamError(ev.Data)
		}
	}
}

// streamError is the error an event stream ended with.
func streamError(data []byte) error {
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
		return &apiError{Code: "unavailable", Message: "the event stream ended with an error"}
	}
	return &apiError{Code: eb.Error.Code, Message: eb.Error.Message}
}

// durable takes one stored event of the live stream.
func (f *follow) durable(ctx context.Context, data []byte) {
	var h head
	if err := json.Unmarshal(data, &h); err != nil {
		f.c.lg.Warn("an event that does not decode", "session", f.sid, "err", err)
		return
	}
	switch h.Type {
	case typePermissionRequest, typeInputRequest:
		f.raise(ctx, h.Type, h.RequestID, data)
	case typePermissionResponse, typeInputResponse:
		f.answered(ctx, h.RequestID)
	case typeSessionState:
	default:
		f.forwardDurable(ctx, h, data)
	}
}

// replay sends the session's stored events after after as session/update
// notifications, in log order, and returns the sequence of the last one
// and the requests still open at its end.
func (c *conn) replay(ctx context.Context, sid string, after uint64) (uint64, openSet, error) {
	open := openSet{}
	for {
		page, err := c.api.history(ctx, sid, after, 500)
		if err != nil {
			return after, nil, err
		}
		for _, raw := range page.Events {
			var h head
			if err := json.Unmarshal(raw, &h); err != nil {
				return after, nil, &apiError{Code: "internal", Message: "an event of the history does not decode: " + err.Error()}
			}
			after = max(after, h.Sequence)
			switch h.Type {
			case typePermissionRequest, typeInputRequest:
				open[h.RequestID] = raw
			case typePermissionResponse, typeInputResponse:
				delete(open, h.RequestID)
			case typeSessionState:
			default:
				if upd, err := acpUpdate(raw, h, true); err == nil {
					c.notify(ctx, "session/update", updateParams{SessionID: sid, Update: upd})
				}
			}
		}
		if !page.HasMoreAfter || len(page.Events) == 0 {
			return after, open, nil
		}
	}
}

// updateParams are the params of session/update.
type updateParams struct {
	SessionID string          `json:"sessionId"`
	Update    json.RawMessage `json:"update"`
}

// acpUpdate turns an event's public JSON back into the ACP update it
// carries: Skein's members out, sessionUpdate back in, and, for a stored
// event (withPlace), its place in the log in _meta.
func acpUpdate(data []byte, h head, withPlace bool) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	for _, k := range envelopeKeys {
		delete(m, k)
	}
	kind, _ := json.Marshal(h.Type)
	m["sessionUpdate"] = kind
	if withPlace {
		meta := map[string]json.RawMessage{}
		if raw, ok := m["_meta"]; ok {
			if json.Unmarshal(raw, &meta) != nil {
				meta = map[string]json.RawMessage{} // not an object: Skein's place replaces it
			}
		}
		meta["skein/sequence"] = json.RawMessage(strconv.FormatUint(h.Sequence, 10))
		meta["skein/eventNo"] = json.RawMessage(strconv.FormatUint(h.EventNo, 10))
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		m["_meta"] = b
	}
	return json.Marshal(m)
}
