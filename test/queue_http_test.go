package test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
)

// The prompt queue over HTTP (issue 32 §1): 202 with the entry's place
// while a turn runs, the queue listed with who queued each prompt, a
// withdrawal, and the typed errors: 409 session_busy without queue, 409
// prompt_dequeued once an entry left, 404 not_queued, 400 for an ID that
// is not one, 404 session_not_found for a missing session.
func TestQueueHTTP(t *testing.T) {
	ns := natstest.Run(t)
	st := startConsoleStack(t, ns, testutil.TempDir(t), "")
	base := st.url + "/v1/sessions/"
	do := func(method, path, body string) (int, string) {
		code, b := doAs(t, method, base+path, consoleToken, body)
		return code, string(b)
	}
	if code, body := do(http.MethodPut, "hq", `{"agent":"test","permissionPolicy":"ask"}`); code != http.StatusOK {
		t.Fatalf("open: %d %s", code, body)
	}
	first := make(chan string, 1)
	go func() {
		_, body := do(http.MethodPost, "hq/prompt", `{"content":[{"type":"text","text":"permission call_1 allow_once=allow\nsay first"}]}`)
		first <- body
	}()
	if err := testutil.Poll(t.Context(), "the first turn waiting", func() (bool, error) {
		_, body := do(http.MethodGet, "hq", "")
		return strings.Contains(body, `"status":"waiting"`), nil
	}); err != nil {
		t.Fatal(err)
	}

	code, body := do(http.MethodPost, "hq/prompt", `{"content":[{"type":"text","text":"say second"}],"queue":true,"idempotencyKey":"k2"}`)
	var q struct {
		Queued struct {
			ID       string `json:"id"`
			Position int    `json:"position"`
		} `json:"queued"`
	}
	if code != http.StatusAccepted || json.Unmarshal([]byte(body), &q) != nil || q.Queued.Position != 1 || !strings.HasPrefix(q.Queued.ID, "q_") {
		t.Fatalf("a queued prompt = %d %s, want 202 {queued: {id, position 1}}", code, body)
	}
	if code, again := do(http.MethodPost, "hq/prompt", `{"content":[{"type":"text","text":"say second"}],"queue":true,"idempotencyKey":"k2"}`); code != http.StatusAccepted || again != body {
		t.Errorf("the keyed queued prompt again = %d %s, want 202 %s", code, again, body)
	}
	code, body3 := do(http.MethodPost, "hq/prompt", `{"content":[{"type":"text","text":"say third"}],"queue":true}`)
	var q3 struct {
		Queued struct{ ID string } `json:"queued"`
	}
	if code != http.StatusAccepted || json.Unmarshal([]byte(body3), &q3) != nil {
		t.Fatalf("a second queued prompt = %d %s", code, body3)
	}
	if code, body := do(http.MethodPost, "hq/prompt", `{"content":[{"type":"text","text":"say now"}]}`); code != http.StatusConflict || !strings.Contains(body, "session_busy") {
		t.Errorf("a prompt without queue while busy = %d %s, want 409 session_busy", code, body)
	}
	code, list := do(http.MethodGet, "hq/queue", "")
	var got struct {
		Queued []struct {
			ID        string `json:"id"`
			Position  int    `json:"position"`
			Principal string `json:"principal"`
			QueuedAt  string `json:"queuedAt"`
		} `json:"queued"`
		Held bool `json:"held"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(list), &got) != nil || len(got.Queued) != 2 ||
		got.Queued[0].ID != q.Queued.ID || got.Queued[1].Position != 2 || got.Queued[0].Principal != "dev" || got.Queued[0].QueuedAt == "" {
		t.Fatalf("GET queue = %d %s, want both entries in order, queued by dev", code, list)
	}
	if _, info := do(http.MethodGet, "hq", ""); !strings.Contains(info, `"queued":[`) {
		t.Errorf("GET of the session does not list the queue: %s", info)
	}
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"hq/queue/q_0000000000000000000000", http.StatusNotFound, "not_queued"},
		{"hq/queue/nope", http.StatusBadRequest, "invalid_request"},
		{"missing/queue/" + q3.Queued.ID, http.StatusNotFound, "session_not_found"},
		{"hq/queue/" + q3.Queued.ID, http.StatusOK, "{}"},
		{"hq/queue/" + q3.Queued.ID, http.StatusConflict, "prompt_dequeued"},
	} {
		if code, body := do(http.MethodDelete, c.path, ""); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("DELETE %s = %d %s, want %d %s", c.path, code, body, c.code, c.want)
		}
	}

	// The first turn goes on; the queued one runs after it.
	var perm struct {
		State struct {
			Requests []struct {
				RequestID string `json:"requestId"`
			} `json:"requests"`
		} `json:"state"`
	}
	_, info := do(http.MethodGet, "hq", "")
	if json.Unmarshal([]byte(info), &perm) != nil || len(perm.State.Requests) != 1 {
		t.Fatalf("the pending request: %s", info)
	}
	if code, body := do(http.MethodPost, "hq/permissions/"+perm.State.Requests[0].RequestID, `{"optionId":"allow"}`); code != http.StatusOK {
		t.Fatalf("answer: %d %s", code, body)
	}
	if body := <-first; !strings.Contains(body, "end_turn") {
		t.Errorf("the first prompt = %s", body)
	}
	// The queued prompt starts once the turn before it ended (the session
	// service starts it after the end its caller saw): its key then waits
	// for, or answers, its own turn.
	if err := testutil.Poll(t.Context(), "the queued prompt started", func() (bool, error) {
		_, body := do(http.MethodGet, "hq/queue", "")
		return body == `{"queued":[],"held":false}`, nil
	}); err != nil {
		t.Fatal(err)
	}
	if code, body := do(http.MethodPost, "hq/prompt", `{"content":[{"type":"text","text":"say second"}],"queue":true,"idempotencyKey":"k2"}`); code != http.StatusOK || !strings.Contains(body, "second") {
		t.Errorf("the keyed queued prompt after it started = %d %s, want 200 with its turn's reply", code, body)
	}
	if code, body := do(http.MethodDelete, "hq/queue/"+q.Queued.ID, ""); code != http.StatusConflict || !strings.Contains(body, "started") {
		t.Errorf("DELETE of the entry that ran = %d %s, want 409 prompt_dequeued, started", code, body)
	}
	if code, body := do(http.MethodGet, "hq/queue", ""); code != http.StatusOK || body != `{"queued":[],"held":false}` {
		t.Errorf("GET queue at the end = %d %s", code, body)
	}
}
