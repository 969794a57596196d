package session

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// onTail receives one record of the session's ACP_IO, republished as it was
// stored. Records are applied strictly in stream order: a record whose
// predecessor (Nats-Last-Sequence) was not applied first has the gap filled
// from the stream.
func (sess *session) onTail(r *route, m *nats.Msg) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return
	}
	prev, _ := strconv.ParseUint(m.Header.Get(jetstream.LastSequenceHeader), 10, 64)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.adapter != r || seq <= r.applied {
		return
	}
	if prev > r.applied {
		sess.catchUp(r, prev)
	}
	if sess.adapter == r && prev <= r.applied {
		sess.applyIO(r, seq, m.Header, m.Data)
	}
	sess.commitUnlessMore(r)
}

// commitUnlessMore commits queued output unless more of the adapter's
// output is already waiting to be applied (and the group has room).
func (sess *session) commitUnlessMore(r *route) {
	if len(sess.pending) == 0 {
		return
	}
	// The message being delivered counts as pending until its callback
	// returns: more is waiting only beyond it.
	if waiting, _, err := r.sub.Pending(); err == nil && waiting > 1 && len(sess.pending) < eventlog.MaxBatch && sess.adapter == r {
		return
	}
	sess.commitOrFail(sess.svc.runCtx)
}

// commitOrFail commits queued output; if that fails, the running turn fails
// with the error: its output is not safe in the log.
func (sess *session) commitOrFail(ctx context.Context) bool {
	err := sess.commit(ctx)
	if err == nil {
		return true
	}
	sess.lg.Warn("append adapter output", events.LogKeyErr, err)
	if sess.turn != nil {
		sess.abortTurn(ctx, 0, events.OutcomeFailed, events.AsError(err))
	}
	return false
}

// catchUp applies the records of the session's ACP_IO after the last one
// applied, up to and including seq (0: up to the newest). The caller holds
// sess.mu.
func (sess *session) catchUp(r *route, upTo uint64) {
	ctx := sess.svc.runCtx
	for sess.adapter == r && (upTo == 0 || r.applied < upTo) {
		recs, err := eventlog.Forward(ctx, sess.svc.js, events.StreamIO, events.IOSubject(sess.ns, sess.sid), r.applied, 256)
		if err != nil {
			sess.lg.Warn("read io gap", events.LogKeyErr, err)
			return
		}
		if len(recs) == 0 {
			return
		}
		for _, rec := range recs {
			if upTo != 0 && rec.Sequence > upTo || sess.adapter != r {
				return
			}
			sess.svc.m.ioGapRecords.Inc()
			sess.applyIO(r, rec.Sequence, rec.Header, rec.Data)
		}
		if !sess.commitOrFail(ctx) {
			return
		}
	}
}

// applyIO applies one ACP_IO record, in the order the runner observed it.
func (sess *session) applyIO(r *route, ioSeq uint64, hdr nats.Header, data []byte) {
	r.applied = ioSeq
	if hdr.Get(events.HeaderProcessID) != r.processID {
		return // output of an adapter process this session no longer uses
	}
	v, err := events.Unmarshal(data)
	if err != nil {
		sess.lg.Warn("undecodable runner record", events.LogKeySeq, ioSeq, events.LogKeyErr, err)
		return
	}
	ctx := sess.svc.runCtx
	sess.svc.m.ioRecords.WithLabelValues(v.VariantName()).Inc()
	switch v := v.(type) {
	case *events.AcpSessionEvent:
		sess.onNotification(ctx, ioSeq, r, v.Notification)
	case *events.AcpHostRequestCallback:
		sess.onAgentRequest(ctx, ioSeq, r, v.Request)
	case *events.AcpSessionRpcResponse:
		sess.onResponse(ctx, ioSeq, r, hdr.Get(events.HeaderCallID), v.Response)
	case *events.AcpAgentStderrEvent:
		sess.publishLive(v, nil)
	case *events.AcpAgentExitedEvent:
		sess.onExit(ctx, ioSeq, r, v)
	default:
		sess.lg.Warn("unexpected runner record", events.LogKeyRecord, v.VariantName())
	}
}

