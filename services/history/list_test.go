package history_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/history"
)

// base is the updatedAt of the oldest session the list tests project.
var base = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// project writes sid's ACP_SESSIONS projection, as the session service
// does, updated at base+age.
func (h *harness) project(t testing.TB, ns events.Namespace, sid string, age time.Duration) {
	t.Helper()
	kv, err := h.js.KeyValue(t.Context(), events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	m := events.SessionMeta{Namespace: string(ns), Info: events.AcpDurableSessionInfo{
		SessionID: sid, Agent: "test", Cwd: "/w", AdditionalDirectories: events.JSON("[]"),
		State:     events.JSON(`{"status":"idle"}`),
		CreatedAt: base.Format(events.TimestampFormat), UpdatedAt: base.Add(age).Format(events.TimestampFormat),
	}}
	data, err := events.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), events.SessionKey(ns, events.SessionID(sid)), data); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) list(t testing.TB, ns events.Namespace, cursor *string, limit uint32) (*events.AcpListDurableSessionsResponse, error) {
	t.Helper()
	req := &events.AcpListDurableSessionsRequest{Cursor: cursor}
	if limit != 0 {
		req.Limit = &limit
	}
	return rpc.Call[events.AcpListDurableSessionsResponse](t.Context(), h.nc, events.APISubject(ns, events.OpListSessions), req, nil)
}

// listAll pages through ns, limit sessions a page, calling between(page)
// after each page; it returns every session ID in the order listed.
func (h *harness) listAll(t *testing.T, ns events.Namespace, limit uint32, between func(page int)) []string {
	t.Helper()
	var ids []string
	var cursor *string
	for page := 0; ; page++ {
		resp, err := h.list(t, ns, cursor, limit)
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if len(resp.Sessions) > int(limit) {
			t.Fatalf("page %d has %d sessions, limit %d", page, len(resp.Sessions), limit)
		}
		for _, s := range resp.Sessions {
			ids = append(ids, s.SessionID)
		}
		if resp.NextCursor == nil {
			return ids
		}
		cursor = resp.NextCursor
		if between != nil {
			between(page)
		}
	}
}

