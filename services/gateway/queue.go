package gateway

import (
	"encoding/json"
	"net/http"

	"skein.dev/pkg/events"
)

// handleQueue serves GET /v1/sessions/{id}/queue: the prompts waiting in the
// session's queue, in order, {"queued": [{id, position, content, principal,
// queuedAt}], "held"}. held: they wait for the next prompt sent without
// queue (a cancelled or failed turn under session.queue-on-failure=hold,
// or an unload).
func (g *Gateway) handleQueue(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpGetSession, 0,
		func(_ []byte, sid events.SessionID) (events.Variant, error) {
			return &events.AcpGetDurableSessionRequest{SessionID: new(string(sid))}, nil
		},
		func(resp *events.AcpGetDurableSessionResponse) error {
			b, err := json.Marshal(struct {
				Queued []queuedJSON `json:"queued"`
				Held   bool         `json:"held"`
			}{queueJSON(resp.Session.Queue), resp.Session.QueueHeld})
			if err != nil {
				return events.Errorf(events.CodeInternal, "render queue: %v", err)
			}
			writeJSON(w, http.StatusOK, b)
			return nil
		})
}

// handleWithdraw serves DELETE /v1/sessions/{id}/queue/{queueId}: take the
// prompt out of the queue before it runs. One that already started, or was
// withdrawn, is prompt_dequeued (409); one the session never had,
// not_queued (404).
func (g *Gateway) handleWithdraw(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpWithdrawPrompt, g.controlBodyLimit(),
		func(body []byte, sid events.SessionID) (events.Variant, error) {
			if err := decodeEmpty(body); err != nil {
				return nil, err
			}
			req := &events.WithdrawPromptRequest{SessionID: new(string(sid)), QueueID: r.PathValue("queueId")}
			if _, err := req.Validate(); err != nil {
				return nil, err
			}
			return req, nil
		},
		func(*events.PromptWithdrawn) error { writeJSON(w, http.StatusOK, []byte(`{}`)); return nil })
}
