package adapterrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/events"
)

// The runner alone speaks ACP JSON-RPC. What an adapter writes becomes
// typed ACP_IO records (events/runner.go), numbered (HeaderRecordNo) in
// stdout order by the connection's single reader goroutine:
//
//	session/update              → AdapterUpdate (not while a session/load replays)
//	session/request_permission  → AdapterPermissionRequest, answered later by RunnerPermission
//	elicitation/create          → AdapterInputRequest, answered later by RunnerInput (inputs.go)
//	the answer to session/prompt → AdapterPromptResult
//	other requests (fs/*, terminal/*, ...) → answered -32601 here: Skein advertises none
//	other notifications         → dropped
//
// Every record is published with an acknowledgement that the process's
// window (iowindow.go) follows, and sent again under the same Nats-Msg-Id
// until ACP_IO stored it (invariant 11): losing a stream leader or a node
// pauses an adapter's output, it loses none of it. What is in flight is
// bounded per adapter (adapter-runner.io-window-records and -bytes); a full
// window blocks the reader goroutine, so the runner stops reading that
// adapter's stdout and the adapter blocks on its pipe until the stream
// stores again. A record sent again may be stored after a later one; the
// session owner applies a process's records in record-number order.
//
// What the session service asks for (RunnerPrompt, RunnerCancel,
// RunnerPermission, RunnerSetConfig) becomes JSON-RPC here, with the
// adapter's private session ID and its own request ids, which never cross
// NATS.

// wireState is what the runner keeps about one adapter's ACP session.
type wireState struct {
	mu sync.Mutex
	// sessionID is the adapter's private ACP session ID, set once the
	// handshake or restore opened the session; "" before.
	sessionID string
	// legacy maps the ID of each config option the runner made from the
	// agent's legacy modes or models lists to the method that sets it
	// (session/set_mode, session/set_model).
	legacy map[string]string
	// asks are the agent's permission and input requests not yet
	// answered, by the runner's ID of each (asks.go).
	asks map[string]ask
}

// opened records the ACP session the handshake or restore opened, and the
// options it mapped from legacy lists.
func (p *process) opened(sessionID string, legacy map[string]string) {
	p.wire.mu.Lock()
	defer p.wire.mu.Unlock()
	p.wire.sessionID, p.wire.legacy = sessionID, legacy
}

// session returns the adapter's ACP session ID.
func (p *process) session() (string, error) {
	p.wire.mu.Lock()
	defer p.wire.mu.Unlock()
	if p.wire.sessionID == "" {
		return "", events.Errorf(events.CodeUnavailable, "agent %s has not opened its ACP session yet", p.agent.ID)
	}
	return p.wire.sessionID, nil
}

// publish appends v to the session's ACP_IO subject, numbered in
// HeaderRecordNo, and returns once the process's window holds it
// (iowindow.go): the window sends it and sends it again, with the same
// Nats-Msg-Id, until JetStream acknowledged it stored. A full window
// blocks the caller, the connection's reader goroutine or the stderr
// goroutine, so that the runner stops reading an adapter whose output the
// stream is not storing.
//
// Every record goes this way, those that end or move a turn too (a
// prompt's answer, a permission request, an exit), and none waits for its
// own acknowledgement. They used to (publishStored), because adapter
// output was published unacknowledged and such a record, lost, had no
// later record to reveal the gap, so a turn could wait for it forever.
// Now no record is lost while the window retries it, and its order among
// the others is the record number, which the owner applies in order:
// waiting would add an acknowledgement's round trip to the end of every
// turn and buy nothing. Only a refusal for good (too large) or a stopped
// adapter gives a record up; neither is what a turn waits on.
//
// The updates gathered from a burst (gather) are published first: records
// are numbered in the order the adapter wrote them.
func (p *process) publish(v events.Variant) {
	p.pub.Lock()
	defer p.pub.Unlock()
	p.flushLocked()
	p.publishLocked(v)
}

// gather holds an update the reader got in a burst of the adapter's stdout
// (several lines read at once), to be published with the rest of the
// burst as one AdapterUpdates record when the reader has handled them all
// (flush, its acpwire.Options.OnIdle). A burst of a flood then costs
// ACP_IO, its republish and the owner one message instead of one per
// update, and a lone update waits for nothing: the reader is idle at once
// after it. A burst is cut at maxBurstUpdates updates or maxBurstBytes.
func (p *process) gather(u *acpwire.SessionUpdate) {
	p.pub.Lock()
	defer p.pub.Unlock()
	if n := len(p.pub.updates); n > 0 && (n == maxBurstUpdates || p.pub.bytes+len(u.Update) > maxBurstBytes) {
		p.flushLocked()
	}
	// The kind and messageId go with the update, so that the session
	// service routes it without scanning it again.
	if u.MessageID != nil && p.pub.ids == nil {
		p.pub.ids = make([]*string, len(p.pub.updates), cap(p.pub.updates))
	}
	if p.pub.ids != nil {
		p.pub.ids = append(p.pub.ids, u.MessageID)
	}
	p.pub.updates = append(p.pub.updates, events.JSON(u.Update))
	p.pub.kinds = append(p.pub.kinds, u.Kind)
	p.pub.bytes += len(u.Update)
}