func (sess *session) onNotification(ctx context.Context, ioSeq uint64, r *route, raw events.JSON) {
	if r.drain != nil {
		return // output of a turn already ended; the adapter is winding it down
	}
	msg, err := acpwire.Parse(raw)
	if err != nil || msg.Method != acpwire.MethodSessionUpdate {
		return // other notifications (_auth/status_update, ...) are not session history
	}
	upd, err := acpwire.ParseSessionUpdate(msg.Params)
	if err != nil {
		sess.lg.Warn("malformed session/update", events.LogKeyErr, err)
		return
	}
	cfg := &sess.svc.cfg
	if t := sess.turn; t != nil {
		t.outputBytes += int64(len(upd.Update))
		if t.outputBytes > cfg.MaxTurnOutputBytes {
			sess.abortTurn(ctx, ioSeq, events.OutcomeFailed, events.Errorf(events.CodeTurnOutputTooLarge,
				"the turn's output passed %d bytes", cfg.MaxTurnOutputBytes))
			return
		}
	}
	switch upd.Kind {
	case acpwire.UpdateAgentMessageChunk, acpwire.UpdateAgentThoughtChunk:
		if !sess.buf.continues(upd.Kind, upd.MessageID) {
			if err := sess.flush(ctx, ioSeq); err != nil {
				return
			}
		}
		sess.buf.add(upd.Kind, upd.MessageID, upd.Update)
		if sess.buf.bytes > cfg.MaxMessageBytes {
			sess.buf.reset()
			if sess.turn != nil {
				sess.abortTurn(ctx, ioSeq, events.OutcomeFailed, events.Errorf(events.CodeMessageTooLarge,
					"a message passed %d bytes", cfg.MaxMessageBytes))
			}
			return
		}
		// The delta is placed after the log's end: everything before it
		// must be in the log first.
		if !sess.commitOrFail(ctx) {
			return
		}
		sess.publishLive(&events.AcpEphemeralSessionUpdateEvent{
			SessionID:     string(sess.sid),
			AfterSequence: sess.w.Position().LastSeq,
			Update:        events.JSON(upd.Update),
		}, nil)
		sess.svc.m.liveDeltas.Inc()
	default:
		// Any other update ends the message in progress, then is durable
		// at once, in arrival order.
		if err := sess.flush(ctx, ioSeq); err != nil {
			return
		}
		if len(upd.Update) > sess.svc.maxRecord {
			if sess.turn != nil {
				sess.abortTurn(ctx, ioSeq, events.OutcomeFailed, events.Errorf(events.CodePayloadTooLarge,
					"a %s update of %d bytes is larger than a log record may be (%d)", upd.Kind, len(upd.Update), sess.svc.maxRecord))
			}
			return
		}
		sess.queue(ioSeq, eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{Update: events.JSON(upd.Update)}})
		if upd.Kind == "config_option_update" || upd.Kind == "current_mode_update" {
			sess.onConfigUpdate(ctx, ioSeq, upd.Kind, upd.Update)
		}
	}
}

// flush makes the buffered message durable, coalesced.
func (sess *session) flush(ctx context.Context, ioSeq uint64) error {
	kind := sess.buf.kind
	updates, err := sess.buf.take(sess.svc.maxRecord)
	if err != nil {
		if sess.turn != nil {
			sess.abortTurn(ctx, ioSeq, events.OutcomeFailed, events.AsError(err))
		}
		return err
	}
	if len(updates) == 0 {
		return nil
	}
	entries := make([]eventlog.Entry, len(updates))
	for i, u := range updates {
		entries[i] = eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{Update: events.JSON(u)}}
		if len(updates) > 1 {
			entries[i].Header = nats.Header{events.HeaderPart: []string{strconv.Itoa(i)}}
		}
	}
	sess.queue(ioSeq, entries...)
	if sess.turn != nil && kind == acpwire.UpdateAgentMessageChunk {
		// The turn's result carries its last message, unless the message
		// had to be split to fit the log: then it is only in history.
		sess.turn.lastMessage = nil
		if len(updates) == 1 {
			sess.turn.lastMessage = events.JSON(updates[0])
		}
	}
	return nil
}

