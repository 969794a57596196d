package gateway_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"skein.dev/pkg/events"
)

type watchResult struct {
	Events []struct {
		Sequence uint64 `json:"sequence"`
		Type     string `json:"type"`
	} `json:"events"`
	HasMoreAfter bool `json:"hasMoreAfter"`
	State        struct {
		Status string `json:"status"`
	} `json:"state"`
	Cursor *uint64 `json:"cursor"`
}

func (e *env) watch(t *testing.T, sid, query string) watchResult {
	t.Helper()
	r := e.do(http.MethodGet, "/v1/sessions/"+sid+"/watch"+query, "")
	if r.status != http.StatusOK {
		t.Fatalf("GET watch%s = %d %s", query, r.status, r.body)
	}
	var w watchResult
	if err := json.Unmarshal(r.body, &w); err != nil || w.Cursor == nil || w.State.Status == "" {
		t.Fatalf("GET watch%s = %s (%v), want events, state and cursor", query, r.body, err)
	}
	return w
}

// A watch answers at once when the log holds records after its cursor;
// else it waits for the next ones, and answers with them when one wakes
// it (a watch that times out answers none and the same cursor, so one
// that moved its cursor woke); at its timeout it answers none and the
// same cursor. The cursor covers what the state reflects: a watch after
// the turn's last event, which is before the turn's end, answers at once.
func TestWatch(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")

	w := e.watch(t, "s1", "?timeout=100ms")
	if len(w.Events) != 0 || *w.Cursor == 0 || w.State.Status != "idle" {
		t.Fatalf("watch of an idle session = %+v, want no events, the open's cursor, idle", w)
	}
	opened := *w.Cursor
	w = e.watch(t, "s1", "?timeout=100ms&after="+strconv.FormatUint(opened, 10))
	if len(w.Events) != 0 || *w.Cursor != opened || w.State.Status != "idle" {
		t.Fatalf("a watch that times out = %+v, want no events and cursor %d", w, opened)
	}

	type answer struct {
		w     watchResult
		after uint64
	}
	woke := make(chan answer, 64)
	go func() {
		// Until the turn is over, every poll is woken by a record: one
		// stores each record of the turn, its end the last.
		// (A record of the open's may come after the first watches.)
		busy := false
		for after := opened; ; {
			w := e.watch(t, "s1", "?timeout=30&after="+strconv.FormatUint(after, 10))
			woke <- answer{w, after}
			busy = busy || w.State.Status != "idle" || len(w.Events) > 0
			if busy && w.State.Status == "idle" || *w.Cursor == after {
				close(woke)
				return
			}
			after = *w.Cursor
		}
	}()
	if r := e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"say one\nmessage\nsay two"}]}`); r.status != http.StatusOK {
		t.Fatalf("prompt = %d %s", r.status, r.body)
	}
	var seen []uint64
	for a := range woke {
		if *a.w.Cursor <= a.after {
			t.Fatalf("a watch after %d = %+v, want it woken, its cursor moved", a.after, a.w)
		}
		for _, ev := range a.w.Events {
			if ev.Sequence > *a.w.Cursor {
				t.Errorf("a watch answered event %d past its cursor %d", ev.Sequence, *a.w.Cursor)
			}
			seen = append(seen, ev.Sequence)
		}
	}

	// Events after the cursor: at once, a page at a time.
	all := e.watch(t, "s1", "?after=0&limit=10000")
	if all.HasMoreAfter || len(all.Events) < 3 {
		t.Fatalf("everything = %+v", all)
	}
	var want []uint64
	for _, ev := range all.Events {
		want = append(want, ev.Sequence)
	}
	if !slices.Equal(seen, want) {
		t.Errorf("the woken watches answered %v, want the turn's events %v", seen, want)
	}
	first := e.watch(t, "s1", "?after=0&limit=2")
	if len(first.Events) != 2 || !first.HasMoreAfter || *first.Cursor != all.Events[1].Sequence {
		t.Errorf("a page of 2 = %+v, want 2 events, more after, cursor %d", first, all.Events[1].Sequence)
	}

	// After the turn's last event, its end (a lifecycle record) is still
	// to be answered: at once, with the state it made, and a cursor past
	// it. (A cursor of events alone left such a watch waiting its whole
	// timeout for a turn that had ended.)
	lastEv := all.Events[len(all.Events)-1].Sequence
	w = e.watch(t, "s1", "?timeout=30&after="+strconv.FormatUint(lastEv, 10))
	if len(w.Events) != 0 || *w.Cursor <= lastEv || w.State.Status != "idle" {
		t.Errorf("a watch after the turn's last event = %+v, want no events, idle, a cursor past %d", w, lastEv)
	}
	end := *all.Cursor
	w = e.watch(t, "s1", "?timeout=100ms&after="+strconv.FormatUint(end, 10))
	if len(w.Events) != 0 || *w.Cursor != end || w.State.Status != "idle" {
		t.Errorf("a watch that times out = %+v, want no events and cursor %d", w, end)
	}
}

func TestWatchErrors(t *testing.T) {
	e := newEnv(t, withMaxEvents(3))
	wantError(t, e.do(http.MethodGet, "/v1/sessions/nobody/watch?timeout=1", ""), http.StatusNotFound, events.CodeSessionNotFound)
	e.backend.Open("s1", "demo")
	for _, q := range []string{"?timeout=0", "?timeout=31", "?timeout=31s", "?timeout=-1s", "?timeout=x", "?limit=0", "?limit=10001",
		"?after=1&after=2", "?since=1"} {
		wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/watch"+q, ""), http.StatusBadRequest, events.CodeInvalidRequest)
	}
	for _, q := range []string{"?after=-1", "?after=x"} {
		wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/watch"+q, ""), http.StatusBadRequest, events.CodeInvalidCursor)
	}
	// The oldest events pruned: a cursor before them has expired.
	if r := e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"say a\nmessage\nsay b\nmessage\nsay c"}]}`); r.status != http.StatusOK {
		t.Fatalf("prompt = %d %s", r.status, r.body)
	}
	r := e.do(http.MethodGet, "/v1/sessions/s1/watch?after=1&timeout=1", "")
	if r.status == http.StatusOK {
		t.Fatalf("watch after a pruned event = 200 %s, want cursor_expired", r.body)
	}
	var body apiError
	if err := json.Unmarshal(r.body, &body); err != nil || body.Error.Code != string(events.CodeCursorExpired) {
		t.Errorf("watch after a pruned event = %d %s, want cursor_expired", r.status, r.body)
	}
}

// A watch's cursor past the newest event waits and answers none, the
// largest sequence too: after+1 once wrapped to 0, and the watch answered
// the whole history at once. One past the largest is invalid_cursor.
func TestSecurityWatchCursorPastTheEnd(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	if r := e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"say one\nmessage\nsay two"}]}`); r.status != http.StatusOK {
		t.Fatalf("prompt = %d %s", r.status, r.body)
	}
	for _, after := range []string{"18446744073709551614", "18446744073709551615"} {
		w := e.watch(t, "s1", "?timeout=100ms&after="+after)
		if len(w.Events) != 0 || w.HasMoreAfter || strconv.FormatUint(*w.Cursor, 10) != after {
			t.Errorf("watch after=%s = %+v, want no events and the same cursor", after, w)
		}
	}
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/watch?timeout=1&after=18446744073709551616", ""), http.StatusBadRequest, events.CodeInvalidCursor)
}
