package acpwire

import (
	"encoding/json"

	"skein.dev/pkg/acp"
)

// SessionUpdate is the routing view of the params of a session/update
// notification. It decodes only what a client routes on; the update itself
// stays raw, so unknown variants, unknown fields, unknown content types and
// _meta survive byte for byte.
type SessionUpdate struct {
	SessionID string
	// Kind is update.sessionUpdate: one of the acp.Update constants or a
	// value Skein does not know (keep it; do not fail).
	Kind string
	// MessageID is update.messageId, or nil when it is absent or null (it is
	// optional in v1; codex-acp and claude-code-acp never send it).
	MessageID *string
	// Update is the raw "update" object, a sub-slice of the params.
	Update json.RawMessage
}

// ParseSessionUpdate decodes the params of a session/update notification
// (Message.Params) with acp.ParseUpdateParams, in one pass over them. It
// returns an ErrProtocol *Error when params are not a JSON object,
// sessionId is not a string, update is not an object,
// update.sessionUpdate is not a string, update.messageId is neither a
// string nor null, or one of these members repeats. Unknown members
// anywhere are ignored.
func ParseSessionUpdate(params json.RawMessage) (*SessionUpdate, error) {
	sid, u, err := acp.ParseUpdateParams(params)
	return sessionUpdate(params, sid, u, err)
}

// SessionUpdate is ParseSessionUpdate(m.Params) for a message that Parse
// returned (every Message a Conn hands its callbacks is one): Parse has
// validated the params already, so they are read without validating them
// again (acp.ParseValidUpdateParams), which on a runner's stream of
// session/update lines is a full pass over every line saved. The result
// is ParseSessionUpdate's. A Message built by hand, whose params Parse
// has not checked, must go through ParseSessionUpdate.
func (m *Message) SessionUpdate() (*SessionUpdate, error) {
	if m.Raw == nil {
		return ParseSessionUpdate(m.Params) // synthesized: nothing was validated
	}
	sid, u, err := acp.ParseValidUpdateParams(m.Params)
	return sessionUpdate(m.Params, sid, u, err)
}

// sessionUpdate turns acp's reading of a session/update's params into a
// SessionUpdate or a protocol error.
func sessionUpdate(params []byte, sid string, u acp.Update, err error) (*SessionUpdate, error) {
	if err != nil {
		if shape(params, '{', err) == errNotJSON {
			return nil, protocolError("%s params are not JSON", MethodSessionUpdate)
		}
		return nil, protocolError("%s: %v", MethodSessionUpdate, err)
	}
	return &SessionUpdate{SessionID: sid, Kind: u.Kind, MessageID: u.MessageID, Update: u.Raw}, nil
}

// PermissionRequest is the decoded params of a session/request_permission
// request. The client must answer it (Conn.Respond with
// acp.PermissionSelected or acp.PermissionCancelled), also after
// session/cancel, where the answer is acp.PermissionCancelled.
type PermissionRequest struct {
	SessionID string
	// ToolCall is the raw tool call (a ToolCallUpdate). codex-acp asks about
	// tool calls it has not announced yet: create the entry from it if
	// unknown.
	ToolCall json.RawMessage
	Options  []acp.PermissionOption // each read by acp.ParsePermissionOption
	Raw      json.RawMessage        // the params exactly as sent
}

// ParsePermissionRequest decodes the params of a session/request_permission
// request (Message.Params). It returns an ErrProtocol *Error unless params
// are a JSON object whose sessionId is a string, toolCall an object, and
// options an array of objects each with a string optionId and a string
// kind, none of these members repeated. name may be absent (it is only
// shown to people) but must be a string when present.
func ParsePermissionRequest(params json.RawMessage) (*PermissionRequest, error) {
	var sid, toolCall, options []byte
	if err := getFields(params, field{Name: "sessionId", Value: &sid}, field{Name: "toolCall", Value: &toolCall}, field{Name: "options", Value: &options}); err != nil {
		return nil, paramsError(MethodRequestPermission, err)
	}
	req := &PermissionRequest{ToolCall: toolCall, Raw: params}
	var ok bool
	if req.SessionID, ok = acp.StringValue(sid); !ok {
		return nil, protocolError("session/request_permission: sessionId is %s, want a string", describe(sid))
	}
	if valueType(toolCall) != "object" {
		return nil, protocolError("session/request_permission: toolCall is %s, want an object", describe(toolCall))
	}
	if valueType(options) != "array" {
		return nil, protocolError("session/request_permission: options is %s, want an array", describe(options))
	}
	err := eachElement(options, func(v []byte) error {
		if valueType(v) != "object" {
			return protocolError("session/request_permission: an option is %s, want an object", describe(v))
		}
		o, err := acp.ParsePermissionOption(v)
		if err != nil {
			return protocolError("session/request_permission: %v", err)
		}
		req.Options = append(req.Options, o)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return req, nil
}

// paramsError reports params that getFields refused.
func paramsError(method string, err error) error {
	if err == errNotJSON {
		return protocolError("%s params are not JSON", method)
	}
	return protocolError("%s params: %v", method, err)
}
