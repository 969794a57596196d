package adapterrunner

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nuid"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/inputform"
)

// methodElicitationCreate is ACP's request for structured input from a
// person (elicitation/create).
const methodElicitationCreate = "elicitation/create"

// onInputRequest forwards an elicitation/create as an AdapterInputRequest,
// like a permission request: under a correlation ID of the runner's own
// ("input_" + a NUID), the agent's JSON-RPC id kept here, and the params
// without the private sessionId, every other byte as the agent sent them.
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
	requestID := "input_" + nuid.Next()
	p.wire.mu.Lock()
	if p.wire.inputs == nil {
		p.wire.inputs = map[string]json.RawMessage{}
	}
	p.wire.inputs[requestID] = m.ID
	p.wire.mu.Unlock()
	p.publish(&events.AdapterInputRequest{RequestID: requestID, Request: events.JSON(acp.WithoutMember(m.Params, "sessionId"))})
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
// the elicitation response as the session service composed it. A request
// is answered once: the first answer forgets it.
func (p *process) answerInput(requestID string, response events.JSON) error {
	p.wire.mu.Lock()
	rpcID, ok := p.wire.inputs[requestID]
	delete(p.wire.inputs, requestID)
	p.wire.mu.Unlock()
	if !ok {
		return events.Errorf(events.CodeInvalidRequest, "%s: adapter process %s has no input request %q pending", events.ReasonUnknownRequest, p.id, requestID)
	}
	if err := p.conn.Respond(rpcID, oneLine(response)); err != nil {
		return p.writeError(methodElicitationCreate+" answer", err)
	}
	return nil
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
