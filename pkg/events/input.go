package events

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"skein.dev/pkg/acp"
)

// Input requests: ACP's elicitation/create, which an agent sends to ask a
// person for structured input (a form described by a flat object schema).
// They are Skein additions beyond the seed schema's unions: the durable
// events InputRequest and InputResponse join AcpDurableEvent, the answer
// is an operation of its own (OpRespondInput), and the runner forwards the
// request as an ACP_IO record (AdapterInputRequest) and writes the answer
// (RunnerInput), as for permission requests.

// Input policies (AcpOpenSessionRequest.inputPolicy): who answers a
// session's input requests.
const (
	// InputPolicyAsk: a person answers (the default). The runner
	// advertises form elicitation to the agent.
	InputPolicyAsk = "ask"
	// InputPolicyDecline: nobody will answer (unattended work). The
	// elicitation capability is not advertised, and a request that comes
	// anyway is declined at once and recorded.
	InputPolicyDecline = "decline"
)

// ClientCapabilitiesWithInput is what Skein advertises to an agent whose
// inputs a person answers: the runner's default (no file system, no
// terminal) plus form elicitation. URL elicitation is not offered: Skein
// has no way to send a person to a page and learn when they are done.
const ClientCapabilitiesWithInput = `{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false,"elicitation":{"form":{}}}`

// Input actions: the "action" of ACP's elicitation response.
const (
	InputAccept  = "accept"
	InputDecline = "decline"
	InputCancel  = "cancel"
)

// ReasonInputPolicy is the reason of an input request the session's input
// policy declined at once (InputPolicyDecline). Every other terminal reason
// is a permission request's (ReasonPromptCancelled, ReasonAdapterExited,
// ...), and the statuses are the permission statuses too
// (PermissionAccepted, PermissionNotPending, PermissionTerminal).
const ReasonInputPolicy = "input_policy"

// InputRequest is the durable input_request event: an agent's
// elicitation/create. RequestID is the runner's correlation ID ("input_" +
// a NUID), never the agent's JSON-RPC id. Request is the ACP params
// without the private sessionId member, every other byte (message,
// requestedSchema, _meta) as the agent sent it.
type InputRequest struct {
	RequestID string `msgpack:"requestId"`
	Request   JSON   `msgpack:"request"`
}

// InputResponse is the durable input_response event: how input request
// RequestID ended. Response is the elicitation response exactly as the
// agent got it ({"action": ..., "content": ...}); Status is
// PermissionAccepted for a person's answer, PermissionTerminal with Reason
// for one that ended unanswered ({"action":"cancel"}) or that the input
// policy declined (ReasonInputPolicy, {"action":"decline"}).
type InputResponse struct {
	RequestID string  `msgpack:"requestId"`
	Response  JSON    `msgpack:"response"`
	Status    string  `msgpack:"status"`
	Reason    *string `msgpack:"reason,omitempty"`
}

func (InputRequest) isAcpDurableEvent()  {}
func (InputResponse) isAcpDurableEvent() {}

// RespondInputRequest asks OpRespondInput to answer input request
// RequestID of session SessionID: Action one of InputAccept, InputDecline,
// InputCancel, and Content, a JSON object, with accept only. Whether the
// content fits the agent's schema is the session service's to check
// (InputSchema.Check).
type RespondInputRequest struct {
	SessionID string `msgpack:"sessionId"`
	RequestID string `msgpack:"requestId"`
	Action    string `msgpack:"action"`
	Content   JSON   `msgpack:"content,omitempty"`
}

// RespondInputResponse answers OpRespondInput: PermissionAccepted (the
// answer won and reached the agent) or PermissionNotPending with the
// reason naming what won instead.
type RespondInputResponse struct {
	Status string  `msgpack:"status"`
	Reason *string `msgpack:"reason,omitempty"`
}

// Validate checks a respondInput request: its session (always named), a
// request ID, a known action, and content, one JSON object, given with
// accept only (accept without content is an empty form).
func (r *RespondInputRequest) Validate() (SessionID, error) {
	if r.SessionID == "" {
		return "", Errorf(CodeInvalidSessionID, "respondInput needs a session ID")
	}
	sid, err := ParseSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if !printableToken(r.RequestID, MaxRequestIDBytes) {
		return "", Errorf(CodeInvalidRequest, "requestId must be 1 to %d bytes of printable ASCII without spaces", MaxRequestIDBytes)
	}
	switch r.Action {
	case InputAccept:
		if len(r.Content) > 0 && (!isJSONObject(r.Content) || !json.Valid(r.Content)) {
			return "", Errorf(CodeInvalidRequest, "content must be a JSON object")
		}
	case InputDecline, InputCancel:
		if len(r.Content) > 0 {
			return "", Errorf(CodeInvalidRequest, "content is given with action %q only", InputAccept)
		}
	default:
		return "", Errorf(CodeInvalidRequest, "action must be %s, %s or %s", InputAccept, InputDecline, InputCancel)
	}
	return sid, nil
}