// waitListed waits until the index holds want as the first sessions of ns.
func (h *harness) waitListed(t *testing.T, ns events.Namespace, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		resp, err := h.list(t, ns, nil, uint32(max(len(want), 1)))
		var got []string
		if err == nil {
			for _, s := range resp.Sessions {
				got = append(got, s.SessionID)
			}
			if slices.Equal(got, want) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("list = %v, %v; want it to begin %v", got, err, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Sessions are listed newest first, ties by session ID, one namespace at a
// time, every one exactly once over the pages; the last page has no
// cursor.
func TestListSessionsOrder(t *testing.T) {
	h := start(t, 0)
	for i, sid := range []string{"a", "b", "c", "d", "e"} {
		h.project(t, "default", sid, time.Duration(i)*time.Second)
	}
	h.project(t, "default", "e2", 4*time.Second) // ties with e
	h.project(t, "other", "x", time.Hour)
	// The projection is asynchronous: both namespaces are waited for,
	// not only the first.
	h.waitListed(t, "default", "e", "e2", "d", "c", "b", "a")
	h.waitListed(t, "other", "x")

	for _, limit := range []uint32{1, 2, 4, 6, 100} {
		if got, want := h.listAll(t, "default", limit, nil), []string{"e", "e2", "d", "c", "b", "a"}; !slices.Equal(got, want) {
			t.Errorf("limit %d: listed %v, want %v", limit, got, want)
		}
	}
	if got := h.listAll(t, "other", 10, nil); !slices.Equal(got, []string{"x"}) {
		t.Errorf("namespace other lists %v, want [x]", got)
	}
	if got := h.listAll(t, "empty", 10, nil); len(got) != 0 {
		t.Errorf("a namespace without sessions lists %v", got)
	}
	// A row carries the projection: state and times.
	resp, err := h.list(t, "default", nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Sessions[0]; string(s.State) != `{"status":"idle"}` || s.UpdatedAt != base.Add(4*time.Second).Format(events.TimestampFormat) {
		t.Errorf("row = %+v", s)
	}
}

// Sessions updated or deleted while a client pages move or vanish, but no
// page repeats a session and paging never fails.
func TestListSessionsUnderUpdates(t *testing.T) {
	h := start(t, 0)
	age := map[string]time.Duration{}
	project := func(sid string, a time.Duration) {
		age[sid] = a
		h.project(t, "default", sid, a)
	}
	for i := range 30 {
		project(fmt.Sprintf("s%02d", i), time.Duration(i)*time.Second)
	}
	h.waitListed(t, "default", "s29")
	kv, err := h.js.KeyValue(t.Context(), events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	got := h.listAll(t, "default", 4, func(page int) {
		// One seen and one not yet seen move to the front; one not yet
		// seen is deleted.
		project(fmt.Sprintf("s%02d", 29-page), time.Hour+time.Duration(2*page)*time.Second)
		project(fmt.Sprintf("s%02d", page), time.Hour+time.Duration(2*page+1)*time.Second)
		gone := fmt.Sprintf("s%02d", 10+page)
		if err := kv.Delete(t.Context(), events.SessionKey("default", events.SessionID(gone))); err != nil {
			t.Fatal(err)
		}
		delete(age, gone)
	})
	seen := map[string]bool{}
	for _, sid := range got {
		if seen[sid] {
			t.Errorf("%s listed twice: %v", sid, got)
		}
		seen[sid] = true
	}
	// Settled, the index lists what is left, newest first.
	var want []string
	for sid := range age {
		want = append(want, sid)
	}
	slices.SortFunc(want, func(a, b string) int { return int(age[b] - age[a]) })
	h.waitListed(t, "default", want...)
	if got := h.listAll(t, "default", 7, nil); !slices.Equal(got, want) {
		t.Errorf("settled list\n got %v\nwant %v", got, want)
	}
}

// Bad requests are typed errors: a cursor that is not one, a limit out of
// range. The default page is 50.
func TestListSessionsRequests(t *testing.T) {
	h := start(t, 0)
	for i := range 60 {
		h.project(t, "default", fmt.Sprintf("s%02d", i), time.Duration(i)*time.Second)
	}
	h.waitListed(t, "default", "s59")
	resp, err := h.list(t, "default", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Sessions) != events.DefaultListLimit || resp.NextCursor == nil {
		t.Fatalf("default page = %d sessions, cursor %v, %v; want %d and a cursor", len(resp.Sessions), resp.NextCursor, err, events.DefaultListLimit)
	}
	for _, c := range []string{"", "x", "l1", "l1!!", "l1AAAA", "l1AAAAAAAAAAAA..", (*resp.NextCursor)[2:]} {
		if _, err := h.list(t, "default", &c, 10); err == nil || events.AsError(err).Code != events.CodeInvalidCursor {
			t.Errorf("cursor %q: %v, want %s", c, err, events.CodeInvalidCursor)
		}
	}
	for _, limit := range []uint32{0, events.MaxListLimit + 1} {
		req := &events.AcpListDurableSessionsRequest{Limit: &limit}
		if _, err := rpc.Call[events.AcpListDurableSessionsResponse](t.Context(), h.nc, events.APISubject("default", events.OpListSessions), req, nil); err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("limit %d: %v, want %s", limit, err, events.CodeInvalidRequest)
		}
	}
}

// A replica that starts builds its index from the bucket alone.
func TestListSessionsIndexRebuilt(t *testing.T) {
	h := provision(t, streams.Options{})
	for i := range 20 {
		h.project(t, "default", fmt.Sprintf("s%02d", i), time.Duration(i)*time.Second)
	}
	serve(t, h.nc, history.Config{})
	// The first request waits for the index: no sleep, no retry.
	resp, err := h.list(t, "default", nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Sessions) != 20 || resp.Sessions[0].SessionID != "s19" {
		t.Errorf("listed %d sessions, first %v; want 20, s19 first", len(resp.Sessions), resp.Sessions)
	}
}
