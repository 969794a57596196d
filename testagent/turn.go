package testagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// echoParts is how many agent_message_chunk updates an echo reply is cut into.
const echoParts = 3

// errTurnCancelled ends a turn with stopReason "cancelled".
var errTurnCancelled = errors.New("turn cancelled")

// turn is one running session/prompt.
type turn struct {
	a     *agent
	sess  *session
	reqID json.RawMessage

	cancelled chan struct{} // closed by session/cancel, $/cancel_request or session/close
	once      sync.Once

	// Message ids of the current agent message and thought; "" means the
	// next chunk of that kind starts a new message. Only the turn goroutine
	// touches them.
	msgID, thoughtID string

	// msgOpen reports that the current agent message ends in text that
	// does not end a line, so a report must start a new one.
	msgOpen bool

	stampEnd bool // "stampend": the prompt response carries _meta.skein.sentAt

	// later are the commands after "later": they run once the prompt has
	// been answered, outside any turn.
	later []op

	// blocks are the prompt's content blocks as the agent got them.
	blocks []json.RawMessage
}

func (t *turn) cancel() { t.once.Do(func() { close(t.cancelled) }) }

// done reports whether the turn should stop at this command boundary.
func (t *turn) done(ctx context.Context) bool {
	select {
	case <-t.cancelled:
		return true
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// wait returns after d, or errTurnCancelled as soon as the turn is
// cancelled or ctx ends.
func (t *turn) wait(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-t.cancelled:
		return errTurnCancelled
	case <-ctx.Done():
		return errTurnCancelled
	}
}

// outcome is how a turn ends: a stop reason, a JSON-RPC error, or a crash
// (no answer at all).
type outcome struct {
	stopReason string
	err        *rpcError
	crash      bool
}

// promptParams are the params of session/prompt. Content blocks stay raw so
// the user message recorded for session/load is what the client sent.
type promptParams struct {
	SessionID string            `json:"sessionId"`
	Prompt    []json.RawMessage `json:"prompt"`
}

// startPrompt registers a turn for msg and runs it in its own goroutine. The
// registration happens here, on the reading goroutine, so a session/cancel
// read after this prompt always finds the turn.
func (a *agent) startPrompt(ctx context.Context, msg inMessage) {
	var p promptParams
	if !a.decodeParams(msg, &p) {
		return
	}
	if p.SessionID == "" {
		a.respondErr(msg.ID, errInvalidParams("sessionId is required"))
		return
	}
	if p.Prompt == nil {
		a.respondErr(msg.ID, errInvalidParams("prompt is required"))
		return
	}
	var text strings.Builder
	for i, block := range p.Prompt {
		var b struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(block, &b); err != nil {
			a.respondErr(msg.ID, errInvalidParams("prompt: content block: %v", err))
			return
		}
		// ACP: a client sends only the blocks the agent advertised. A
		// strict agent shows a client that does not.
		if need := a.cfg.PromptCapabilities.missing(b.Type); need != "" {
			a.respondErr(msg.ID, errInvalidParams("prompt: content block %d is %s, but promptCapabilities.%s was not advertised", i, b.Type, need))
			return
		}
		if b.Type == "text" {
			text.WriteString(b.Text)
		}
	}

	a.mu.Lock()
	s := a.sessions[p.SessionID]
	if s == nil {
		a.mu.Unlock()
		a.respondErr(msg.ID, errSessionNotFound(p.SessionID))
		return
	}
	if s.turn != nil {
		a.mu.Unlock()
		a.respondErr(msg.ID, errInternal("session %s already has a prompt in progress", s.id))
		return
	}
	t := &turn{a: a, sess: s, reqID: msg.ID, cancelled: make(chan struct{}), blocks: p.Prompt}
	s.turn = t
	a.prompts[idKey(msg.ID)] = t
	// The user's message is recorded for session/load replay, not sent now:
	// the client has it already.
	s.nextUser++
	userID := "user_" + strconv.Itoa(s.nextUser)
	for _, block := range p.Prompt {
		if raw, err := marshalRaw(contentChunk{SessionUpdate: "user_message_chunk", Content: block, MessageID: userID}); err == nil {
			s.history = append(s.history, raw)
		}
	}
	a.mu.Unlock()

	a.turns.Go(func() {
		t.finish(t.run(ctx, text.String()))
		if t.later != nil {
			t.afterTurn(ctx)
		}
	})
}

// afterTurn runs the commands after "later" once the turn has been
// answered, as an agent's background task works on after end_turn: their
// updates and requests reach the client outside any turn, and the session
// is free for its next prompt meanwhile. Nothing cancels them but the end
// of stdin (a session/cancel finds no turn); how a request was answered is
// reported as an update, and an outcome (stop, error) has no prompt left
// to answer.
func (t *turn) afterTurn(ctx context.Context) {
	late := &turn{a: t.a, sess: t.sess, cancelled: make(chan struct{}), blocks: t.blocks}
	defer late.a.out.release()
	for _, o := range t.later {
		if late.done(ctx) {
			return
		}
		if !writesOnly[o.Kind] {
			late.a.out.release()
		}
		out, err := late.exec(ctx, o)
		if err != nil || out != nil {
			if out == nil || !out.crash {
				late.a.lg.Debug("commands after the turn ended", "session_id", t.sess.id, "line", o.Line, "err", err)
			}
			return
		}
	}
}

// run executes the prompt text as a script.
func (t *turn) run(ctx context.Context, text string) outcome {
	ops, err := parseScript(text)
	if err != nil {
		t.a.lg.Warn("script rejected", "session_id", t.sess.id, "err", err)
		t.chunk("agent_message_chunk", err.Error())
		return outcome{stopReason: stopEndTurn}
	}
	defer t.a.out.release() // a burst ends with the script
	for i, o := range ops {
		if t.done(ctx) {
			return outcome{stopReason: stopCancelled}
		}
		if o.Kind == opLater {
			t.later = ops[i+1:]
			return outcome{stopReason: stopEndTurn}
		}
		if !writesOnly[o.Kind] {
			t.a.out.release()
		}
		out, err := t.exec(ctx, o)
		switch {
		case errors.Is(err, errTurnCancelled):
			return outcome{stopReason: stopCancelled}
		case err != nil:
			return outcome{err: errInternal("%v", err)}
		case out != nil:
			return *out
		}
	}
	if t.done(ctx) {
		return outcome{stopReason: stopCancelled}
	}
	return outcome{stopReason: stopEndTurn}
}

// finish unregisters the turn, stores the session and answers the prompt.
// The turn is unregistered before the answer is written, so a client that
// sends the next prompt as soon as it reads the answer never hits "already
// in progress".
func (t *turn) finish(o outcome) {
	a := t.a
	a.mu.Lock()
	if t.sess.turn == t {
		t.sess.turn = nil
	}
	delete(a.prompts, idKey(t.reqID))
	a.mu.Unlock()
	if o.crash {
		return
	}
	a.persist(t.sess)
	if o.err != nil {
		a.respondErr(t.reqID, o.err)
		return
	}
	res := promptResult{StopReason: o.stopReason}
	if t.stampEnd {
		res.Meta = stampMeta()
	}
	a.respond(t.reqID, res)
}

// stampMeta returns the _meta that "stamp" and "stampend" put on what they
// write: the time just before the write, so a reader can measure latency.
func stampMeta() json.RawMessage {
	return json.RawMessage(`{"skein":{"sentAt":` + strconv.FormatInt(time.Now().UnixNano(), 10) + `}}`)
}

// stampedChunk writes one agent_message_chunk of the current message whose
// text is the JSON string text, stamped as "stamp" does.
func (t *turn) stampedChunk(text string) {
	if t.msgID == "" {
		t.a.mu.Lock()
		t.sess.nextMsg++
		t.msgID = "msg_" + strconv.Itoa(t.sess.nextMsg)
		t.a.mu.Unlock()
	}
	id, _ := json.Marshal(t.msgID)
	t.msgOpen = true // every stamped text is "." or bigText
	t.emitRaw(json.RawMessage(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":` + text + `},"messageId":` + string(id) + `,"_meta":` + string(stampMeta()) + `}`))
}

// stream runs "stream": o.N stamped chunks of o.Size bytes, chunk i due at
// start + i·o.Delay. The schedule is absolute, so the rate holds however
// long the writes take; a chunk that is late goes out at once.
func (t *turn) stream(ctx context.Context, o op) (*outcome, error) {
	text, _ := json.Marshal(bigText(int(o.Size)))
	start := time.Now()
	for i := range o.N {
		if wait := time.Until(start.Add(time.Duration(i) * o.Delay)); wait > 0 {
			if err := t.wait(ctx, wait); err != nil {
				return nil, err
			}
		} else if t.done(ctx) {
			return nil, errTurnCancelled
		}
		t.stampedChunk(string(text))
	}
	return nil, nil
}

// exec runs one op. A non-nil outcome ends the turn with it.
func (t *turn) exec(ctx context.Context, o op) (*outcome, error) {
	a := t.a
	switch o.Kind {
	case opEcho:
		for _, part := range splitEven("echo: "+o.Text, echoParts) {
			if t.done(ctx) {
				return nil, errTurnCancelled
			}
			t.chunk("agent_message_chunk", part)
		}
	case opSay:
		t.chunk("agent_message_chunk", o.Text)
	case opChunks:
		for i := range o.N {
			if t.done(ctx) {
				return nil, errTurnCancelled
			}
			t.chunk("agent_message_chunk", o.Text+" "+strconv.FormatInt(i+1, 10)+" ")
		}
	case opTick:
		// Numbered, so that a reader of the completed message can tell
		// that every chunk is in it, once and in order.
		for i := range o.N {
			if i > 0 {
				if err := t.wait(ctx, o.Delay); err != nil {
					return nil, err
				}
			} else if t.done(ctx) {
				return nil, errTurnCancelled
			}
			t.chunk("agent_message_chunk", strconv.FormatInt(i+1, 10)+" ")
		}
	case opMessage:
		t.msgID, t.thoughtID, t.msgOpen = "", "", false
	case opThink:
		t.chunk("agent_thought_chunk", o.Text)
	case opBig:
		t.chunk("agent_message_chunk", bigText(int(o.N)))
	case opTool:
		t.announce(o.ID, o.Text)
		t.emit(toolCall{SessionUpdate: "tool_call", ToolCallID: o.ID, Title: o.Text, Kind: "execute", Status: "pending",
			RawInput: map[string]string{"command": o.Text}})
		t.emit(toolCall{SessionUpdate: "tool_call_update", ToolCallID: o.ID, Status: "in_progress"})
		result := o.Text + ": done"
		t.emit(toolCall{SessionUpdate: "tool_call_update", ToolCallID: o.ID, Status: "completed",
			Content: textContent(result), RawOutput: map[string]string{"output": result}})
	case opToolStep:
		u := toolCall{SessionUpdate: "tool_call_update", ToolCallID: o.ID, Status: o.Status}
		if title, first := t.announce(o.ID, "Tool "+o.ID); first {
			u.SessionUpdate, u.Title, u.Kind = "tool_call", title, "execute"
		}
		if o.Text != "" {
			u.Content = textContent(o.Text)
		}
		t.emit(u)
	case opPlan:
		t.emit(planUpdate{SessionUpdate: "plan", Entries: o.Entries})
	case opPermission:
		return t.permission(ctx, o)
	case opPermissions:
		return t.permissions(ctx, o)
	case opSleep:
		if err := t.wait(ctx, o.Delay); err != nil {
			return nil, err
		}
	case opPause:
		err := pause(ctx, a.cfg.ControlDir, o.ID, t.sess.id, t.cancelled)
		switch {
		case errors.Is(err, errTurnCancelled):
			return nil, err
		case err != nil:
			// Not fatal: the script goes on, and the test sees why on stderr.
			a.stderrLine(fmt.Sprintf("skein-testagent: line %d: pause %s ignored: %v", o.Line, o.ID, err))
		}
	case opStop:
		return &outcome{stopReason: o.Status}, nil
	case opError:
		return &outcome{err: &rpcError{Code: o.N, Message: o.Text}}, nil
	case opCrash:
		a.out.kill()
		a.lg.Debug("crash", "session_id", t.sess.id, "code", o.N)
		select {
		case a.crash <- int(o.N):
		default: // another turn crashed first; its code wins
		}
		return &outcome{crash: true}, nil
	case opStderr:
		a.stderrLine(o.Text)
	case opGarbage:
		if err := a.out.writeLine([]byte(o.Text + "\n")); err != nil {
			a.lg.Debug("write garbage failed", "err", err)
		}
	case opUpdate:
		t.emitRaw(o.Raw)
	case opStamp:
		for i := range o.N {
			if i > 0 && o.Delay > 0 {
				if err := t.wait(ctx, o.Delay); err != nil {
					return nil, err
				}
			}
			if o.ID == "chunk" {
				t.stampedChunk(`"."`)
			} else {
				t.emitRaw(json.RawMessage(`{"sessionUpdate":"x_stamp","n":` + strconv.FormatInt(i+1, 10) + `,"_meta":` + string(stampMeta()) + `}`))
			}
		}
	case opStampEnd:
		t.stampEnd = true
	case opLater:
		// Already after the turn: the commands go on as they are.
	case opBurst:
		t.a.out.hold()
	case opStream:
		return t.stream(ctx, o)
	case opFlood:
		// n updates of an unknown kind ("x_flood"), each about size bytes:
		// durable one by one on the client side, for throughput tests.
		pad, _ := json.Marshal(strings.Repeat("x", int(o.Size)))
		for i := range o.N {
			t.emitRaw(json.RawMessage(fmt.Sprintf(`{"sessionUpdate":"x_flood","n":%d,"data":%s}`, i+1, pad)))
		}
	case opNotify:
		if err := a.out.writeJSON(outNotification{JSONRPC: "2.0", Method: o.ID, Params: o.Raw}); err != nil {
			a.lg.Debug("write notification failed", "err", err)
		}
	case opUsage:
		t.emit(usageUpdate{SessionUpdate: "usage_update", Used: o.Used, Size: o.Size})
	case opTitle:
		t.emit(sessionInfoUpdate{SessionUpdate: "session_info_update", Title: o.Text})
	case opMode:
		a.mu.Lock()
		t.sess.mode = o.ID
		opts := a.configOptionsLocked(t.sess)
		a.mu.Unlock()
		t.emit(currentModeUpdate{SessionUpdate: "current_mode_update", CurrentModeID: o.ID})
		if slices.Contains(a.cfg.ConfigOptions, configMode) {
			t.emit(configOptionUpdate{SessionUpdate: "config_option_update", ConfigOptions: opts})
		}
	case opConfig:
		a.mu.Lock()
		text := "config: mode=" + t.sess.mode + " model=" + t.sess.model
		a.mu.Unlock()
		t.chunk("agent_message_chunk", text)
	case opInstructions:
		a.mu.Lock()
		text := t.sess.instructions
		a.mu.Unlock()
		if text == "" {
			text = "(none)"
		}
		t.chunk("agent_message_chunk", "instructions: "+text)
	default:
		if probe, ok := probes[o.Kind]; ok { // files.go
			t.chunk("agent_message_chunk", probe(o))
			return nil, nil
		}
		if ask, ok := asks[o.Kind]; ok { // elicit.go
			return ask(t, ctx, o)
		}
		if report, ok := reports[o.Kind]; ok { // blocks.go
			report(t)
			return nil, nil
		}
		return nil, fmt.Errorf("line %d: unhandled command %q", o.Line, o.Kind)
	}
	return nil, nil
}

// permission sends session/request_permission and waits for the answer, a
// cancel, or the end of stdin. It reports the choice as a message chunk; a
// cancelled outcome ends the turn with stopReason "cancelled".
func (t *turn) permission(ctx context.Context, o op) (*outcome, error) {
	return t.waitPermission(ctx, t.askPermission(o.ID, o.Options))
}

// permissions asks for several tool calls at once (o.ID is a comma list):
// every request is on the wire before the first answer is awaited, so the
// client has them all pending together. The answers are reported in order.
func (t *turn) permissions(ctx context.Context, o op) (*outcome, error) {
	var replies []chan inMessage
	for id := range strings.SplitSeq(o.ID, ",") {
		replies = append(replies, t.askPermission(id, o.Options))
	}
	for _, reply := range replies {
		if out, err := t.waitPermission(ctx, reply); out != nil || err != nil {
			return out, err
		}
	}
	return nil, nil
}

// askPermission sends session/request_permission for tool call id and
// returns where its answer will arrive.
func (t *turn) askPermission(id string, options []permissionOption) chan inMessage {
	a := t.a
	a.mu.Lock()
	reqID := a.nextReqID
	a.nextReqID++
	reply := make(chan inMessage, 1)
	// The entry stays if the wait is abandoned, so the client's late
	// "cancelled" answer is taken quietly instead of logged as unknown.
	a.pending[strconv.FormatInt(reqID, 10)] = reply
	title := t.sess.tools[id]
	a.mu.Unlock()
	if title == "" {
		title = "Tool " + id
	}
	req := outRequest{JSONRPC: "2.0", ID: reqID, Method: methodRequestPermission, Params: permissionRequest{
		SessionID: t.sess.id,
		ToolCall: toolCall{ToolCallID: id, Title: title, Kind: "execute", Status: "pending",
			Content: textContent("skein-testagent wants to run " + title), RawInput: map[string]string{"command": title}},
		Options: options,
	}}
	if err := a.out.writeJSON(req); err != nil {
		a.lg.Debug("write permission request failed", "err", err)
	}
	return reply
}

// waitPermission waits for the answer on reply and reports it as a chunk.
func (t *turn) waitPermission(ctx context.Context, reply chan inMessage) (*outcome, error) {
	a := t.a
	var resp inMessage
	select {
	case resp = <-reply:
	case <-t.cancelled:
	case <-a.eof: // no answer can arrive any more
	case <-ctx.Done():
	}
	switch {
	case resp.ID == nil: // cancelled before the answer; the client will answer "cancelled"
		t.report("permission: cancelled")
		return nil, errTurnCancelled
	case resp.Error != nil:
		t.report(fmt.Sprintf("permission: error %d %s", resp.Error.Code, resp.Error.Message))
		return nil, nil
	}
	var r permissionResponse
	if err := json.Unmarshal(resp.Result, &r); err != nil {
		a.lg.Warn("bad permission response", "err", err)
	}
	switch r.Outcome.Outcome {
	case "selected":
		t.report("permission: selected " + r.Outcome.OptionID)
		return nil, nil
	case "cancelled":
		t.report("permission: cancelled")
		return nil, errTurnCancelled
	default:
		t.report("permission: invalid response " + string(resp.Result))
		return nil, nil
	}
}

// announce records a tool call id for the session. It returns the title the
// call was first announced with and whether this call announced it.
func (t *turn) announce(id, title string) (string, bool) {
	t.a.mu.Lock()
	defer t.a.mu.Unlock()
	if prev, ok := t.sess.tools[id]; ok {
		return prev, false
	}
	t.sess.tools[id] = title
	return title, true
}

// chunk sends one content chunk of kind with the current message id of that
// kind, starting a new message when there is none.
func (t *turn) chunk(kind, text string) {
	id := &t.msgID
	if kind == "agent_thought_chunk" {
		id = &t.thoughtID
	}
	if *id == "" {
		t.a.mu.Lock()
		t.sess.nextMsg++
		*id = "msg_" + strconv.Itoa(t.sess.nextMsg)
		t.a.mu.Unlock()
	}
	content, err := marshalRaw(textBlock{Type: "text", Text: text})
	if err != nil {
		t.a.lg.Error("encode chunk failed", "err", err)
		return
	}
	if kind == "agent_message_chunk" {
		t.msgOpen = !strings.HasSuffix(text, "\n")
	}
	t.emit(contentChunk{SessionUpdate: kind, Content: content, MessageID: *id})
}

// report sends text, the agent's account of how a request was answered, as
// a line of its own in the current agent message: the text before it and
// the text after it ("permission: selected yes", then "done") would
// otherwise run together.
func (t *turn) report(text string) {
	if t.msgOpen {
		text = "\n" + text
	}
	t.chunk("agent_message_chunk", text+"\n")
}

// emit records update in the session history and sends it.
func (t *turn) emit(update any) {
	raw, err := marshalRaw(update)
	if err != nil {
		t.a.lg.Error("encode update failed", "err", err)
		return
	}
	t.emitRaw(raw)
}

func (t *turn) emitRaw(raw json.RawMessage) {
	t.a.mu.Lock()
	t.sess.history = append(t.sess.history, raw)
	t.a.mu.Unlock()
	t.a.writeUpdate(t.sess.id, raw)
}

// stderrLine writes one raw line to stderr, between log records.
func (a *agent) stderrLine(s string) {
	if _, err := a.errw.Write([]byte(s + "\n")); err != nil {
		a.lg.Debug("write stderr failed", "err", err)
	}
}

func textContent(s string) []toolCallContent {
	return []toolCallContent{{Type: "content", Content: textBlock{Type: "text", Text: s}}}
}

// bigText returns n bytes of printable ASCII. The repeating alphabet makes a
// truncated or spliced payload easy to spot.
func bigText(n int) string {
	const pattern = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n {
		b.WriteString(pattern[:min(len(pattern), n-b.Len())])
	}
	return b.String()
}

// splitEven cuts s into at most parts pieces of nearly equal length, the way
// a model streams tokens: each cut moves to the next space, or else the
// previous one, when there is one (so pieces are "echo:", " Hello", " agent"),
// and never falls inside a UTF-8 sequence. Concatenated, the pieces are s.
func splitEven(s string, parts int) []string {
	var starts []int // byte offset of every rune
	for off := range s {
		starts = append(starts, off)
	}
	n := len(starts)
	parts = max(1, min(parts, n))
	out := make([]string, 0, parts)
	prev := 0 // rune index where the current piece starts
	for k := 1; k < parts; k++ {
		cut := max(k*n/parts, prev+1)
		if i := nearestSpace(s, starts, prev+1, cut); i >= 0 {
			cut = i
		}
		if cut >= n {
			break
		}
		out = append(out, s[starts[prev]:starts[cut]])
		prev = cut
	}
	if n == 0 {
		return append(out, s)
	}
	return append(out, s[starts[prev]:])
}

// nearestSpace returns the rune index of the first space at or after at, or
// failing that the last one before at but not before lo, or -1.
func nearestSpace(s string, starts []int, lo, at int) int {
	for i := at; i < len(starts); i++ {
		if s[starts[i]] == ' ' {
			return i
		}
	}
	for i := min(at, len(starts)) - 1; i >= lo; i-- {
		if s[starts[i]] == ' ' {
			return i
		}
	}
	return -1
}
