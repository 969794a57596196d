package gateway

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// handleRename serves PATCH /v1/sessions/{id}: {"title": "…"} renames the
// session, and the answer is the session as GET /v1/sessions/{id} shows it.
// The title rules are events.NormalizeTitle's (trimmed, 1 to 120
// characters, valid UTF-8, no control characters); any other title is
// invalid_request and changes nothing. A rename never starts an adapter,
// and from then on the agent's own titles no longer replace it.
func (g *Gateway) handleRename(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpRenameSession, g.controlBodyLimit(),
		func(body []byte, sid events.SessionID) (events.Variant, error) { return decodeRename(body, sid) },
		func(resp *events.RenameSessionResponse) error { return writeSession(w, &resp.Session) })
}

// renameBody is the JSON form of RenameSessionRequest without its session
// ID, which comes from the URL.
type renameBody struct {
	Title  *string         `json:"title"`
	Budget json.RawMessage `json:"budget"`
}

// decodeRename decodes and checks the body of PATCH /v1/sessions/{id} for
// the session sid. The body must be valid UTF-8 as a whole: encoding/json
// would read invalid bytes in the title as U+FFFD and so accept a title
// the rules refuse.
func decodeRename(body []byte, sid events.SessionID) (*events.RenameSessionRequest, error) {
	if !utf8.Valid(body) {
		return nil, events.Errorf(events.CodeInvalidRequest, "request body must be valid UTF-8")
	}
	var b renameBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.Title == nil && b.Budget == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "title or budget is required")
	}
	req := &events.RenameSessionRequest{SessionID: new(string(sid))}
	if b.Title != nil {
		if *b.Title == "" {
			return nil, events.Errorf(events.CodeInvalidRequest, "title must not be empty")
		}
		req.Title = *b.Title
	}
	if b.Budget != nil {
		// Merge-patch: a null budget removes the cap, as a null maxCost does.
		var body *budgetBody
		if err := decodeObjectOrNull(b.Budget, &body); err != nil {
			return nil, err
		}
		if body == nil {
			body = &budgetBody{}
		}
		budget, err := body.budget()
		if err != nil {
			return nil, err
		}
		req.Budget = budget
	}
	if _, _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// decodeObjectOrNull decodes raw, a member's value, into v as decodeObject
// does a body; null leaves v as it is.
func decodeObjectOrNull(raw json.RawMessage, v any) error {
	if !present(raw) {
		return nil
	}
	if err := decodeObject(raw, v); err != nil {
		return events.Errorf(events.CodeInvalidRequest, "budget must be an object or null: %s", events.AsError(err).Message)
	}
	return nil
}
