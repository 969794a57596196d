package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// sessionOffers is the part of a session's JSON this feature adds.
type sessionOffers struct {
	Usage *struct {
		Used uint64          `json:"used"`
		Size uint64          `json:"size"`
		Cost json.RawMessage `json:"cost"`
	} `json:"usage"`
	LastTurnTiming *struct {
		DispatchMs   *uint64 `json:"dispatchMs"`
		FirstReplyMs *uint64 `json:"firstReplyMs"`
		FinishedMs   *uint64 `json:"finishedMs"`
	} `json:"lastTurnTiming"`
}

// The agent's commands are served at /commands, and its usage and the last
// turn's timing are in the session and its list row, through the real
// services; none of it starts or restores the adapter.
func TestCommandsUsageAndTiming(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody/commands", ""), http.StatusNotFound, events.CodeSessionNotFound)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/a.b/commands", ""), http.StatusBadRequest, events.CodeInvalidSessionID)

	e.backend.Open("s1", "demo")
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/commands", ""), `{"commands":[]}`)
	var fresh sessionOffers
	if r := e.do(http.MethodGet, "/v1/sessions/s1", ""); r.status != http.StatusOK || json.Unmarshal(r.body, &fresh) != nil || fresh.Usage != nil || fresh.LastTurnTiming != nil {
		t.Fatalf("GET a new session = %d %s, want neither usage nor lastTurnTiming", r.status, r.body)
	}

	e.backend.Turn("s1", "commands review=Review the code | test\ncost 1200 200000 0.42 USD\nsay hi")
	const commands = `{"commands":[{"name":"review","description":"Review the code","input":null},{"name":"test","description":"test","input":null}]}`
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/commands", ""), commands)
	req, _ := e.backend.LastRequest(events.OpGetSessionCommands).(*events.GetSessionCommandsRequest)
	if req == nil || deref(req.SessionID) != "s1" {
		t.Errorf("the history service got %+v, want session s1", req)
	}

	checkOffers := func(what string, body []byte) {
		t.Helper()
		var s sessionOffers
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("%s: %v in %s", what, err, body)
		}
		if u := s.Usage; u == nil || u.Used != 1200 || u.Size != 200000 || string(u.Cost) != `{"amount":0.42,"currency":"USD"}` {
			t.Errorf("%s usage: %s, want 1200/200000 at 0.42 USD", what, body)
		}
		if tm := s.LastTurnTiming; tm == nil || tm.DispatchMs == nil || tm.FirstReplyMs == nil || tm.FinishedMs == nil {
			t.Errorf("%s lastTurnTiming: %s, want dispatch, first reply and finish", what, body)
		}
	}
	r := e.do(http.MethodGet, "/v1/sessions/s1", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET session = %d %s", r.status, r.body)
	}
	checkOffers("GET /v1/sessions/s1", r.body)
	// The list is served from the history service's index, which follows
	// the projection a moment later.
	var row json.RawMessage
	testutil.Eventually(t, "the list row shows the last turn's timing", func() bool {
		var list struct {
			Sessions []json.RawMessage `json:"sessions"`
		}
		r := e.do(http.MethodGet, "/v1/sessions", "")
		if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || len(list.Sessions) != 1 {
			return false
		}
		var s sessionOffers
		row = list.Sessions[0]
		return json.Unmarshal(row, &s) == nil && s.LastTurnTiming != nil
	})
	checkOffers("the list row", row)

	// Unloaded, the session still answers, and stays unloaded.
	wantStatus(t, e.do(http.MethodPost, "/v1/sessions/s1/unload", ""), `{}`)
	last := e.backend.Last("s1")
	wantStatus(t, e.do(http.MethodGet, "/v1/sessions/s1/commands", ""), commands)
	checkOffers("GET the unloaded session", e.do(http.MethodGet, "/v1/sessions/s1", "").body)
	if !e.backend.Unloaded("s1") || e.backend.Last("s1") != last || e.backend.Meta("s1").Hosted {
		t.Errorf("reading the commands and usage of an unloaded session restored it")
	}

	e.backend.StopHistory()
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/commands", ""), http.StatusServiceUnavailable, events.CodeUnavailable)
}

// TestOffersServiceAnswers: answers only a faulty or stand-in service
// gives: commands that are not an array, and timings of 0, which are
// measurements and must show.
func TestOffersServiceAnswers(t *testing.T) {
	zero, seven := uint64(0), uint64(7)
	info := events.AcpDurableSessionInfo{
		SessionID: "s1", Agent: "demo", Cwd: "/w", AdditionalDirectories: events.JSON(`[]`), State: events.JSON(`{"status":"idle"}`),
		CreatedAt: "2026-01-01T00:00:00Z", UpdatedAt: "2026-01-01T00:00:00Z",
		Usage:          &events.SessionUsage{Used: 0, Size: 10},
		LastTurnTiming: &events.TurnTiming{DispatchMs: &zero, FinishedMs: &seven},
	}
	checkAnswers(t, newEnv(t, withoutBackend), []serviceAnswer{
		{events.OpGetSessionCommands, http.MethodGet, "/commands", "", &events.SessionCommandsResponse{}, 200, `{"commands":[]}`},
		{events.OpGetSessionCommands, http.MethodGet, "/commands", "", &events.SessionCommandsResponse{Commands: events.JSON(` [ {"name":"x","description":"y"} ] `)}, 200, `{"commands":[{"name":"x","description":"y"}]}`},
		{events.OpGetSessionCommands, http.MethodGet, "/commands", "", &events.SessionCommandsResponse{Commands: events.JSON(`{"name":"x"}`)}, 500, string(events.CodeInternal)},
		{events.OpGetSessionCommands, http.MethodGet, "/commands", "", &events.SessionCommandsResponse{Commands: events.JSON(`[{"name":`)}, 500, string(events.CodeInternal)},
		{events.OpGetSession, http.MethodGet, "", "", &events.AcpGetDurableSessionResponse{Session: info}, 200,
			`{"sessionId":"s1","agent":"demo","cwd":"/w","additionalDirectories":[],"state":{"status":"idle"},"latestSequence":0,` +
				`"createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z","usage":{"used":0,"size":10},"lastTurnTiming":{"dispatchMs":0,"finishedMs":7}}`},
	})
}
