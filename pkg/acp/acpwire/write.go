package acpwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Call sends a request and waits for its response. It returns the raw
// result (possibly the literal null) on success, the agent's *RPCError when
// it answered with an error, ctx.Err() when ctx is done first (the request
// is abandoned: a late answer reaches only OnResponse; with
// Options.SendCancelRequest the agent is also sent $/cancel_request), and
// Err() when the connection ends first. If ctx is already done, nothing is
// sent.
//
// params is encoded as described at CallAsync. Every notification and
// request read before the response has been dispatched before Call returns.
// Call must not be used from a callback: the reader would wait for itself.
func (c *Conn) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan *Message, 1)
	id, err := c.callAsync(method, params, func(m *Message) { ch <- m })
	if err != nil {
		return nil, err
	}
	select {
	case m := <-ch:
		return c.result(m)
	case <-ctx.Done():
		if c.abandon(id) && c.opts.SendCancelRequest {
			params := append(append([]byte(`{"requestId":`), idBytes(id)...), '}')
			if err := c.Notify(MethodCancelRequest, json.RawMessage(params)); err != nil {
				c.lg.Debug("cannot send $/cancel_request", logKeyID, id, logKeyErr, err)
			}
		}
		return nil, ctx.Err()
	case <-c.stopped:
		select {
		case m := <-ch: // the response won the race
			return c.result(m)
		default:
			return nil, c.Err()
		}
	}
}

// result turns the message that completed a call into Call's results.
func (c *Conn) result(m *Message) (json.RawMessage, error) {
	switch {
	case m.Raw == nil: // synthesized: the connection ended
		return nil, c.Err()
	case m.Error != nil:
		return nil, m.Error
	default:
		return m.Result, nil
	}
}

