package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// turn is a prompt in flight. It ends exactly once, through finish.
type turn struct {
	id     string
	key    *string
	hash   string
	callID string // the JSON-RPC correlation of its session/prompt

	once   sync.Once
	done   chan struct{}
	result *events.AcpPromptResponse
	err    error

	lastMessage events.JSON // the last completed agent message, for the result
}

func (t *turn) finish(result *events.AcpPromptResponse, err error) {
	t.once.Do(func() {
		t.result, t.err = result, err
		close(t.done)
	})
}

// contentHash is the hex SHA-256 of the canonical prompt: a repeated
// idempotency key must carry the same one.
func contentHash(blocks []json.RawMessage) string {
	h := sha256.New()
	h.Write([]byte(`{"formatVersion":1,"content":[`))
	for i, b := range blocks {
		if i > 0 {
			h.Write([]byte{','})
		}
		var v any
		if json.Unmarshal(b, &v) == nil {
			canon, _ := json.Marshal(v) // sorted keys, no insignificant space
			h.Write(canon)
		}
	}
	h.Write([]byte(`]}`))
	return hex.EncodeToString(h.Sum(nil))
}

// prompt accepts a prompt and dispatches it. It returns the turn to wait on.
func (sess *session) prompt(ctx context.Context, req *events.AcpPromptRequest, blocks []json.RawMessage) (*turn, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.load(ctx); err != nil {
		return nil, err
	}
	if sess.opened == nil {
		return nil, events.Errorf(events.CodeSessionNotFound, "session %s does not exist", sess.sid)
	}
	hash := contentHash(blocks)
	if t := sess.turn; t != nil {
		if req.IdempotencyKey != nil && t.key != nil && *t.key == *req.IdempotencyKey {
			if t.hash != hash {
				return nil, events.Errorf(events.CodeIdempotencyConflict, "idempotency key %q was used for another prompt", *req.IdempotencyKey)
			}
			return t, nil // the same prompt, retried: wait for the same turn
		}
		return nil, events.Errorf(events.CodeSessionBusy, "session %s is running turn %s", sess.sid, t.id)
	}
	if sess.adapter == nil {
		if err := sess.attach(ctx); err != nil {
			return nil, err
		}
	}
	t := &turn{id: nuid.Next(), key: req.IdempotencyKey, hash: hash, done: make(chan struct{})}
	t.callID = t.id

	// The user message is the acceptance: its first event carries the
	// acceptance headers, and all of its events are one atomic append.
	entries := make([]eventlog.Entry, 0, len(blocks))
	messageID, _ := json.Marshal("user_" + t.id)
	for i, b := range blocks {
		upd := make([]byte, 0, len(b)+80)
		upd = append(upd, `{"sessionUpdate":"user_message_chunk","content":`...)
		upd = append(upd, b...)
		upd = append(upd, `,"messageId":`...)
		upd = append(upd, messageID...)
		upd = append(upd, '}')
		hdr := nats.Header{events.HeaderTurnID: []string{t.id}}
		if i == 0 {
			hdr.Set(events.HeaderTurnAccepted, strconv.Itoa(len(blocks)))
			hdr.Set(events.HeaderContentHash, hash)
			if t.key != nil {
				hdr.Set(events.HeaderIdempotencyKey, *t.key)
			}
		}
		entries = append(entries, eventlog.Entry{Kind: events.LogEvents, Header: hdr, Value: &events.AcpDurableSessionUpdate{Update: upd}})
	}
	if _, err := sess.append(ctx, 0, entries...); err != nil {
		return nil, err
	}
	sess.turn = t
	sess.failure = nil
	sess.buf.reset()
	sess.svc.m.turnsStarted.Inc()
	sess.project(ctx)

	// Dispatch exactly once. The runner acknowledges once the line is on the
	// adapter's stdin; without that acknowledgement delivery is uncertain,
	// and the turn fails rather than being sent again.
	params, _ := json.Marshal(struct {
		SessionID string          `json:"sessionId"`
		Prompt    json.RawMessage `json:"prompt"`
	}{sess.adapter.acpSessionID, json.RawMessage(req.Content)})
	hdr := sess.runnerHeader(sess.adapter)
	hdr.Set(events.HeaderCallID, t.callID)
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	_, err := events.Call[events.RunnerAck](cctx, sess.svc.nc, events.RunnerSubject(sess.adapter.runner, events.RunnerCall),
		&events.AcpSessionRequest{SessionID: sess.adapter.acpSessionID, Method: acpwire.MethodSessionPrompt, Params: params}, hdr)
	if err != nil {
		e := events.AsError(err)
		if e.Code != events.CodeAdapterExited {
			// The runner may or may not have written it: uncertain.
			e = events.Errorf(events.CodePromptDeliveryUncertain, "prompt %s: %s", t.id, e.Message)
		} else {
			// The runner said the process is gone: certainly not delivered.
			sess.detach()
		}
		sess.endTurn(ctx, 0, events.OutcomeFailed, "", e)
	}
	return t, nil
}

// endTurn appends the record that closes the active turn and wakes its
// waiters. A failed turn's buffered chunks are dropped: only output of a
// turn the adapter completed becomes durable.
func (sess *session) endTurn(ctx context.Context, ioSeq uint64, outcome, stopReason string, failure *events.Error) {
	t := sess.turn
	if t == nil {
		return
	}
	if outcome == events.OutcomeFailed {
		sess.buf.reset()
	} else if err := sess.flush(ctx, ioSeq); err != nil {
		outcome, failure = events.OutcomeFailed, events.AsError(err)
	}
	rec := &events.TurnFinished{TurnID: t.id, Outcome: outcome, StopReason: stopReason, IdempotencyKey: t.key, ContentHash: t.hash}
	if failure != nil {
		rec.Error = failure.Response()
	} else {
		rec.Message = t.lastMessage
	}
	_, err := sess.append(ctx, ioSeq, eventlog.Entry{Kind: events.LogControl, Value: rec})
	if sess.turn != t {
		return // the append failed and released the session
	}
	sess.turn = nil
	sess.svc.m.turnsFinished.WithLabelValues(outcome).Inc()
	switch {
	case err != nil:
		t.finish(nil, err)
	case failure != nil:
		sess.failure = rec.Error
		t.finish(nil, failure)
	default:
		t.finish(&events.AcpPromptResponse{SessionID: string(sess.sid), Message: rec.Message, StopReason: stopReason}, nil)
	}
	sess.project(ctx)
}
