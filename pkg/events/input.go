package events

import (
	"encoding/json"
)

// Input requests: ACP's elicitation/create (a form from a flat object
// schema), a Skein addition: InputRequest and InputResponse join
// AcpDurableEvent, OpRespondInput answers, and the runner forwards them as
// permission requests are (AdapterInputRequest, RunnerInput).

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

// ClientCapabilitiesWithInput is what Skein advertises when a person answers
// inputs: the runner's default plus form elicitation (not URL elicitation:
// Skein cannot learn when a person is done with a page).
const ClientCapabilitiesWithInput = `{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false,"elicitation":{"form":{}}}`

// Input actions: the "action" of ACP's elicitation response.
const (
	InputAccept  = "accept"
	InputDecline = "decline"
	InputCancel  = "cancel"
)

// ReasonInputPolicy: an input request InputPolicyDecline declined at once.
// Other reasons and the statuses are a permission request's.
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
// (inputform.Schema.Check).
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
	// ResolvedBy names, for an answer that came too late (reason
	// already_resolved), the principal whose answer won.
	ResolvedBy *string `msgpack:"resolvedBy,omitempty"`
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

// AdapterInputRequest is an elicitation/create the adapter sent, as the
// runner forwards it on ACP_IO: RequestID is the runner's correlation ID
// ("input_" + a NUID), Request the params without the private sessionId,
// every other byte as the adapter sent it. The runner checked it with
// inputform.Parse; the session service answers with RunnerInputAnswer.
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
