package eventjson

import (
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
)

// Durability values of the public JSON.
const (
	DurabilityDurable   = "durable"
	DurabilityEphemeral = "ephemeral"
)

// Public types of the permission and input events. A session update's public type is
// its own sessionUpdate value (agent_message_chunk, tool_call, ...).
const (
	TypePermissionRequest  = "permission_request"
	TypePermissionResponse = "permission_response"
	TypeInputRequest       = "input_request"
	TypeInputResponse      = "input_response"
)

// TypeSessionState is the public type of a state change
// (events.SessionStateChange). It is reserved: an agent's session update of
// this type is dropped, as one that names a permission event is.
const TypeSessionState = "session_state"

// The envelope keys of each public object, in the order they are written.
// A native key equal to one of them is dropped: the envelope wins.
var (
	durableUpdateKeys     = []string{"sessionId", "sequence", "eventNo", "timestamp", "durability", "type"}
	durableRequestKeys    = []string{"sessionId", "sequence", "eventNo", "timestamp", "durability", "type", "requestId"}
	durableResponseKeys   = []string{"sessionId", "sequence", "eventNo", "timestamp", "durability", "type", "requestId", "status", "reason"}
	ephemeralEnvelopeKeys = []string{"sessionId", "afterSequence", "durability", "type"}
)

// sessionUpdateTypeField is the ACP discriminator of a session update; it
// becomes the public "type".
const sessionUpdateTypeField = "sessionUpdate"

// Durable renders one durable history entry as the public JSON
// object:
//
//	{"sessionId", "sequence", "eventNo", "timestamp", "principal", "durability": "durable", "type", ...native fields}
//
// eventNo is omitted when it is zero (unknown: event numbers start at 1),
// principal when no one is named (a Skein addition: who sent a user
// message or answered a request; a native member of that name is then
// dropped).
// timestamp is passed through as given. The rest depends on the event:
//
//   - AcpDurableSessionUpdate: type is the update's sessionUpdate value,
//     which must be a non-empty string; every other member of the update
//     follows in its original order.
//   - AcpDurablePermissionRequest: type "permission_request", "requestId",
//     then the members of the request object (the ACP request params, such
//     as toolCall and options).
//   - SessionStateChange (a Skein addition, in a history page that asked
//     for state changes): type "session_state", then the change's members
//     (sessionstate.go); it has no eventNo.
//   - AcpDurablePermissionResponse: type "permission_response",
//     "requestId", "status", "reason" (only if set), then the members of the
//     response object (such as outcome).
//
// Envelope keys come first and win. A native member whose name is one of
// that object's envelope keys is dropped; for a permission request that
// includes the private ACP "sessionId" of the params. The envelope keys are
// sessionId, sequence, eventNo, timestamp, durability and type for every
// durable event, plus requestId for a permission request, plus requestId,
// status and reason for a permission response. (A session update keeps its
// own "status", as tool_call_update has one.) A key is compared after JSON
// unescaping. If the native object repeats a key, the first one wins.
//
// The native object must be a valid JSON object; anything else is an
// *Error with CodeInvalidPayload, as is an entry without an event.
func Durable(e *events.AcpDurableHistoryEntry) ([]byte, error) {
	if e == nil {
		return nil, events.Errorf(events.CodeInvalidPayload, "public json: nil history entry")
	}
	// Members of the union may be stored by value; look at pointers only.
	ev := e.Event.V
	switch v := ev.(type) {
	case events.AcpDurableSessionUpdate:
		ev = &v
	case events.AcpDurablePermissionRequest:
		ev = &v
	case events.AcpDurablePermissionResponse:
		ev = &v
	case events.InputRequest:
		ev = &v
	case events.InputResponse:
		ev = &v
	case events.SessionStateChange:
		ev = &v
	}
	if rv := reflect.ValueOf(ev); ev == nil || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, events.Errorf(events.CodeInvalidPayload, "public json: history entry %d has no event", e.Sequence)
	}

	if c, ok := ev.(*events.SessionStateChange); ok {
		return publicStateJSON(e, c), nil
	}
	var (
		native   events.JSON
		reserved []string
		typ      []byte // the raw JSON string of "type"
	)
	switch v := ev.(type) {
	case *events.AcpDurableSessionUpdate:
		native, reserved = v.Update, durableUpdateKeys
	case *events.AcpDurablePermissionRequest:
		native, reserved = v.Request, durableRequestKeys
		typ = []byte(`"` + TypePermissionRequest + `"`)
	case *events.AcpDurablePermissionResponse:
		native, reserved = v.Response, durableResponseKeys
		typ = []byte(`"` + TypePermissionResponse + `"`)
	case *events.InputRequest:
		native, reserved = v.Request, durableRequestKeys
		typ = []byte(`"` + TypeInputRequest + `"`)
	case *events.InputResponse:
		native, reserved = v.Response, durableResponseKeys
		typ = []byte(`"` + TypeInputResponse + `"`)
	default:
		return nil, events.Errorf(events.CodeInternal, "public json: unhandled durable event %s", ev.VariantName())
	}
	isUpdate := typ == nil
	if e.Principal != "" {
		reserved = append(slices.Clip(reserved), "principal")
	}

	b := make([]byte, 0, len(native)+len(e.SessionID)+len(e.Timestamp)+160)
	b = append(b, `{"sessionId":`...)
	b = appendJSONString(b, e.SessionID)
	b = append(b, `,"sequence":`...)
	b = strconv.AppendUint(b, e.Sequence, 10)
	if e.EventNo != 0 {
		b = append(b, `,"eventNo":`...)
		b = strconv.AppendUint(b, e.EventNo, 10)
	}
	b = append(b, `,"timestamp":`...)
	b = appendJSONString(b, e.Timestamp)
	if e.Principal != "" {
		b = append(b, `,"principal":`...)
		b = appendJSONString(b, e.Principal)
	}
	b = append(b, `,"durability":"`+DurabilityDurable+`","type":`...)
	typeAt := len(b) // an update's type is known once its members are read
	b = append(b, typ...)
	switch v := ev.(type) {
	case *events.AcpDurablePermissionRequest:
		b = append(b, `,"requestId":`...)
		b = appendJSONString(b, v.RequestID)
	case *events.AcpDurablePermissionResponse:
		b = appendResolution(b, v.RequestID, v.Status, v.Reason)
	case *events.InputRequest:
		b = append(b, `,"requestId":`...)
		b = appendJSONString(b, v.RequestID)
	case *events.InputResponse:
		b = appendResolution(b, v.RequestID, v.Status, v.Reason)
	}
	b, updateTyp, err := appendMembers(b, native, reserved, isUpdate)
	if err != nil {
		return nil, err
	}
	if isUpdate {
		if err := checkType(updateTyp); err != nil {
			return nil, err
		}
		b = slices.Insert(b, typeAt, updateTyp...)
	}
	return append(b, '}'), nil
}