// A burst's record holds at most maxBurstUpdates updates of maxBurstBytes
// in all (or one larger update alone): far below any NATS max_payload, and
// few enough that a burst is not held for long behind the reader.
const (
	maxBurstUpdates = 256
	maxBurstBytes   = 64 << 10
)

// flush publishes the updates gathered: one AdapterUpdate, or several as
// one AdapterUpdates.
func (p *process) flush() {
	p.pub.Lock()
	defer p.pub.Unlock()
	p.flushLocked()
}

func (p *process) flushLocked() {
	switch len(p.pub.updates) {
	case 0:
		return
	case 1:
		u := &events.AdapterUpdate{Update: p.pub.updates[0], Kind: p.pub.kinds[0]}
		if p.pub.ids != nil {
			u.MessageID = p.pub.ids[0]
		}
		p.publishLocked(u)
	default:
		p.publishLocked(&events.AdapterUpdates{Updates: p.pub.updates, Kinds: p.pub.kinds, MessageIDs: p.pub.ids})
	}
	clear(p.pub.updates)
	clear(p.pub.kinds)
	p.pub.updates, p.pub.kinds, p.pub.ids, p.pub.bytes = p.pub.updates[:0], p.pub.kinds[:0], nil, 0
}

// publishLocked is publish, with p.pub held and nothing gathered.
func (p *process) publishLocked(v events.Variant) {
	data, err := events.Marshal(v)
	if err != nil {
		p.lg.Error("encode runner record", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
		return
	}
	// The number and the hand-over go together (under p.pub): the window
	// holds the records in number order even when stdout's and stderr's
	// goroutines publish at once.
	if limit := p.io.js.Conn().MaxPayload(); int64(len(data))+ioHeaderRoom > limit {
		v = p.tooLarge(v, len(data), limit)
		if data, err = events.Marshal(v); err != nil {
			p.lg.Error("encode runner record", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
			return
		}
	}
	n := p.pub.records + 1
	p.pub.records = n
	hdr := nats.Header{
		events.HeaderRecord:    []string{v.VariantName()},
		events.HeaderProcessID: []string{p.id},
		events.HeaderRecordNo:  []string{strconv.FormatUint(n, 10)},
		jetstream.MsgIDHeader:  []string{ioMsgID(p.ns, p.sid, p.id, n)},
	}
	p.io.add(n, &nats.Msg{Subject: p.subject, Header: hdr, Data: data})
}

// ioHeaderRoom is room for a record's headers (record, process, number,
// message ID) within the server's max_payload, which counts them too.
const ioHeaderRoom = 1 << 10

// tooLarge stands in for record v, size bytes encoded, which one NATS
// message cannot carry (max_payload limit): the stream would refuse it
// for good, and the turn would go on, or end, without it. What goes
// instead is the failure of the turn whose prompt was written last, typed
// payload_too_large and naming the limit, so that the session fails that
// turn at once; a turn that ended already ignores it.
func (p *process) tooLarge(v events.Variant, size int, limit int64) events.Variant {
	p.mu.Lock()
	turnID := ""
	if len(p.order) > 0 {
		turnID = p.order[len(p.order)-1]
	}
	p.mu.Unlock()
	e := events.Errorf(events.CodePayloadTooLarge, "the agent wrote an update of %d bytes, more than one NATS message carries (max_payload %d bytes)",
		size, limit)
	p.m.protocolErrors.Inc()
	p.lg.Error("adapter output too large for ACP_IO; failing its turn", events.LogKeyRecord, v.VariantName(), "bytes", size,
		"max_payload", limit, events.LogKeyTurn, turnID)
	return &events.AdapterPromptResult{TurnID: turnID, Error: &events.AdapterCallError{Code: e.Code, Message: e.Message}}
}

// notACP counts and logs something the adapter sent that breaks the
// protocol but not the connection.
func (p *process) notACP(err error) {
	p.m.protocolErrors.Inc()
	p.lg.Warn("adapter broke the ACP protocol", events.LogKeyErr, err)
}

func (p *process) onNotification(m *acpwire.Message) {
	if m.Method != acpwire.MethodSessionUpdate {
		p.lg.Debug("adapter notification not forwarded", logKeyMethod, m.Method)
		return
	}
	if p.replaying.Load() {
		return // the log is the only history: a load's replay is not output
	}
	u, err := m.SessionUpdate()
	if err != nil {
		p.notACP(err)
		return
	}
	p.gather(u)
}

func (p *process) onRequest(m *acpwire.Message) {
	// What came before the request is published before it is answered,
	// since the answer may wait on the adapter's stdin.
	p.flush()
	if m.Method == methodElicitationCreate {
		p.onInputRequest(m)
		return
	}
	if m.Method != acpwire.MethodRequestPermission {
		// fs/*, terminal/* and the rest: Skein advertises none of them.
		data, _ := json.Marshal(struct {
			Method string `json:"method"`
		}{m.Method}) // a struct of one string always encodes
		p.refuse(m, &acpwire.RPCError{Code: acpwire.CodeMethodNotFound, Message: "Method not found", Data: data})
		return
	}
	if _, err := acpwire.ParsePermissionRequest(m.Params); err != nil {
		p.notACP(err)
		p.refuse(m, &acpwire.RPCError{Code: acpwire.CodeInvalidParams, Message: "Invalid params: " + err.Error()})
		return
	}
	p.forward(m, "perm_", func(requestID string, params events.JSON) events.Variant {
		return &events.AdapterPermissionRequest{RequestID: requestID, Request: params}
	})
}

// refuse answers the adapter's request m with e.
func (p *process) refuse(m *acpwire.Message, e *acpwire.RPCError) {
	p.lg.Debug("adapter request refused", logKeyMethod, m.Method, "rpc_code", e.Code)
	<-p.connReady
	if err := p.conn.RespondError(m.ID, e); err != nil {
		p.lg.Warn("cannot answer an adapter request", logKeyMethod, m.Method, events.LogKeyErr, err)
	}
}

// logKeyMethod names a JSON-RPC method in the runner's logs.
const logKeyMethod = "rpc_method"

// prompt writes turn turnID's session/prompt to the adapter, once: a turn
// whose prompt was written already is acknowledged again and not written
// twice. The session owner sends a dispatch again when it got no answer
// (its request, or the acknowledgement, lost with a NATS node) and the
// runner says the prompt was not written; the original request may still
// arrive after that, and must not reach the adapter a second time.
//
// Its answer is published as an AdapterPromptResult from the reader
// goroutine, after every update the adapter wrote before it.
func (p *process) prompt(turnID string, prompt events.JSON) error {
	sessionID, err := p.session()
	if err != nil {
		return err
	}
	// The turn is marked before the write, so that two requests for it
	// that arrive together write it once; a failed write unmarks it (the
	// adapter is gone then, and status says so first).
	p.mu.Lock()
	if p.written[turnID] {
		p.mu.Unlock()
		p.m.promptRepeats.Inc()
		return nil
	}
	p.written[turnID] = true
	p.order = append(p.order, turnID)
	if len(p.order) > maxWritten {
		delete(p.written, p.order[0])
		p.order = p.order[1:]
	}
	p.mu.Unlock()
	err = p.conn.PromptAsync(sessionID, oneLine(prompt), func(res *acpwire.PromptResult, err error) {
		p.answered(turnID, res, err)
	})
	if err != nil {
		p.mu.Lock()
		delete(p.written, turnID)
		p.mu.Unlock()
		return p.writeError(acpwire.MethodSessionPrompt, err)
	}
	return nil
}

// answered publishes the adapter's answer to turn turnID's session/prompt.
func (p *process) answered(turnID string, res *acpwire.PromptResult, err error) {
	out := &events.AdapterPromptResult{TurnID: turnID}
	rpcErr, isRPC := errors.AsType[*acpwire.RPCError](err)
	switch {
	case isRPC:
		out.Error = &events.AdapterCallError{Code: events.CodeAdapterError, RPCCode: int32(rpcErr.Code), Message: rpcErr.Message}
	case err != nil:
		e := events.AsError(acpError(err))
		if e.Code == events.CodeLineTooLong {
			// The runner stopped reading the adapter at a line over the
			// limit: nothing it writes is read any more, the answer
			// included, while the adapter lives on, blocked on its pipe.
			// The turn fails now, naming the limit, rather than wait for
			// an answer or an exit that never come.
			p.lg.Error("adapter line over the limit; failing its turn", events.LogKeyTurn, turnID, events.LogKeyErr, err)
			out.Error = &events.AdapterCallError{Code: e.Code, Message: e.Message}
			break
		}
		if e.Code != events.CodeAdapterProtocol {
			// The adapter ended without answering: its exit, reported
			// next, is the outcome.
			return
		}
		p.notACP(err)
		out.Error = &events.AdapterCallError{Code: e.Code, Message: e.Message}
	case res.StopReason == "":
		err := events.Errorf(events.CodeAdapterProtocol, "session/prompt result has no stopReason")
		p.notACP(err)
		out.Error = &events.AdapterCallError{Code: err.Code, Message: err.Message}
	default:
		out.StopReason, out.Result = res.StopReason, events.JSON(res.Raw)
	}
	p.publish(out)
}

// cancel sends session/cancel.
func (p *process) cancel() error {
	sessionID, err := p.session()
	if err != nil {
		return err
	}
	if err := p.conn.Cancel(sessionID); err != nil {
		return p.writeError(acpwire.MethodSessionCancel, err)
	}
	return nil
}

// answerPermission answers the adapter's permission request requestID:
// option optionID, or cancelled when optionID is nil (asks.go).
func (p *process) answerPermission(requestID string, optionID *string) error {
	outcome := acp.PermissionCancelled()
	if optionID != nil {
		outcome = acp.PermissionSelected(*optionID)
	}
	return p.answerAsk(acpwire.MethodRequestPermission, "permission", requestID, outcome)
}

// setConfig sets option configID to value, one JSON string or boolean,
// and returns the agent's complete options after the change. An option
// the runner mapped from a legacy list is set with session/set_mode or
// session/set_model, which answer no options: the result is then nil.
func (p *process) setConfig(ctx context.Context, configID string, value events.JSON) ([]events.JSON, error) {
	v, err := events.ConfigValue(value)
	if err != nil {
		return nil, err
	}
	sessionID, err := p.session()
	if err != nil {
		return nil, err
	}
	p.wire.mu.Lock()
	method := p.wire.legacy[configID]
	p.wire.mu.Unlock()
	if method != "" {
		id, ok := v.(string)
		if !ok {
			return nil, events.Errorf(events.CodeInvalidRequest, "option %s takes a string", configID)
		}
		if method == acpwire.MethodSessionSetMode {
			err = p.conn.SetMode(ctx, sessionID, id)
		} else {
			err = p.conn.SetModel(ctx, sessionID, id)
		}
		if err != nil {
			return nil, p.callError(method, err)
		}
		return nil, nil
	}
	raw, err := p.conn.SetConfigOption(ctx, sessionID, configID, oneLine(value))
	if err != nil {
		return nil, p.callError(acpwire.MethodSessionSetConfigOption, err)
	}
	if raw == nil {
		return nil, nil // no list: the caller updates the one option
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, events.Errorf(events.CodeAdapterProtocol, "agent %s: session/set_config_option: configOptions is not an array", p.agent.ID)
	}
	opts := make([]events.JSON, len(list))
	for i, o := range list {
		opts[i] = events.JSON(o)
	}
	return opts, nil
}

// oneLine returns raw JSON without the line breaks that pretty-printing
// leaves between tokens, so that it fits in one ACP line. Anything else
// is left as it is, invalid JSON too (acpwire refuses it).
func oneLine(raw events.JSON) json.RawMessage {
	if !bytes.ContainsAny(raw, "\r\n") {
		return json.RawMessage(raw)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return json.RawMessage(raw)
	}
	return b.Bytes()
}

// writeError is a failed write of what to the adapter as the session
// service gets it: a request acpwire refused to send is CodeInvalidRequest;
// anything else means the adapter is gone.
func (p *process) writeError(what string, err error) error {
	if errors.Is(err, acpwire.ErrInvalidArgument) {
		return acpError(fmt.Errorf("%s: %w", what, err))
	}
	return events.Errorf(events.CodeAdapterExited, "write %s to agent %s: %v", what, p.agent.ID, err)
}

// maxWritten bounds how many turns a process remembers having written the
// prompt of.
const maxWritten = 1024

// status reports whether the process runs and whether turn turnID's
// session/prompt was written to it.
func (p *process) status(turnID string) *events.AdapterStatus {
	st := &events.AdapterStatus{}
	select {
	case <-p.exited:
		return st
	case <-p.conn.Done():
		return st
	default:
	}
	st.Alive = true
	p.mu.Lock()
	st.PromptWritten = turnID != "" && p.written[turnID]
	p.mu.Unlock()
	return st
}