// InputResponseJSON is the elicitation response sent to the agent for
// action, with content (compact JSON) for accept: {"action":"accept",
// "content":{...}}, {"action":"decline"} or {"action":"cancel"}.
func InputResponseJSON(action string, content JSON) JSON {
	a, _ := json.Marshal(action) // a string always marshals
	b := append([]byte(`{"action":`), a...)
	if action == InputAccept && len(content) > 0 {
		var c bytes.Buffer
		if json.Compact(&c, content) == nil {
			b = append(b, `,"content":`...)
			b = append(b, c.Bytes()...)
		}
	}
	return append(b, '}')
}

// AdapterInputRequest is an elicitation/create the adapter sent, as the
// runner forwards it on ACP_IO: RequestID is the runner's correlation ID
// ("input_" + a NUID), Request the params without the private sessionId,
// every other byte as the adapter sent it. The runner checked it with
// ParseInputRequest; the session service answers with RunnerInputAnswer.
type AdapterInputRequest struct {
	RequestID string `msgpack:"requestId"`
	Request   JSON   `msgpack:"request"`
}

// RecordAdapterInputRequest is AdapterInputRequest's variant name.
const RecordAdapterInputRequest = "AdapterInputRequest"

// RunnerInputAnswer asks RunnerInput to answer the adapter's input request
// RequestID with Response, the elicitation response, sent as it is.
// RunnerAck once written; unknown_request (CodeInvalidRequest) when the
// runner has no such request pending for this process.
type RunnerInputAnswer struct {
	RequestID string `msgpack:"requestId"`
	Response  JSON   `msgpack:"response"`
}

// PendingInput is one input request waiting for a person, in the session
// state (SessionState.Inputs).
type PendingInput struct {
	RequestID string `json:"requestId"`
	// Request is the ACP params as stored in the durable input_request
	// event (no private session ID).
	Request JSON `json:"request"`
}

// InputSchema is the requested schema of a form elicitation, read for
// checking answers: ACP allows a flat object of primitive properties.
type InputSchema struct {
	Properties map[string]InputProperty
	Required   []string
}

// InputProperty is one property of an InputSchema: its JSON type
// ("string", "number", "integer", "boolean", "array" of strings, or a
// custom one, "" when the agent named none it could), and the values an
// enum allows (nil: any).
type InputProperty struct {
	Type string
	Enum []string
}