// appendResolution appends the envelope members of a permission or input
// response: requestId, status, and reason when set.
func appendResolution(b []byte, requestID, status string, reason *string) []byte {
	b = append(b, `,"requestId":`...)
	b = appendJSONString(b, requestID)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, status)
	if reason != nil {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, *reason)
	}
	return b
}

// Ephemeral renders a live delta as the public JSON object:
//
//	{"sessionId", "afterSequence", "durability": "ephemeral", "type", ...update fields}
//
// type is the update's sessionUpdate value and the other members of the
// update follow, exactly as for a durable session update (see
// Durable). A member named sessionId, afterSequence, durability or
// type is dropped.
func Ephemeral(e *events.AcpEphemeralSessionUpdateEvent) ([]byte, error) {
	if e == nil {
		return nil, events.Errorf(events.CodeInvalidPayload, "public json: nil ephemeral event")
	}
	b := make([]byte, 0, len(e.Update)+len(e.SessionID)+96)
	b = append(b, `{"sessionId":`...)
	b = appendJSONString(b, e.SessionID)
	b = append(b, `,"afterSequence":`...)
	b = strconv.AppendUint(b, e.AfterSequence, 10)
	b = append(b, `,"durability":"`+DurabilityEphemeral+`","type":`...)
	typeAt := len(b)
	b, typ, err := appendMembers(b, e.Update, ephemeralEnvelopeKeys, true)
	if err != nil {
		return nil, err
	}
	if err := checkType(typ); err != nil {
		return nil, err
	}
	b = slices.Insert(b, typeAt, typ...)
	return append(b, '}'), nil
}

// Type returns the sessionUpdate value of an ACP session update:
// its public type. It scans the top level of the object without decoding
// it, so it is cheap enough to classify every update (a live delta or a
// durable one) before anything else is done with it. update must be a valid
// JSON object whose first sessionUpdate member is a non-empty string, else
// the error is an *Error with CodeInvalidPayload.
func Type(update events.JSON) (string, error) {
	raw, err := updateType(update)
	if err != nil {
		return "", err
	}
	// A JSON string value decodes as a key does.
	return acp.Key(raw).Name(), nil
}

// invalidObject reports native JSON that acp.Members refused.
func invalidObject(err error) error {
	return events.Errorf(events.CodeInvalidPayload, "public json: not a valid JSON object: %v", err)
}

// updateType returns the raw JSON string of the first sessionUpdate member
// of obj, which must be a valid JSON object.
func updateType(obj []byte) ([]byte, error) {
	var typ []byte
	err := acp.Members(obj, func(key acp.Key, value []byte) error {
		if typ == nil && key.Is(sessionUpdateTypeField) {
			typ = value
		}
		return nil
	})
	if err != nil {
		return nil, invalidObject(err)
	}
	return typ, checkType(typ)
}