func (sess *session) publishLive(v events.Variant, hdr nats.Header) {
	data, err := events.Marshal(v)
	if err != nil {
		return
	}
	if hdr == nil {
		hdr = nats.Header{}
	}
	hdr.Set(events.HeaderRecord, v.VariantName())
	if e, ok := v.(*events.AcpEphemeralSessionUpdateEvent); ok {
		hdr.Set(events.HeaderAfterSequence, strconv.FormatUint(e.AfterSequence, 10))
	}
	_ = sess.svc.nc.PublishMsg(&nats.Msg{Subject: events.LiveSubject(sess.ns, sess.sid), Header: hdr, Data: data})
}

// onResponse ends the turn whose session/prompt this answers, or the drain
// of a turn that already ended.
func (sess *session) onResponse(ctx context.Context, ioSeq uint64, r *route, callID string, raw events.JSON) {
	if d := r.drain; d != nil && callID == d.callID {
		sess.endDrain(r)
		return
	}
	if answer, ok := sess.calls[callID]; ok {
		answer <- raw
		return
	}
	t := sess.turn
	if t == nil || callID != t.callID {
		return
	}
	msg, err := acpwire.Parse(raw)
	if err != nil {
		sess.endTurn(ctx, ioSeq, events.OutcomeFailed, "", events.Errorf(events.CodeAdapterProtocol, "prompt response: %v", err))
		return
	}
	if msg.Error != nil {
		sess.endTurn(ctx, ioSeq, events.OutcomeFailed, "", events.Errorf(events.CodeAdapterError, "agent answered the prompt with error %d: %s", msg.Error.Code, msg.Error.Message))
		return
	}
	var res struct {
		StopReason string `json:"stopReason"`
	}
	if err := json.Unmarshal(msg.Result, &res); err != nil || res.StopReason == "" {
		sess.endTurn(ctx, ioSeq, events.OutcomeFailed, "", events.Errorf(events.CodeAdapterProtocol, "prompt response without stopReason"))
		return
	}
	outcome := events.OutcomeCompleted
	if res.StopReason == acpwire.StopReasonCancelled {
		// The agent stopped on its own account (a rejected tool, say):
		// the turn is cancelled, and its buffered chunks are dropped.
		outcome = events.OutcomeCancelled
	}
	sess.endTurn(ctx, ioSeq, outcome, res.StopReason, nil)
}

// onAgentRequest answers an agent-to-client request. Permission requests go
// to the session's policy; Skein advertises no file system or terminal
// capability, so anything else is "method not found".
func (sess *session) onAgentRequest(ctx context.Context, ioSeq uint64, r *route, raw events.JSON) {
	msg, err := acpwire.Parse(raw)
	if err != nil || msg.ID == nil {
		return
	}
	if !sess.commitOrFail(ctx) {
		return
	}
	if msg.Method == acpwire.MethodRequestPermission {
		sess.onPermissionRequest(ctx, ioSeq, r, msg)
		return
	}
	_ = sess.reply(ctx, r, rpcError(msg.ID, acpwire.CodeMethodNotFound, "method not found: "+msg.Method))
}

func rpcResult(id json.RawMessage, result string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + `}`)
}

func rpcError(id json.RawMessage, code int, message string) []byte {
	m, _ := json.Marshal(message)
	return []byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":` + strconv.Itoa(code) + `,"message":` + string(m) + `}}`)
}

// onExit records an adapter exit nobody asked for, fails the active turn
// (its pending permission requests become terminal) and evicts the route.
// There is no respawn: the next prompt attaches anew.
func (sess *session) onExit(ctx context.Context, ioSeq uint64, r *route, ev *events.AcpAgentExitedEvent) {
	sess.buf.reset()
	sess.endDrain(r)
	sess.detach() // first: nothing is sent to the dead adapter any more
	_, _ = sess.append(ctx, ioSeq, eventlog.Entry{Kind: events.LogControl, Value: ev})
	if sess.turn != nil {
		sess.endTurn(ctx, ioSeq, events.OutcomeFailed, "", events.Errorf(events.CodeAdapterExited, "the agent exited during the turn"))
	}
	sess.project(ctx)
}
