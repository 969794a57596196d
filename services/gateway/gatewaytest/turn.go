package gatewaytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Prompts, as the session service plays them (docs/ARCHITECTURE.md,
// "prompt"):
//
//   - The session must exist (session_not_found). A running turn makes a
//     new prompt session_busy.
//   - Accepting a turn appends its user message, one user_message_chunk
//     per content block, atomically; the first carries the acceptance
//     headers (Acp-Turn-Accepted, Acp-Turn-Id, Acp-Content-Hash, and
//     Acp-Idempotency-Key when keyed). The prompt then answers
//     events.PromptAccepted with the accepting record's sequence: it never
//     waits for the turn.
//   - The turn ends with exactly one TurnFinished, on the session's control
//     subject, or on events.KeySubject for a keyed prompt.
//   - A prompt with the idempotency key of an earlier one and the same
//     content is that turn again: PromptAccepted for it, with Finished set
//     when it already ended. The same key with other content is
//     idempotency_conflict.

// Turn is one prompt being played: the request and the means to write the
// session's log.
type Turn struct {
	b       *Backend
	NS      events.Namespace
	SID     events.SessionID
	Request *events.AcpPromptRequest
	// ID is the turn's ID, as getSession's state and the log show it.
	ID string

	hash  string // of the content
	start uint64 // the accepting record's sequence

	// ctx is the PromptFunc's, scoped to this turn (the per-message
	// exception of STYLE R12); stop ends it, on cancel_prompt or when the
	// turn is over.
	ctx  context.Context
	stop context.CancelFunc

	// Guarded by b.mu.
	state    turnState
	pending  []*Permission        // permission requests waiting for an answer, oldest first
	finished *events.TurnFinished // once the turn ended
}

type turnState int

const (
	turnRunning turnState = iota
	turnCancelled
	turnFinished
)

// Append stores a durable session update of the turn and returns its
// sequence. Once the turn ended (a cancel, an unload, a delete) nothing
// more is stored, as the session service drops a cancelled adapter's
// output: Append then fails.
func (t *Turn) Append(update string) (uint64, error) {
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.state != turnRunning {
		return 0, events.Errorf(events.CodeUnavailable, "turn %s has ended", t.ID)
	}
	s, err := b.sessionLocked(t.NS, t.SID)
	if err != nil {
		return 0, err
	}
	return b.appendLocked(s, t.entry(events.LogEvents, &events.AcpDurableSessionUpdate{Update: events.JSON(update)}))
}

// Delta publishes a live delta following the durable sequence after.
func (t *Turn) Delta(after uint64, update string) error {
	return t.b.delta(t.NS, t.SID, after, update)
}

// entry is a record of the turn: it carries the turn's ID and start.
func (t *Turn) entry(kind events.LogKind, v events.Variant) eventlog.Entry {
	return eventlog.Entry{Kind: kind, Value: v, Header: nats.Header{
		events.HeaderTurnID:    {t.ID},
		events.HeaderTurnStart: {strconv.FormatUint(t.start, 10)},
	}}
}

// contentHash identifies a prompt's content for idempotency: the content
// as sent, byte for byte.
func contentHash(content events.JSON) string {
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:])
}

// promptOp serves prompt: it accepts the turn, starts playing it, and
// answers at once.
func (b *Backend) promptOp(ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpPromptRequest](data)
	if err != nil {
		return nil, err
	}
	b.remember(events.OpPrompt, req)
	sid, err := req.Validate(events.PromptLimits{})
	if err != nil {
		return nil, err
	}
	blocks, err := events.PromptBlocks(req.Content, events.PromptLimits{})
	if err != nil {
		return nil, err
	}
	hash := contentHash(req.Content)

	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.sessionLocked(ns, sid)
	if err != nil {
		return nil, err
	}
	if req.IdempotencyKey != nil {
		if t := s.keyed[*req.IdempotencyKey]; t != nil {
			if t.hash != hash {
				return nil, events.Errorf(events.CodeIdempotencyConflict, "idempotency key %q was used for other content", *req.IdempotencyKey)
			}
			return &events.PromptAccepted{SessionID: string(sid), TurnID: t.ID, Sequence: t.start, Finished: t.finished}, nil
		}
	}
	if s.turn != nil {
		return nil, events.ErrSessionBusy
	}
	if b.closed {
		return nil, events.Errorf(events.CodeUnavailable, "the test is ending")
	}
	b.nextID++
	t := &Turn{b: b, NS: ns, SID: sid, Request: req, ID: "turn_" + strconv.FormatUint(b.nextID, 10), hash: hash}
	t.ctx, t.stop = context.WithCancel(b.ctx)

	// The user message is the acceptance: one atomic append.
	messageID, _ := json.Marshal("user_" + t.ID) // a string always marshals
	entries := make([]eventlog.Entry, len(blocks))
	for i, block := range blocks {
		upd := `{"sessionUpdate":"user_message_chunk","content":` + string(block) + `,"messageId":` + string(messageID) + `}`
		entries[i] = eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{Update: events.JSON(upd)},
			Header: nats.Header{events.HeaderTurnID: {t.ID}}}
		if i > 0 {
			entries[i].Header.Set(events.HeaderTurnBlock, strconv.Itoa(i))
		}
	}
	first := entries[0].Header
	first.Set(events.HeaderTurnAccepted, strconv.Itoa(len(blocks)))
	first.Set(events.HeaderContentHash, hash)
	if req.IdempotencyKey != nil {
		first.Set(events.HeaderIdempotencyKey, *req.IdempotencyKey)
	}
	if t.start, err = b.appendLocked(s, entries...); err != nil {
		t.stop()
		return nil, err
	}
	s.turn = t
	s.unloaded = false // the prompt restores an unloaded session
	if req.IdempotencyKey != nil {
		if s.keyed == nil {
			s.keyed = map[string]*Turn{}
		}
		s.keyed[*req.IdempotencyKey] = t
	}
	b.projectLocked(s)
	play := b.prompt
	b.turns.Go(func() {
		defer t.stop()
		resp, err := play(t.ctx, t)
		b.finish(t, resp, err)
	})
	keyed := req.IdempotencyKey != nil
	return &events.PromptAccepted{SessionID: string(sid), TurnID: t.ID, Sequence: t.start, Keyed: &keyed}, nil
}

