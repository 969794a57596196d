package testagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Input requests (ACP elicitation/create) and what the client advertised.
const (
	// elicit [MESSAGE] SCHEMA sends elicitation/create in form mode with
	// the message (a Go-quoted string, default "skein-testagent needs
	// input") and the requested schema, the rest of the line, byte for
	// byte, and reports the answer as a message chunk: "input: accept
	// CONTENT", "input: decline", "input: cancel", or "input: error CODE
	// MESSAGE". A turn cancelled while it waits ends cancelled.
	opElicit opKind = "elicit"
	// caps reports the clientCapabilities of initialize, as sent:
	// "caps: {...}".
	opCaps opKind = "caps"
)

const (
	methodElicitationCreate = "elicitation/create"
	defaultElicitMessage    = "skein-testagent needs input"
)

// asks runs the commands of this file; turn.exec hands them here.
var asks = map[opKind]func(t *turn, ctx context.Context, o op) (*outcome, error){
	opElicit: (*turn).elicit,
	opCaps: func(t *turn, _ context.Context, _ op) (*outcome, error) {
		t.a.mu.Lock()
		caps := string(t.a.clientCaps)
		t.a.mu.Unlock()
		t.chunk("agent_message_chunk", "caps: "+caps)
		return nil, nil
	},
}

func init() {
	keywords[opElicit] = parseElicit
	keywords[opCaps] = parseNoArgs
}

// parseElicit takes an optional quoted message, then the schema: a JSON
// object, kept as written (o.Raw).
func parseElicit(o *op, args string) error {
	o.Text = defaultElicitMessage
	if strings.HasPrefix(args, `"`) {
		q, err := strconv.QuotedPrefix(args)
		if err != nil {
			return fmt.Errorf("bad quoted message: %v", err)
		}
		o.Text, _ = strconv.Unquote(q)
		args = strings.TrimSpace(args[len(q):])
	}
	if !strings.HasPrefix(args, "{") || !json.Valid([]byte(args)) {
		return errors.New("needs a requested schema, a JSON object")
	}
	o.Raw = json.RawMessage(args)
	return nil
}

// elicit sends elicitation/create and waits for the answer, a cancel, or
// the end of stdin. The line is written by hand so that the schema goes
// out exactly as the script wrote it.
func (t *turn) elicit(ctx context.Context, o op) (*outcome, error) {
	a := t.a
	a.mu.Lock()
	reqID := a.nextReqID
	a.nextReqID++
	reply := make(chan inMessage, 1)
	a.pending[strconv.FormatInt(reqID, 10)] = reply
	sid := t.sess.id
	a.mu.Unlock()
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) } // a string always encodes
	line := `{"jsonrpc":"2.0","id":` + strconv.FormatInt(reqID, 10) + `,"method":"` + methodElicitationCreate +
		`","params":{"sessionId":` + quote(sid) + `,"mode":"form","message":` + quote(o.Text) +
		`,"requestedSchema":` + string(o.Raw) + "}}\n"
	if err := a.out.writeLine([]byte(line)); err != nil {
		a.lg.Debug("write elicitation request failed", "err", err)
	}
	var resp inMessage
	select {
	case resp = <-reply:
	case <-t.cancelled:
	case <-a.eof:
	case <-ctx.Done():
	}
	switch {
	case resp.ID == nil:
		t.report("input: cancelled")
		return nil, errTurnCancelled
	case resp.Error != nil:
		t.report(fmt.Sprintf("input: error %d %s", resp.Error.Code, resp.Error.Message))
		return nil, nil
	}
	var r struct {
		Action  string          `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(resp.Result, &r); err != nil {
		t.report("input: invalid response " + string(resp.Result))
		return nil, nil
	}
	text := "input: " + r.Action
	if len(r.Content) > 0 {
		text += " " + string(r.Content)
	}
	t.report(text)
	return nil, nil
}