// checkType checks the raw sessionUpdate value of an update (nil when it
// has none).
func checkType(typ []byte) error {
	switch {
	case typ == nil:
		return events.Errorf(events.CodeInvalidPayload, "public json: update has no sessionUpdate")
	case typ[0] != '"':
		return events.Errorf(events.CodeInvalidPayload, "public json: sessionUpdate is not a string")
	case len(typ) == 2:
		return events.Errorf(events.CodeInvalidPayload, "public json: sessionUpdate is empty")
	}
	return nil
}

// appendMembers appends ,key:value for every member of obj in order,
// except members named in reserved, the sessionUpdate member if
// consumeType, and repeats of an earlier key. Keys and values are copied
// verbatim. When consumeType, it returns the raw value of the first
// sessionUpdate member (nil if there is none): the object is read once.
func appendMembers(b, obj []byte, reserved []string, consumeType bool) (_, typ []byte, _ error) {
	var (
		seenArr [16][]byte
		seen    = seenArr[:0]
		seenMap map[string]struct{}
	)
	err := acp.Members(obj, func(key acp.Key, value []byte) error {
		name := key.NameBytes()
		if slices.Contains(reserved, string(name)) {
			return nil
		}
		if consumeType && string(name) == sessionUpdateTypeField {
			if typ == nil {
				typ = value
			}
			return nil
		}
		// First wins. A linear scan is cheapest for the usual dozen keys;
		// a map takes over for objects with many.
		if seenMap != nil {
			if _, dup := seenMap[string(name)]; dup {
				return nil
			}
			seenMap[string(name)] = struct{}{}
		} else {
			for _, s := range seen {
				if string(s) == string(name) {
					return nil
				}
			}
			if len(seen) < len(seenArr) {
				seen = append(seen, name)
			} else {
				seenMap = make(map[string]struct{}, 2*len(seen))
				for _, s := range seen {
					seenMap[string(s)] = struct{}{}
				}
				seenMap[string(name)] = struct{}{}
			}
		}
		b = append(b, ',')
		b = append(b, key...)
		b = append(b, ':')
		b = append(b, value...)
		return nil
	})
	if err != nil {
		return nil, nil, invalidObject(err)
	}
	return b, typ, nil
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it but without the HTML escapes: a quote, a backslash, control
// characters, U+2028 and U+2029 are escaped; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// publicStateJSON renders a state change's history entry:
//
//	{"sessionId","sequence","timestamp","durability":"durable","type":"session_state",
//	 "change","status","turnId"?,"stopReason"?,"error"?:{"code","message"},
//	 "discardDeltas"?:true,"waitingFor"?:{"kind","requestId"},
//	 "queue"?:{"id","position"?,"reason"?}}
func publicStateJSON(e *events.AcpDurableHistoryEntry, c *events.SessionStateChange) []byte {
	b := make([]byte, 0, 256)
	b = append(b, `{"sessionId":`...)
	b = appendJSONString(b, e.SessionID)
	b = append(b, `,"sequence":`...)
	b = strconv.AppendUint(b, e.Sequence, 10)
	b = append(b, `,"timestamp":`...)
	b = appendJSONString(b, e.Timestamp)
	b = append(b, `,"durability":"`+DurabilityDurable+`","type":"`+TypeSessionState+`","change":`...)
	b = appendJSONString(b, c.Change)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(c.Status))
	if c.TurnID != "" {
		b = append(b, `,"turnId":`...)
		b = appendJSONString(b, c.TurnID)
	}
	if c.StopReason != "" {
		b = append(b, `,"stopReason":`...)
		b = appendJSONString(b, c.StopReason)
	}
	if c.Error != nil {
		b = append(b, `,"error":{"code":`...)
		b = appendJSONString(b, c.Error.Code)
		b = append(b, `,"message":`...)
		b = appendJSONString(b, c.Error.Message)
		b = append(b, '}')
	}
	if c.DiscardDeltas {
		b = append(b, `,"discardDeltas":true`...)
	}
	if c.WaitingFor != nil {
		b = append(b, `,"waitingFor":{"kind":`...)
		b = appendJSONString(b, c.WaitingFor.Kind)
		b = append(b, `,"requestId":`...)
		b = appendJSONString(b, c.WaitingFor.RequestID)
		b = append(b, '}')
	}
	if q := c.Queue; q != nil {
		b = append(b, `,"queue":{"id":`...)
		b = appendJSONString(b, q.ID)
		if q.Position != 0 {
			b = append(b, `,"position":`...)
			b = strconv.AppendUint(b, uint64(q.Position), 10)
		}
		if q.Reason != "" {
			b = append(b, `,"reason":`...)
			b = appendJSONString(b, q.Reason)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}
