package history

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
)

// Turn ends held by a full store. When JetStream's store refuses writes, a
// turn's owner ends the turn (storage_full) but cannot record its
// TurnFinished: it holds it, and until it is stored publishes
// TurnEndUnrecorded on the session's events.EndNoticeSubject every couple
// of seconds (services/session/storagefull.go). The turn's waiter takes
// that notice as the end, and so does get_session: the log still shows the
// turn open, but a client told that its prompt failed must not then read
// that its session runs (the fault tests check every client's history for
// linearizability). So this service follows the notices, and a session
// whose log's open turn is one its owner ended is shown as that end would
// show it.

// heldFor is how long a notice stands without being repeated: a few of
// the owner's retries (2 s apart). An owner that stops repeating it has
// stored the end (the log then shows it), or lost the session, whose next
// owner closes the turn in the log.
const heldFor = 10 * time.Second

// heldEnds are the notices heard, by session key.
type heldEnds struct {
	mu sync.Mutex
	m  map[string]heldEnd
}

type heldEnd struct {
	notice *events.TurnEndUnrecorded
	at     time.Time
}

// follow subscribes to every session's end notices until ctx ends.
func (h *heldEnds) follow(ctx context.Context, nc *nats.Conn) error {
	sub, err := nc.Subscribe(events.EndNoticesAll, func(m *nats.Msg) {
		ns, sid, err := events.ParseEndNoticeSubject(m.Subject)
		if err != nil {
			return
		}
		v, err := events.Decode[events.TurnEndUnrecorded](m.Data)
		if err != nil || v.TurnID == "" {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.m == nil {
			h.m = map[string]heldEnd{}
		}
		now := time.Now()
		for key, e := range h.m {
			if now.Sub(e.at) > heldFor {
				delete(h.m, key)
			}
		}
		h.m[events.SessionKey(ns, sid)] = heldEnd{notice: v, at: now}
	})
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return nil
}

// apply returns state as the session's owner has it: when the log's open
// turn is one whose end the owner holds, the state that end records.
func (h *heldEnds) apply(ns events.Namespace, sid events.SessionID, state *events.SessionState) *events.SessionState {
	if state == nil || state.TurnID == "" {
		return state
	}
	h.mu.Lock()
	e, ok := h.m[events.SessionKey(ns, sid)]
	h.mu.Unlock()
	if !ok || e.notice.TurnID != state.TurnID || time.Since(e.at) > heldFor {
		return state
	}
	ended := &events.SessionState{Status: events.StatusIdle}
	if e.notice.Outcome == events.OutcomeFailed {
		ended.Status = events.StatusFailed
		if e.notice.Error != nil {
			ended.Error = &events.StateError{Code: e.notice.Error.Code, Message: e.notice.Error.Message}
		}
	}
	return ended
}

// applyJSON is apply on a state's JSON.
func (h *heldEnds) applyJSON(ns events.Namespace, sid events.SessionID, state events.JSON) (events.JSON, error) {
	h.mu.Lock()
	_, ok := h.m[events.SessionKey(ns, sid)]
	h.mu.Unlock()
	if !ok || len(state) == 0 {
		return state, nil
	}
	var st events.SessionState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, err
	}
	return h.apply(ns, sid, &st).Encode()
}
