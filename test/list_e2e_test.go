package test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/natstest"
)

type listedSession struct {
	SessionID      string `json:"sessionId"`
	UpdatedAt      string `json:"updatedAt"`
	LatestSequence uint64 `json:"latestSequence"`
	State          struct {
		Status   string `json:"status"`
		Requests []struct {
			RequestID string `json:"requestId"`
		} `json:"requests"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	} `json:"state"`
}

// listSessions returns every session GET /v1/sessions lists, paging two at
// a time.
func listSessions(t *testing.T, base string) []listedSession {
	t.Helper()
	var all []listedSession
	cursor := ""
	for {
		u := base + "/v1/sessions?limit=2"
		if cursor != "" {
			u += "&cursor=" + cursor
		}
		code, body := do(t, http.MethodGet, u, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", u, code, body)
		}
		var page struct {
			Sessions   []listedSession `json:"sessions"`
			NextCursor string          `json:"nextCursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Sessions...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

// The list tells what needs the user, as the real session service
// projects it: a turn waiting for a permission answer, a failed turn; an
// answered session moves to the top. Listing starts no adapter.
func TestListSessionsEndToEnd(t *testing.T) {
	ns := natstest.Run(t)
	st := startStack(t, ns, t.TempDir())
	open := func(sid, body string) {
		if code, b := do(t, http.MethodPut, st.url+"/v1/sessions/"+sid, body); code != http.StatusOK {
			t.Fatalf("PUT %s = %d %s", sid, code, b)
		}
	}
	open("calm", `{"agent":"test"}`)
	open("asks", `{"agent":"test","permissionPolicy":"ask"}`)
	open("fails", `{"agent":"test"}`)
	if code, b := do(t, http.MethodPost, st.url+"/v1/sessions/calm/prompt", promptBody("say hi")); code != http.StatusOK {
		t.Fatalf("prompt calm = %d %s", code, b)
	}
	asked := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, st.url+"/v1/sessions/asks/prompt",
			strings.NewReader(promptBody("permission call_1 allow_once=yes,reject_once=no\nsay done")))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			asked <- 0
			return
		}
		resp.Body.Close()
		asked <- resp.StatusCode
	}()
	if code, _ := do(t, http.MethodPost, st.url+"/v1/sessions/fails/prompt", promptBody("error -32603 the model is down")); code == http.StatusOK {
		t.Fatalf("prompt fails = %d, want an error", code)
	}

	byID := func(list []listedSession) map[string]listedSession {
		m := map[string]listedSession{}
		for _, s := range list {
			m[s.SessionID] = s
		}
		return m
	}
	var list []listedSession
	if err := pollFor(t.Context(), "calm idle, asks waiting, fails failed", func() bool {
		list = listSessions(t, st.url)
		m := byID(list)
		return len(list) == 3 && m["calm"].State.Status == "idle" && m["asks"].State.Status == "waiting" && m["fails"].State.Status == "failed"
	}); err != nil {
		t.Fatalf("%v: listed %+v", err, list)
	}
	m := byID(list)
	if n := len(m["asks"].State.Requests); n != 1 {
		t.Errorf("asks lists %d permission requests, want 1", n)
	}
	if e := m["fails"].State.Error; e == nil || e.Code == "" {
		t.Errorf("fails lists no error: %+v", m["fails"].State)
	}
	newestFirst(t, list)

	reqID := m["asks"].State.Requests[0].RequestID
	if code, b := do(t, http.MethodPost, st.url+"/v1/sessions/asks/permissions/"+reqID, `{"optionId":"yes"}`); code != http.StatusOK {
		t.Fatalf("answer = %d %s", code, b)
	}
	if code := <-asked; code != http.StatusOK {
		t.Fatalf("prompt asks = %d", code)
	}
	if err := pollFor(t.Context(), "asks idle at the top", func() bool {
		list = listSessions(t, st.url)
		return len(list) == 3 && list[0].SessionID == "asks" && list[0].State.Status == "idle"
	}); err != nil {
		t.Fatalf("%v: listed %+v", err, list)
	}
	newestFirst(t, list)
	// A row's latestSequence is getSession's: the newest public event's,
	// not the newest record's (a turn ends with a lifecycle record).
	for _, s := range list {
		code, body := do(t, http.MethodGet, st.url+"/v1/sessions/"+s.SessionID, "")
		var got listedSession
		if code != http.StatusOK || json.Unmarshal(body, &got) != nil {
			t.Fatalf("GET %s = %d %s", s.SessionID, code, body)
		}
		if s.LatestSequence == 0 || s.LatestSequence != got.LatestSequence {
			t.Errorf("%s lists latestSequence %d, getSession says %d", s.SessionID, s.LatestSequence, got.LatestSequence)
		}
	}
}

func newestFirst(t *testing.T, list []listedSession) {
	t.Helper()
	for i := 1; i < len(list); i++ {
		a, errA := time.Parse(time.RFC3339Nano, list[i-1].UpdatedAt)
		b, errB := time.Parse(time.RFC3339Nano, list[i].UpdatedAt)
		if errA != nil || errB != nil || a.Before(b) {
			t.Errorf("%s (updated %s) listed before %s (updated %s)", list[i-1].SessionID, list[i-1].UpdatedAt, list[i].SessionID, list[i].UpdatedAt)
		}
	}
}
