package testagent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// JSON-RPC 2.0 error codes the agent answers with. ACP reuses the standard
// codes and adds -32002 for unknown sessions (docs/protocol/v1, schema ErrorCode).
const (
	codeParseError       = -32700
	codeInvalidRequest   = -32600
	codeMethodNotFound   = -32601
	codeInvalidParams    = -32602
	codeInternalError    = -32603
	codeResourceNotFound = -32002
)

// maxLineBytes bounds one inbound JSON-RPC line. Prompts carry images and
// embedded resources as base64, so the bound is generous; a longer line is
// discarded and answered with a parse error instead of exhausting memory.
const maxLineBytes = 64 << 20

// rpcError is the JSON-RPC error object. Data is omitted when nil.
type rpcError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

func errMethodNotFound(method string) *rpcError {
	return &rpcError{Code: codeMethodNotFound, Message: "Method not found", Data: map[string]string{"method": method}}
}

func errInvalidParams(format string, args ...any) *rpcError {
	return &rpcError{Code: codeInvalidParams, Message: "Invalid params", Data: map[string]string{"details": fmt.Sprintf(format, args...)}}
}

func errInternal(format string, args ...any) *rpcError {
	return &rpcError{Code: codeInternalError, Message: "Internal error", Data: map[string]string{"details": fmt.Sprintf(format, args...)}}
}

func errSessionNotFound(id string) *rpcError {
	return &rpcError{Code: codeResourceNotFound, Message: "Resource not found", Data: map[string]string{"sessionId": id}}
}

// nullID is the id of answers to messages whose id could not be read.
var nullID = json.RawMessage("null")

// Outbound message shapes. Field order is wire order: jsonrpc, id, method,
// params/result/error, as the TypeScript SDK writes them.
type (
	outRequest struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int64  `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}
	outNotification struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}
	outResult struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}
	outError struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *rpcError       `json:"error"`
	}
)

// inMessage is one decoded inbound line. Presence matters more than value
// (a request has method and id, a notification only method, a response only
// id), so fields are looked up by exact key rather than through a struct:
// encoding/json would also match "METHOD" or "Id".
type inMessage struct {
	JSONRPC   string
	ID        json.RawMessage // nil when absent; "null" when null
	Method    string
	HasMethod bool
	Params    json.RawMessage
	Result    json.RawMessage
	Error     *rpcError
}

// errNotRequest is returned by decodeMessage for valid JSON that is not a
// JSON-RPC message; the caller answers -32600.
var errNotRequest = errors.New("not a JSON-RPC 2.0 message")

// decodeMessage parses line. For bytes that are not JSON at all it returns
// parseErr true (answered with -32700); for JSON that is not a usable message
// it returns an error wrapping errNotRequest (answered with -32600), with
// msg.ID set when it could be read so the answer can carry it.
func decodeMessage(line []byte) (msg inMessage, parseErr bool, err error) {
	if !json.Valid(line) {
		return msg, true, errors.New("invalid JSON")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil || fields == nil {
		return msg, false, fmt.Errorf("%w: not an object", errNotRequest)
	}
	if id, ok := fields["id"]; ok {
		if !validID(id) {
			return msg, false, fmt.Errorf("%w: id must be a string, number or null", errNotRequest)
		}
		msg.ID = id
	}
	if v, ok := fields["jsonrpc"]; !ok || json.Unmarshal(v, &msg.JSONRPC) != nil || msg.JSONRPC != "2.0" {
		return msg, false, fmt.Errorf("%w: jsonrpc must be \"2.0\"", errNotRequest)
	}
	if v, ok := fields["method"]; ok {
		if json.Unmarshal(v, &msg.Method) != nil {
			return msg, false, fmt.Errorf("%w: method must be a string", errNotRequest)
		}
		msg.HasMethod = true
	}
	msg.Params = fields["params"]
	msg.Result = fields["result"]
	if v, ok := fields["error"]; ok && !bytes.Equal(v, nullID) {
		var e rpcError
		if json.Unmarshal(v, &e) != nil {
			return msg, false, fmt.Errorf("%w: malformed error object", errNotRequest)
		}
		msg.Error = &e
	}
	if !msg.HasMethod && msg.ID == nil {
		return msg, false, fmt.Errorf("%w: neither method nor id", errNotRequest)
	}
	return msg, false, nil
}

// validID reports whether raw is a JSON-RPC id: a string, a number or null.
func validID(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	default:
		return bytes.Equal(raw, nullID)
	}
}

// lineWriter serializes whole lines onto one stream: every message is
// encoded first and written with a single Write under the mutex, so lines
// from concurrent turns never interleave. After kill, writes are dropped,
// which is how "crash" stops all output at once even while another goroutine
// is blocked writing.
type lineWriter struct {
	mu   sync.Mutex
	w    io.Writer
	dead atomic.Bool
	// held gathers the lines of a burst (hold) for one Write (release).
	held    []byte
	holding bool
}

// hold gathers the lines written from now on, to go out in one Write at
// release: a burst, which the reader gets in one read.
func (lw *lineWriter) hold() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.holding = true
}

// release writes the lines gathered since hold, in one Write.
func (lw *lineWriter) release() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	held := lw.held
	lw.held, lw.holding = nil, false
	if len(held) > 0 && !lw.dead.Load() {
		_, _ = lw.w.Write(held) // a write that fails fails the next line too
	}
}

// writeJSON encodes v as one line. HTML escaping is off so text reads as
// real agents write it (they are JavaScript or Rust, which do not escape <>&).
func (lw *lineWriter) writeJSON(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode appends the newline
		return fmt.Errorf("encode message: %w", err)
	}
	return lw.writeLine(buf.Bytes())
}

// writeLine writes b, which must end in a newline, unless the writer is dead.
func (lw *lineWriter) writeLine(b []byte) error {
	if lw.dead.Load() {
		return errWriterDead
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.dead.Load() {
		return errWriterDead
	}
	if lw.holding {
		lw.held = append(lw.held, b...)
		return nil
	}
	_, err := lw.w.Write(b)
	return err
}

// kill makes every later write a no-op. It does not wait for a write in
// progress.
func (lw *lineWriter) kill() { lw.dead.Store(true) }

var errWriterDead = errors.New("output closed")

// lockedWriter makes a shared io.Writer safe for the slog handler and the
// script's raw "stderr" lines at once; each Write is passed through whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// readLine returns the next newline-terminated line from r without the line
// terminator. A final line without a newline is returned with err == nil; the
// following call returns io.EOF. A line longer than maxLineBytes is consumed
// and reported with tooLong set.
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		frag, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(frag) > maxLineBytes {
				tooLong, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		switch {
		case err == nil:
			return trimEOL(line), tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && (len(line) > 0 || tooLong):
			return trimEOL(line), tooLong, nil
		default:
			return nil, false, err
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