// abandon forgets the pending call id. It reports whether the call was still
// pending (no response had been dispatched).
func (c *Conn) abandon(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// CallAsync sends a request and returns at once with its id (a JSON
// number). Exactly one of these happens: CallAsync returns an error and
// done is never called, or done is called exactly once, on the reader
// goroutine, with the response. Since the reader dispatches in stream
// order, every notification received before the response has been delivered
// before done runs, and OnResponse has already seen the response.
//
// If the connection ends before the response arrives, done instead gets a
// synthesized Message: Raw nil, ID the request's id, and Error
// {Code: CodeInternalError, Message: "adapter connection ended before the
// response: <Err()>"}. Check Raw == nil to tell it from a real -32603. done
// may be nil to ignore the response.
//
// params may be nil or an empty json.RawMessage (sent as {}: every ACP
// method takes an object), a json.RawMessage (sent verbatim; it must be
// valid JSON without newlines, so compact pretty-printed JSON first), or any
// value encoding/json can marshal (marshalled without HTML escaping).
func (c *Conn) CallAsync(method string, params any, done func(*Message)) (id json.RawMessage, err error) {
	n, err := c.callAsync(method, params, done)
	if err != nil {
		return nil, err
	}
	return idBytes(n), nil
}

func (c *Conn) callAsync(method string, params any, done func(*Message)) (int64, error) {
	if method == "" {
		return 0, invalidArgument("call without a method")
	}
	p, err := encodeValue(params)
	if err != nil {
		return 0, invalidArgument("%s params: %v", method, err)
	}
	if done == nil {
		done = func(*Message) {}
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, c.err
	}
	id := c.nextID
	c.nextID++
	c.pending[id] = done // before the write: the answer may beat Write's return
	c.mu.Unlock()

	line := append([]byte(`{"jsonrpc":"2.0","id":`), idBytes(id)...)
	line = append(line, `,"method":`...)
	line = appendString(line, method)
	line = append(line, `,"params":`...)
	line = append(line, p...)
	line = append(line, "}\n"...)
	if err := c.write(line); err != nil {
		if c.abandon(id) {
			return 0, err
		}
		// The reader has taken the call (a response, or the end of the
		// connection) and will call done: report success to keep the
		// exactly-once contract.
	}
	return id, nil
}

// Notify sends a notification. params is encoded as described at CallAsync.
func (c *Conn) Notify(method string, params any) error {
	if method == "" {
		return invalidArgument("notification without a method")
	}
	p, err := encodeValue(params)
	if err != nil {
		return invalidArgument("%s params: %v", method, err)
	}
	line := append([]byte(`{"jsonrpc":"2.0","method":`), appendString(nil, method)...)
	line = append(line, `,"params":`...)
	line = append(line, p...)
	line = append(line, "}\n"...)
	return c.write(line)
}

// Respond answers the incoming request id (Message.ID, passed back
// unchanged) with result, encoded as described at CallAsync (nil sends {}).
// Answer each request once; the Conn does not check.
func (c *Conn) Respond(id json.RawMessage, result any) error {
	if err := checkID(id); err != nil {
		return err
	}
	r, err := encodeValue(result)
	if err != nil {
		return invalidArgument("result: %v", err)
	}
	line := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	line = append(line, `,"result":`...)
	line = append(line, r...)
	line = append(line, "}\n"...)
	return c.write(line)
}

// RespondError answers the incoming request id with the error e. e.Data,
// when set, is sent verbatim and must be valid JSON without newlines.
func (c *Conn) RespondError(id json.RawMessage, e *RPCError) error {
	if err := checkID(id); err != nil {
		return err
	}
	if e == nil {
		return invalidArgument("RespondError with a nil error")
	}
	line := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	line = append(line, `,"error":{"code":`...)
	line = strconv.AppendInt(line, int64(e.Code), 10)
	line = append(line, `,"message":`...)
	line = appendString(line, e.Message)
	if len(e.Data) > 0 {
		if err := checkRaw(e.Data); err != nil {
			return invalidArgument("error data: %v", err)
		}
		line = append(line, `,"data":`...)
		line = append(line, e.Data...)
	}
	line = append(line, "}}\n"...)
	return c.write(line)
}

// WriteRaw writes line, which must be exactly one JSON-RPC 2.0 message
// (Parse must accept it) without a newline, verbatim, followed by '\n'. It
// is for forwarding messages built elsewhere. A request sent this way is
// not tracked: its response reaches only OnResponse, and its id must not
// collide with the Conn's own numeric ids (use a string id).
func (c *Conn) WriteRaw(line []byte) error {
	if bytes.IndexByte(line, '\n') >= 0 {
		return invalidArgument("WriteRaw: line contains a newline")
	}
	if _, err := Parse(line); err != nil {
		return invalidArgument("WriteRaw: %v", err)
	}
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	return c.write(buf)
}

// write writes one complete line (ending in '\n') under the write mutex.
func (c *Conn) write(line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	if _, err := c.w.Write(line); err != nil {
		return newError(ErrClosed, err, "write to adapter stdin")
	}
	return nil
}

// idBytes renders an outgoing id.
func idBytes(id int64) json.RawMessage { return strconv.AppendInt(nil, id, 10) }

// checkID reports whether id can be echoed as a JSON-RPC id.
func checkID(id json.RawMessage) error {
	if !json.Valid(id) || bytes.IndexByte(id, '\n') >= 0 {
		return invalidArgument("invalid response id %q", id)
	}
	switch valueType(trimSpace(id)) {
	case "number", "string", "null":
		return nil
	default:
		return invalidArgument("response id %s is not a number, string or null", id)
	}
}

// checkRaw reports whether raw can be spliced into a line verbatim.
func checkRaw(raw json.RawMessage) error {
	if !json.Valid(raw) {
		return errors.New("raw value is not valid JSON")
	}
	if bytes.IndexByte(raw, '\n') >= 0 {
		return errors.New("raw value contains a newline; compact it first")
	}
	return nil
}

// encodeValue encodes params or a result: nil and empty raw values are {},
// json.RawMessage is kept verbatim, anything else is marshalled without
// HTML escaping.
func encodeValue(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return []byte("{}"), nil
	case json.RawMessage:
		if len(v) == 0 {
			return []byte("{}"), nil
		}
		if err := checkRaw(v); err != nil {
			return nil, err
		}
		return v, nil
	default:
		return marshal(v)
	}
}

// marshal is json.Marshal without HTML escaping, so that "<" in a path or a
// prompt reaches the agent as written.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// appendString appends s as a JSON string. Plain printable ASCII, which is
// every method name, is copied directly; anything else goes through
// encoding/json.
func appendString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := marshal(s) // marshalling a string cannot fail
	return append(b, q...)
}
