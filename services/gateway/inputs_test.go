package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// elicitSchema is a requested schema as an agent may write it: its spaces
// and key order must reach the client as they are.
const elicitSchema = `{"type": "object", "properties": {"name": {"type": "string"}, "size": {"type": "integer"}}, "required": ["name"]}`

// TestRespondInput: an agent's elicitation/create is an input request the
// session's state and history show; POST .../inputs/{requestId} answers
// it once, checked against the agent's schema.
func TestRespondInput(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodPut, "/v1/sessions/s0", `{"agent":"demo","inputPolicy":"never"}`), http.StatusBadRequest, events.CodeInvalidRequest)
	wantStatus(t, e.do(http.MethodPut, "/v1/sessions/s1", `{"agent":"demo","inputPolicy":"ask"}`), `{}`)
	prompt := e.promptAsync("s1", `elicit "Your name?" `+elicitSchema+"\nsay after")
	var id string
	testutil.Eventually(t, "the input request", func() bool {
		select {
		case r := <-prompt:
			t.Fatalf("prompt = %d %s before the input request", r.status, r.body)
		default:
		}
		st := e.backend.State("s1")
		if st.Status != events.StatusWaiting || len(st.Inputs) != 1 {
			return false
		}
		id = st.Inputs[0].RequestID
		return true
	})
	path := "/v1/sessions/s1/inputs/" + id
	for _, body := range []string{
		`{"action":"accept","content":{"size":2}}`,              // name is required
		`{"action":"accept","content":{"name":"n","size":"2"}}`, // size is an integer
		`{"action":"accept","content":[]}`,
		`{"action":"decline","content":{"name":"n"}}`,
		`{"action":"accept","content":{"name":"n"},"extra":1}`,
		`{"content":{"name":"n"}}`,
		`{"action":"yes"}`,
		"{\"action\":\"accept\",\"content\":{\"name\":\"\xff\"}}",
		``,
	} {
		wantError(t, e.do(http.MethodPost, path, body), http.StatusBadRequest, events.CodeInvalidRequest)
	}
	if st := e.backend.State("s1"); len(st.Inputs) != 1 {
		t.Fatalf("after refused answers, state %+v, want the request still pending", st)
	}
	wantStatus(t, e.do(http.MethodPost, path, `{"action":"accept","content":{"name":"skein","size":2}}`), `{"status":"accepted"}`)
	if req, _ := e.backend.LastRequest(events.OpRespondInput).(*events.RespondInputRequest); req == nil || req.SessionID != "s1" || req.RequestID != id || req.Action != "accept" {
		t.Errorf("the session service got %+v", req)
	}
	if r := <-prompt; r.status != http.StatusOK || !strings.Contains(string(r.body), "after") {
		t.Errorf("prompt = %d %s", r.status, r.body)
	}
	wantStatus(t, e.do(http.MethodPost, path, `{"action":"cancel"}`), `{"status":"not_pending","reason":"already_resolved"}`)
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/inputs/input_nobody", `{"action":"cancel"}`), `{"status":"not_pending","reason":"unknown_request"}`)

	// Both ends are durable events in their public form, the agent's
	// members byte for byte.
	r := e.do(http.MethodGet, "/v1/sessions/s1/history", "")
	var page struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatalf("history %s: %v", r.body, err)
	}
	var kinds []string
	for _, raw := range page.Events {
		var ev struct {
			Type      string `json:"type"`
			RequestID string `json:"requestId"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("event %s: %v", raw, err)
		}
		switch ev.Type {
		case eventjson.TypeInputRequest:
			if ev.RequestID != id || !strings.HasSuffix(string(raw), `"requestId":"`+id+`","mode":"form","message":"Your name?","requestedSchema":`+elicitSchema+`}`) {
				t.Errorf("input_request = %s", raw)
			}
		case eventjson.TypeInputResponse:
			if !strings.HasSuffix(string(raw), `"requestId":"`+id+`","status":"accepted","action":"accept","content":{"name":"skein","size":2}}`) {
				t.Errorf("input_response = %s", raw)
			}
		}
		kinds = append(kinds, ev.Type)
	}
	if got := strings.Join(kinds, " "); got != "user_message_chunk input_request input_response agent_message_chunk" {
		t.Errorf("history = %s", got)
	}
}
