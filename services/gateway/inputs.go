package gateway

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// handleRespondInput serves POST /v1/sessions/{id}/inputs/{requestId}:
// answer a pending input request (an agent's elicitation/create) with
// ACP's elicitation response, {"action": "accept" | "decline" | "cancel",
// "content": {...}}, content with accept only. As for permissions, a
// request no longer pending is a 200 with status not_pending and the
// reason; content that does not fit the agent's schema is invalid_request
// (the session service checks it) and consumes nothing.
func (g *Gateway) handleRespondInput(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpRespondInput, g.controlBodyLimit(),
		func(body []byte, sid events.SessionID) (events.Variant, error) {
			return decodeRespondInput(body, sid, r.PathValue("requestId"))
		},
		func(resp *events.RespondInputResponse) error {
			return writeStatus(w, resp.Status, resp.Reason, resp.ResolvedBy)
		})
}

// respondInputBody is the JSON form of RespondInputRequest without the
// session and request IDs, which come from the URL.
type respondInputBody struct {
	Action  *string         `json:"action"`
	Content json.RawMessage `json:"content"`
}

// decodeRespondInput decodes and checks the body of POST
// .../inputs/{requestId} for the request requestID of the session sid.
// The body must be valid UTF-8 as a whole: the content is passed on byte
// for byte, and encoding/json would let invalid bytes in a string
// through. A null content is no content.
func decodeRespondInput(body []byte, sid events.SessionID, requestID string) (*events.RespondInputRequest, error) {
	if !utf8.Valid(body) {
		return nil, events.Errorf(events.CodeInvalidRequest, "request body must be valid UTF-8")
	}
	var b respondInputBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.Action == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "action is required")
	}
	req := &events.RespondInputRequest{SessionID: string(sid), RequestID: requestID, Action: *b.Action}
	if present(b.Content) {
		req.Content = events.JSON(b.Content)
	}
	if _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}