// finish ends t once its function returned resp and err, unless a cancel,
// an unload or a delete ended it first (first writer wins): requests still
// pending end as terminal, then the turn's TurnFinished is appended and
// the session released.
func (b *Backend) finish(t *Turn, resp *events.AcpPromptResponse, err error) {
	b.permMu.Lock()
	defer b.permMu.Unlock()
	b.mu.Lock()
	running := t.state == turnRunning
	b.mu.Unlock()
	if !running {
		return
	}
	reason := events.ReasonTurnFailed
	if errors.Is(err, events.ErrAdapterExited) {
		reason = events.ReasonAdapterExited
	}
	b.terminate(t, reason)
	rec := &events.TurnFinished{TurnID: t.ID, IdempotencyKey: t.Request.IdempotencyKey, ContentHash: t.hash}
	switch {
	case err != nil:
		rec.Outcome, rec.Error = events.OutcomeFailed, events.AsError(err).Response()
	case resp.StopReason == events.OutcomeCancelled:
		rec.Outcome, rec.StopReason = events.OutcomeCancelled, resp.StopReason
	default:
		rec.Outcome, rec.StopReason, rec.Message = events.OutcomeCompleted, resp.StopReason, resp.Message
	}
	b.end(t, rec)
}

// cancelTurn ends the running turn t with outcome cancelled, its pending
// requests with reason. The caller holds permMu, not mu.
func (b *Backend) cancelTurn(t *Turn, reason string) {
	b.mu.Lock()
	if t.state != turnRunning {
		b.mu.Unlock()
		return
	}
	t.state = turnCancelled
	b.mu.Unlock()
	t.stop()
	b.terminate(t, reason)
	b.end(t, &events.TurnFinished{TurnID: t.ID, IdempotencyKey: t.Request.IdempotencyKey, ContentHash: t.hash,
		Outcome: events.OutcomeCancelled, StopReason: events.OutcomeCancelled})
}

// end appends the turn's TurnFinished and releases the session. The
// caller holds permMu, not mu.
func (b *Backend) end(t *Turn, rec *events.TurnFinished) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t.state = turnFinished
	s, ok := b.sessions[key(t.NS, t.SID)]
	if !ok || s.turn != t {
		return // deleted meanwhile
	}
	e := t.entry(events.LogControl, rec)
	if rec.IdempotencyKey != nil {
		e.Subject = events.KeySubject(t.NS, t.SID, *rec.IdempotencyKey)
	}
	if _, err := b.appendLocked(s, e); err != nil {
		b.errorf("finish turn %s: %v", t.ID, err)
	}
	t.finished = rec
	s.turn = nil
	b.projectLocked(s)
}

// Echo is the default turn. Its user message stored by the acceptance, it
// stores a tool call (pending, then completed) and a plan, streams the
// reply "Hello, world" as three agent_message_chunk deltas, stores the
// completed message, and ends the turn with end_turn. A prompt whose first
// text block is "fail" fails with adapter_exited.
func Echo(_ context.Context, t *Turn) (*events.AcpPromptResponse, error) {
	if firstText(t.Request.Content) == "fail" {
		return nil, events.Errorf(events.CodeAdapterExited, "the demo agent exited")
	}
	steps := []string{
		`{"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Read README.md","kind":"read","status":"pending"}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed"}`,
		`{"sessionUpdate":"plan","entries":[{"content":"Say hello","priority":"high","status":"completed"}]}`,
	}
	var last uint64
	var err error
	for _, u := range steps {
		if last, err = t.Append(u); err != nil {
			return nil, err
		}
	}
	for _, chunk := range []string{"Hel", "lo, ", "world"} {
		if err := t.Delta(last, TextChunk("agent_message_chunk", chunk)); err != nil {
			return nil, err
		}
	}
	message := TextChunk("agent_message_chunk", "Hello, world")
	if _, err := t.Append(message); err != nil {
		return nil, err
	}
	return &events.AcpPromptResponse{SessionID: string(t.SID), Message: events.JSON(message), StopReason: "end_turn"}, nil
}

// TextChunk returns a session update of kind (agent_message_chunk, ...)
// carrying one text content block.
func TextChunk(kind, text string) string {
	quoted, _ := json.Marshal(text) // a string always marshals
	return `{"sessionUpdate":"` + kind + `","content":{"type":"text","text":` + string(quoted) + `}}`
}

// firstText returns the text of the first text block of content, trimmed,
// or "".
func firstText(content events.JSON) string {
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &blocks) // validated at acceptance
	for _, b := range blocks {
		if b.Type == "text" {
			return strings.TrimSpace(b.Text)
		}
	}
	return ""
}
