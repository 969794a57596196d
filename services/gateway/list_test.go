package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

type sessionList struct {
	Sessions []struct {
		SessionID string          `json:"sessionId"`
		State     json.RawMessage `json:"state"`
		UpdatedAt string          `json:"updatedAt"`
	} `json:"sessions"`
	NextCursor *string `json:"nextCursor"`
}

// GET /v1/sessions pages through the caller's sessions, the most recently
// updated first; nextCursor is absent on the last page; bad queries are
// typed 400s.
func TestListSessions(t *testing.T) {
	e := newEnv(t)
	for _, sid := range []string{"s1", "s2", "s3"} {
		if r := e.do(http.MethodPut, "/v1/sessions/"+sid, `{"agent":"demo"}`); r.status != http.StatusOK {
			t.Fatalf("PUT %s = %d %s", sid, r.status, r.body)
		}
	}
	list := func(query string) (sessionList, response) {
		t.Helper()
		r := e.do(http.MethodGet, "/v1/sessions"+query, "")
		var l sessionList
		if r.status == http.StatusOK {
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatalf("GET /v1/sessions%s: %s: %v", query, r.body, err)
			}
		}
		return l, r
	}
	testutil.Eventually(t, "the three sessions listed", func() bool {
		l, _ := list("")
		return len(l.Sessions) == 3
	})

	var got []string
	query := "?limit=2"
	for pages := 0; ; pages++ {
		l, r := list(query)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET /v1/sessions%s = %d %s", query, r.status, r.body)
		}
		for _, s := range l.Sessions {
			got = append(got, s.SessionID)
			if len(s.State) == 0 || s.UpdatedAt == "" {
				t.Errorf("row %s = %+v, want its state and updatedAt", s.SessionID, s)
			}
		}
		if l.NextCursor == nil {
			if pages != 1 {
				t.Errorf("%d pages of 2 for 3 sessions", pages+1)
			}
			var raw map[string]json.RawMessage
			_ = json.Unmarshal(r.body, &raw)
			if _, ok := raw["nextCursor"]; ok {
				t.Errorf("the last page has nextCursor: %s", r.body)
			}
			break
		}
		query = "?limit=2&cursor=" + url.QueryEscape(*l.NextCursor)
	}
	if want := []string{"s3", "s2", "s1"}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v (newest first)", got, want)
	}

	for query, code := range map[string]events.Code{
		"?limit=0":         events.CodeInvalidRequest,
		"?limit=10001":     events.CodeInvalidRequest,
		"?limit=x":         events.CodeInvalidRequest,
		"?limit=1&limit=2": events.CodeInvalidRequest,
		"?page=2":          events.CodeInvalidRequest,
		"?cursor=nonsense": events.CodeInvalidCursor,
		"?cursor=l1%21%21": events.CodeInvalidCursor,
	} {
		_, r := list(query)
		var body struct{ Error struct{ Code string } }
		_ = json.Unmarshal(r.body, &body)
		if r.status != http.StatusBadRequest || body.Error.Code != string(code) {
			t.Errorf("GET /v1/sessions%s = %d %s, want 400 %s", query, r.status, r.body, code)
		}
	}
}