// ParseInputRequest reads the params of an elicitation/create (with or
// without sessionId): mode "form" with a message and a requestedSchema
// whose properties are objects with a type. Anything else (a URL
// elicitation, which Skein does not advertise, or a schema it cannot
// check answers against) is CodeAdapterProtocol.
func ParseInputRequest(params []byte) (*InputSchema, error) {
	var p struct {
		Mode            *string         `json:"mode"`
		Message         *string         `json:"message"`
		RequestedSchema json.RawMessage `json:"requestedSchema"`
	}
	if !isJSONObject(params) || json.Unmarshal(params, &p) != nil {
		return nil, Errorf(CodeAdapterProtocol, "elicitation/create: params are not an object")
	}
	if p.Mode == nil || *p.Mode != "form" {
		return nil, Errorf(CodeAdapterProtocol, "elicitation/create: only mode \"form\" is advertised")
	}
	if p.Message == nil {
		return nil, Errorf(CodeAdapterProtocol, "elicitation/create: message is required")
	}
	var s struct {
		Type       *string                    `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if len(p.RequestedSchema) == 0 || !isJSONObject(p.RequestedSchema) || json.Unmarshal(p.RequestedSchema, &s) != nil {
		return nil, Errorf(CodeAdapterProtocol, "elicitation/create: requestedSchema is not an object schema")
	}
	if s.Type != nil && *s.Type != "object" {
		return nil, Errorf(CodeAdapterProtocol, "elicitation/create: requestedSchema type is %q, not \"object\"", *s.Type)
	}
	out := &InputSchema{Properties: make(map[string]InputProperty, len(s.Properties)), Required: s.Required}
	for name, raw := range s.Properties {
		var prop struct {
			Type  string                   `json:"type"`
			Enum  []string                 `json:"enum"`
			OneOf []struct{ Const string } `json:"oneOf"`
			Items *struct {
				Enum  []string                 `json:"enum"`
				AnyOf []struct{ Const string } `json:"anyOf"`
			} `json:"items"`
		}
		if !isJSONObject(raw) || json.Unmarshal(raw, &prop) != nil {
			return nil, Errorf(CodeAdapterProtocol, "elicitation/create: property %q is not a property schema", Truncate(name, 64))
		}
		p := InputProperty{Type: prop.Type, Enum: prop.Enum}
		for _, o := range prop.OneOf {
			p.Enum = append(p.Enum, o.Const)
		}
		if prop.Items != nil {
			p.Enum = prop.Items.Enum
			for _, o := range prop.Items.AnyOf {
				p.Enum = append(p.Enum, o.Const)
			}
		}
		out.Properties[name] = p
	}
	for _, r := range s.Required {
		if _, ok := out.Properties[r]; !ok {
			return nil, Errorf(CodeAdapterProtocol, "elicitation/create: required property %q is not in the schema", Truncate(r, 64))
		}
	}
	return out, nil
}

// Check checks the content of an accept against the schema: an object
// (nil is an empty one) whose members are properties of the schema, each
// of its type (an enum's value one of the enum's), with every required
// property present. A custom property type takes any value elicitation
// content may hold (a string, a number, a boolean, an array of strings).
// Anything else is CodeInvalidRequest.
func (s *InputSchema) Check(content JSON) error {
	present := map[string]bool{}
	if len(content) > 0 {
		if !isJSONObject(content) || !json.Valid(content) {
			return Errorf(CodeInvalidRequest, "content must be a JSON object")
		}
		err := acp.Members(content, func(key acp.Key, value []byte) error {
			name := key.Name()
			if present[name] {
				return Errorf(CodeInvalidRequest, "content: %q is given twice", Truncate(name, 64))
			}
			present[name] = true
			prop, ok := s.Properties[name]
			if !ok {
				return Errorf(CodeInvalidRequest, "content: %q is not a field of the requested schema", Truncate(name, 64))
			}
			return prop.check(name, value)
		})
		if err != nil {
			if _, ok := err.(*Error); ok {
				return err
			}
			return Errorf(CodeInvalidRequest, "content: %v", err)
		}
	}
	for _, r := range s.Required {
		if !present[r] {
			return Errorf(CodeInvalidRequest, "content: required field %q is missing", Truncate(r, 64))
		}
	}
	return nil
}

// check checks one content value, raw JSON, against p.
func (p InputProperty) check(name string, value []byte) error {
	bad := func(want string) error {
		return Errorf(CodeInvalidRequest, "content: %q must be %s", Truncate(name, 64), want)
	}
	switch p.Type {
	case "string":
		var v string
		if value[0] != '"' || json.Unmarshal(value, &v) != nil {
			return bad("a string")
		}
		if p.Enum != nil && !slices.Contains(p.Enum, v) {
			return bad("one of the enum's values")
		}
	case "number":
		if !isNumber(value) {
			return bad("a number")
		}
	case "integer":
		if !isInteger(value) {
			return bad("an integer")
		}
	case "boolean":
		if string(value) != "true" && string(value) != "false" {
			return bad("a boolean")
		}
	case "array":
		var vs []string
		if value[0] != '[' || json.Unmarshal(value, &vs) != nil {
			return bad("an array of strings")
		}
		for _, v := range vs {
			if p.Enum != nil && !slices.Contains(p.Enum, v) {
				return bad("an array of the enum's values")
			}
		}
	default:
		var vs []string
		if value[0] != '"' && !isNumber(value) && string(value) != "true" && string(value) != "false" &&
			(value[0] != '[' || json.Unmarshal(value, &vs) != nil) {
			return bad("a string, a number, a boolean or an array of strings")
		}
	}
	return nil
}

// isNumber reports whether value is a JSON number.
func isNumber(value []byte) bool {
	if len(value) == 0 || value[0] != '-' && (value[0] < '0' || value[0] > '9') {
		return false
	}
	var n json.Number
	return json.Unmarshal(value, &n) == nil
}

// isInteger reports whether value is a JSON number with an integral value
// that fits an int64 (ACP's content integers are int64): 3 and 3.0 are,
// 3.5 and 1e30 are not.
func isInteger(value []byte) bool {
	if !isNumber(value) {
		return false
	}
	if _, err := strconv.ParseInt(string(value), 10, 64); err == nil {
		return true
	}
	f, err := strconv.ParseFloat(string(value), 64)
	return err == nil && f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64
}

func (InputRequest) VariantName() string         { return "InputRequest" }
func (InputResponse) VariantName() string        { return "InputResponse" }
func (RespondInputRequest) VariantName() string  { return "RespondInputRequest" }
func (RespondInputResponse) VariantName() string { return "RespondInputResponse" }
func (AdapterInputRequest) VariantName() string  { return RecordAdapterInputRequest }
func (RunnerInputAnswer) VariantName() string    { return "RunnerInputAnswer" }

func init() {
	register(func() Variant { return new(InputRequest) })
	register(func() Variant { return new(InputResponse) })
	register(func() Variant { return new(RespondInputRequest) })
	register(func() Variant { return new(RespondInputResponse) })
	register(func() Variant { return new(AdapterInputRequest) })
	register(func() Variant { return new(RunnerInputAnswer) })
}
