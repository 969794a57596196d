package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// sessionBudget is a session's budget as GET /v1/sessions/{id} shows it.
type sessionBudget struct {
	MaxCost *struct {
		Amount   float64 `json:"amount"`
		Currency string  `json:"currency"`
	} `json:"maxCost"`
	Spent struct {
		Amount   float64 `json:"amount"`
		Currency string  `json:"currency"`
	} `json:"spent"`
}

// budgetOf reads sid's budget over HTTP; nil when the session shows none.
func budgetOf(t *testing.T, e *env, sid string) *sessionBudget {
	t.Helper()
	r := e.do(http.MethodGet, "/v1/sessions/"+sid, "")
	var s struct {
		Budget *sessionBudget `json:"budget"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &s) != nil {
		t.Fatalf("GET /v1/sessions/%s = %d %s", sid, r.status, r.body)
	}
	return s.Budget
}

// wantSpent checks sid's budget over HTTP: a cap of maxCost USD (0: none)
// and spent USD.
func wantSpent(t *testing.T, e *env, sid string, maxCost, spent float64) {
	t.Helper()
	b := budgetOf(t, e, sid)
	if b == nil || (b.MaxCost == nil) != (maxCost == 0) || b.MaxCost != nil && (b.MaxCost.Amount != maxCost || b.MaxCost.Currency != "USD") ||
		b.Spent.Amount != spent || b.Spent.Currency != "USD" {
		t.Fatalf("budget of %s = %+v, want cap %v USD, spent %v USD", sid, b, maxCost, spent)
	}
}

// A capped session over HTTP, on the real services and the test agent: the
// open's budget is shown by GET with what was spent; the turn whose cost
// crosses the cap answers 402 budget_exhausted (the agent was cancelled);
// a prompt after it is refused 402 with nothing recorded; PATCH raises the
// cap and the session runs again.
func TestBudgetOverHTTP(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodPut, "/v1/sessions/b1", `{"agent":"demo","budget":{"maxCost":{"amount":1,"currency":"USD"}}}`)
	if r.status != http.StatusOK {
		t.Fatalf("open = %d %s", r.status, r.body)
	}
	wantSpent(t, e, "b1", 1, 0)

	prompt := func(script string) response {
		body, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": script}}})
		return e.do(http.MethodPost, "/v1/sessions/b1/prompt", string(body))
	}
	if r := prompt("cost 1 2 0.6 USD\nsay under"); r.status != http.StatusOK {
		t.Fatalf("a prompt under the cap = %d %s", r.status, r.body)
	}
	wantSpent(t, e, "b1", 1, 0.6)

	wantError(t, prompt("cost 1 2 1.1 USD\npause http-budget\nsay never"), http.StatusPaymentRequired, events.CodeBudgetExhausted)
	wantSpent(t, e, "b1", 1, 1.1)
	last := e.backend.Last("b1")
	body := wantError(t, prompt("say refused"), http.StatusPaymentRequired, events.CodeBudgetExhausted)
	if !strings.Contains(body.Error.Message, "1.1 USD") {
		t.Errorf("the refusal says %q, want the spend", body.Error.Message)
	}
	if got := e.backend.Last("b1"); got != last {
		t.Fatalf("the refused prompt moved the log from %d to %d", last, got)
	}
	r = e.do(http.MethodGet, "/v1/sessions/b1/history?include=state", "")
	if !strings.Contains(string(r.body), `"budget_exhausted"`) {
		t.Errorf("history = %s, want the turn's end budget_exhausted", r.body)
	}

	r = e.do(http.MethodPatch, "/v1/sessions/b1", `{"budget":{"maxCost":{"amount":5,"currency":"USD"}}}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"maxCost":{"amount":5,"currency":"USD"}`) {
		t.Fatalf("PATCH = %d %s, want the session with its new cap", r.status, r.body)
	}
	if r := prompt("cost 1 2 2 USD\nsay again"); r.status != http.StatusOK {
		t.Fatalf("a prompt after the raise = %d %s", r.status, r.body)
	}
	wantSpent(t, e, "b1", 5, 2)

	// A null budget removes the cap; the title changes with it.
	r = e.do(http.MethodPatch, "/v1/sessions/b1", `{"title":"uncapped","budget":null}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"title":"uncapped"`) || strings.Contains(string(r.body), "maxCost\":{") {
		t.Fatalf("PATCH removing the cap = %d %s", r.status, r.body)
	}
	wantSpent(t, e, "b1", 0, 2)
}

// Bad budgets are 400 invalid_request, at open and with PATCH, and
// change nothing; a PATCH of a missing session is 404.
func TestBudgetRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	for name, budget := range map[string]string{
		"lowercase currency": `{"maxCost":{"amount":1,"currency":"usd"}}`,
		"unknown currency":   `{"maxCost":{"amount":1,"currency":"DOLLARS"}}`,
		"negative":           `{"maxCost":{"amount":-0.5,"currency":"USD"}}`,
		"NaN":                `{"maxCost":{"amount":"NaN","currency":"USD"}}`,
		"too large":          `{"maxCost":{"amount":1e999,"currency":"USD"}}`,
		"no amount":          `{"maxCost":{"currency":"USD"}}`,
		"no currency":        `{"maxCost":{"amount":1}}`,
		"no cap":             `{}`,
		"unknown member":     `{"maxCost":{"amount":1,"currency":"USD"},"daily":true}`,
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, e.do(http.MethodPut, "/v1/sessions/bad", `{"agent":"demo","budget":`+budget+`}`), http.StatusBadRequest, events.CodeInvalidRequest)
			if name == "no cap" {
				return // a PATCH's {} removes the cap
			}
			wantError(t, e.do(http.MethodPatch, "/v1/sessions/bad", `{"budget":`+budget+`}`), http.StatusBadRequest, events.CodeInvalidRequest)
		})
	}
	wantError(t, e.do(http.MethodGet, "/v1/sessions/bad", ""), http.StatusNotFound, events.CodeSessionNotFound)
	wantError(t, e.do(http.MethodPatch, "/v1/sessions/missing", `{"budget":{"maxCost":{"amount":1,"currency":"USD"}}}`), http.StatusNotFound, events.CodeSessionNotFound)

	e.backend.Open("ok", "demo")
	if b := budgetOf(t, e, "ok"); b != nil {
		t.Fatalf("an uncapped session shows budget %+v", b)
	}
	last := e.backend.Last("ok")
	wantError(t, e.do(http.MethodPatch, "/v1/sessions/ok", `{"title":"fine","budget":{"maxCost":{"amount":-1,"currency":"USD"}}}`), http.StatusBadRequest, events.CodeInvalidRequest)
	if got := e.backend.Last("ok"); got != last {
		t.Fatalf("a refused PATCH moved the log from %d to %d", last, got)
	}
	if r := e.do(http.MethodGet, "/v1/sessions/ok", ""); strings.Contains(string(r.body), `"title"`) {
		t.Errorf("a refused PATCH renamed the session: %s", r.body)
	}
}
