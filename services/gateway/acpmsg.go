package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"skein.dev/pkg/acp/acpwire"
)

// What the transports read of an ACP message: enough of its JSON-RPC
// envelope to route it (its kind, its ID, its method and its params'
// sessionId), as the official SDK's server reads it (protocol.js,
// jsonrpc.js); the rest is the bridge's. Member names match exactly, as in
// JavaScript; a name given twice means its last value, as there.

// acpMessage is the envelope of one message.
type acpMessage struct {
	jsonRPC   string
	hasID     bool
	idKey     string // the ID as a key (acpIDKey); "" when it is not a valid ID
	method    string
	hasMethod bool // method is present and a string
	// anyMethod is whether method is present at all, a string or not:
	// the SDK's test for a response is that it has no method member.
	anyMethod bool
	sessionID string // params.sessionId, when params is an object and it is a string
	hasResult bool
	hasError  bool
}

// acpEnvelope is the wire form acpMessage is read from. Absent members
// stay nil; a null one is "null".
type acpEnvelope struct {
	JSONRPC jsontext.Value `json:"jsonrpc"`
	ID      jsontext.Value `json:"id"`
	Method  jsontext.Value `json:"method"`
	Params  jsontext.Value `json:"params"`
	Result  jsontext.Value `json:"result"`
	Error   jsontext.Value `json:"error"`
}

var acpDecodeOptions = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// parseACPMessage reads the envelope of b, which must be one JSON object.
func parseACPMessage(b []byte) (acpMessage, error) {
	var env acpEnvelope
	if err := jsonv2.Unmarshal(b, &env, acpDecodeOptions); err != nil {
		return acpMessage{}, err
	}
	m := acpMessage{
		hasID:     env.ID != nil,
		anyMethod: env.Method != nil,
		hasResult: env.Result != nil,
		hasError:  env.Error != nil,
	}
	_ = jsonv2.Unmarshal(env.JSONRPC, &m.jsonRPC) // not a string: not "2.0"
	if m.hasID {
		m.idKey = acpIDKey(env.ID)
	}
	if env.Method.Kind() == '"' {
		m.hasMethod = jsonv2.Unmarshal(env.Method, &m.method, acpDecodeOptions) == nil
	}
	if env.Params.Kind() == '{' {
		var p struct {
			SessionID jsontext.Value `json:"sessionId"`
		}
		if jsonv2.Unmarshal(env.Params, &p, acpDecodeOptions) == nil && p.SessionID.Kind() == '"' {
			_ = jsonv2.Unmarshal(p.SessionID, &m.sessionID, acpDecodeOptions)
		}
	}
	return m, nil
}

// acpIDKey returns a JSON-RPC ID as a map key, the same for every spelling
// of one ID (1, 1.0 and 1e0 are one number), or "" for a value that is no
// ID (an object, an infinite number).
func acpIDKey(id jsontext.Value) string {
	switch id.Kind() {
	case 'n':
		return "null"
	case '"':
		var s string
		if jsonv2.Unmarshal(id, &s, acpDecodeOptions) != nil {
			return ""
		}
		return "s:" + s
	case '0':
		f, err := strconv.ParseFloat(string(id), 64)
		if err != nil {
			return "" // out of range: not a finite number
		}
		return "n:" + strconv.FormatFloat(f, 'g', -1, 64)
	}
	return ""
}

func (m acpMessage) envelope() bool { return m.jsonRPC == "2.0" }

// isRequest: a method and an ID.
func (m acpMessage) isRequest() bool { return m.envelope() && m.hasMethod && m.idKey != "" }

// isResponse: an ID, no method, and exactly one of result and error.
func (m acpMessage) isResponse() bool {
	return m.envelope() && !m.anyMethod && m.idKey != "" && m.hasResult != m.hasError
}

// isInitialize: the request that opens a connection.
func (m acpMessage) isInitialize() bool {
	return m.envelope() && m.hasID && m.hasMethod && m.method == acpwire.MethodInitialize
}

// acpSessionScoped are the methods whose POST must name its session in
// Acp-Session-Id even when its params do not (protocol.js).
var acpSessionScoped = map[string]bool{
	acpwire.MethodSessionCancel:          true,
	acpwire.MethodSessionClose:           true,
	acpwire.MethodSessionDelete:          true,
	"session/fork":                       true, // an unstable method of the SDK's
	acpwire.MethodSessionLoad:            true,
	acpwire.MethodSessionPrompt:          true,
	acpwire.MethodSessionResume:          true,
	acpwire.MethodSessionSetConfigOption: true,
	acpwire.MethodSessionSetMode:         true,
	acpwire.MethodSessionSetModel:        true,
}

// acpMaxIDBytes bounds a session ID a transport routes by, as the SDK's
// server does (maxIdLength): Skein's are far shorter.
const acpMaxIDBytes = 1024

// acpFrame returns msg on one line, for an SSE data field: JSON whose
// white space holds a line break is compacted (a string in JSON cannot
// hold one raw).
func acpFrame(msg []byte) ([]byte, error) {
	if !bytes.ContainsAny(msg, "\r\n") {
		return msg, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, msg); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// acpShape is what the first byte of a client's message says of it.
type acpShape int

const (
	acpObject  acpShape = iota
	acpBatch            // a JSON array: ACP uses no batches
	acpInvalid          // not JSON
	acpOther            // JSON, but neither object nor array
)

// shapeOf reads b's shape.
func shapeOf(b []byte) acpShape {
	if !json.Valid(b) {
		return acpInvalid
	}
	switch bytes.TrimLeft(b, " \t\r\n")[0] {
	case '{':
		return acpObject
	case '[':
		return acpBatch
	}
	return acpOther
}

// acpProtocolError is the JSON-RPC error a transport answers a message it
// cannot pass on with, id null as JSON-RPC asks when no ID can be read.
func acpProtocolError(code int, message string) []byte {
	b, _ := json.Marshal(map[string]any{ // cannot fail: strings and an int
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": message},
	})
	return b
}

// The protocol errors of the transports, as the SDK's words them.
var (
	acpBatchError   = acpProtocolError(acpwire.CodeInvalidRequest, "JSON-RPC batches are not supported")
	acpParseError   = acpProtocolError(acpwire.CodeParseError, "Parse error")
	acpInvalidError = acpProtocolError(acpwire.CodeInvalidRequest, "Invalid request")
)
