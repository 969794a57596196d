package adapterrunner

import (
	"encoding/json"

	"github.com/nats-io/nuid"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/acp/acpwire"
	"skein.dev/pkg/events"
)

// The agent's requests that wait for a person, session/request_permission
// and elicitation/create, cross the runner the same way: each is published
// under a correlation ID of the runner's own (a prefix and a NUID), never
// the agent's JSON-RPC id, which stays here; its params go without the
// private sessionId, every other byte as the agent sent them; and it is
// answered once, when the session service says how. The first answer
// forgets it, so a second is unknown_request.

// ask is one such request forwarded and not yet answered.
type ask struct {
	method string          // the ACP method the answer is for
	rpcID  json.RawMessage // the agent's JSON-RPC id of the request
}

// forward keeps the agent's request m under a new correlation ID that
// starts with prefix, and publishes the record record makes of that ID
// and of m's public params.
func (p *process) forward(m *acpwire.Message, prefix string, record func(requestID string, params events.JSON) events.Variant) {
	requestID := prefix + nuid.Next()
	p.wire.mu.Lock()
	if p.wire.asks == nil {
		p.wire.asks = map[string]ask{}
	}
	p.wire.asks[requestID] = ask{method: m.Method, rpcID: m.ID}
	p.wire.mu.Unlock()
	// The private session ID stays here: the request becomes a public event.
	p.publish(record(requestID, events.JSON(acp.WithoutMember(m.Params, "sessionId"))))
}

// answerAsk answers the agent's request requestID, which must be a pending
// one of method (what names it in errors), with result.
func (p *process) answerAsk(method, what, requestID string, result any) error {
	p.wire.mu.Lock()
	a, ok := p.wire.asks[requestID]
	if ok && a.method == method {
		delete(p.wire.asks, requestID)
	}
	p.wire.mu.Unlock()
	if !ok || a.method != method {
		return events.Errorf(events.CodeInvalidRequest, "%s: adapter process %s has no %s request %q pending", events.ReasonUnknownRequest, p.id, what, requestID)
	}
	if err := p.conn.Respond(a.rpcID, result); err != nil {
		return p.writeError(method+" answer", err)
	}
	return nil
}
