package adapterrunner

import (
	"context"
	"encoding/json"

	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/inputform"
)

// methodElicitationCreate is ACP's request for structured input from a
// person (elicitation/create).
const methodElicitationCreate = "elicitation/create"

// onInputRequest forwards an elicitation/create as an AdapterInputRequest,
// as a permission request is (asks.go), under an ID "input_" + a NUID.
// A request Skein cannot forward (a URL elicitation, which it never
// advertises; one tied to a JSON-RPC request rather than the session; a
// schema answers cannot be checked against) is refused here with -32602,
// as ACP says a client refuses a mode it did not advertise.
//
// The request is forwarded whatever the session's input policy: the
// session service declines it at once under InputPolicyDecline, and so
// records that it came.
func (p *process) onInputRequest(m *acpwire.Message) {
	if err := checkInputRequest(m.Params); err != nil {
		p.notACP(err)
		p.refuse(m, &acpwire.RPCError{Code: acpwire.CodeInvalidParams, Message: "Invalid params: " + events.AsError(err).Message})
		return
	}
	p.forward(m, "input_", func(requestID string, params events.JSON) events.Variant {
		return &events.AdapterInputRequest{RequestID: requestID, Request: params}
	})
}

// checkInputRequest checks the params of an elicitation/create: a form
// elicitation scoped to the session (sessionId a string), with a schema
// the session service can check answers against.
func checkInputRequest(params json.RawMessage) error {
	var scope struct {
		SessionID json.RawMessage `json:"sessionId"`
	}
	if err := json.Unmarshal(params, &scope); err != nil || len(scope.SessionID) == 0 || scope.SessionID[0] != '"' {
		return events.Errorf(events.CodeAdapterProtocol, "elicitation/create: only session-scoped elicitation is supported (sessionId a string)")
	}
	_, err := inputform.Parse(params)
	return err
}

// answerInput answers the adapter's input request requestID with response,
// the elicitation response as the session service composed it (asks.go).
func (p *process) answerInput(requestID string, response events.JSON) error {
	return p.answerAsk(methodElicitationCreate, "input", requestID, oneLine(response))
}

func (r *Runner) handleInput(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	p, err := r.lookup(ctx)
	if err != nil {
		return nil, err
	}
	answer, err := events.Decode[events.RunnerInputAnswer](data)
	if err != nil {
		return nil, err
	}
	if err := p.answerInput(answer.RequestID, answer.Response); err != nil {
		return nil, err
	}
	return &events.RunnerAck{ProcessID: p.id}, nil
}
