package history_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
)

// otherSeqs returns the sequences of the other session write interleaves.
func (h *harness) otherSeqs(t *testing.T, sid events.SessionID) []uint64 {
	t.Helper()
	recs, err := eventlog.Forward(t.Context(), h.js, events.StreamLog, events.LogSubject("default", "other-"+sid, events.LogEvents), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, r := range recs {
		out = append(out, r.Sequence)
	}
	return out
}

func wantExpired(t *testing.T, what string, err error, oldest uint64) {
	t.Helper()
	e := events.AsError(err)
	if e == nil || e.Code != events.CodeCursorExpired {
		t.Errorf("%s = %v, want %s", what, err, events.CodeCursorExpired)
		return
	}
	if !strings.Contains(e.Message, fmt.Sprint("oldest retained is ", oldest)) {
		t.Errorf("%s = %q, want it to name the oldest retained sequence %d", what, e.Message, oldest)
	}
}

// The cursor rules of a session whose oldest events were pruned.
func TestCursorRules(t *testing.T) {
	h := start(t, 5)
	seqs := h.write(t, "s1", 12) // keeps the last 5: seqs[7:]
	oldest, newest := seqs[7], seqs[11]
	sid := new("s1")

	// Older than what is retained, after=0 included, is expired.
	for _, after := range []uint64{0, 1, seqs[2], seqs[6], oldest - 2} {
		_, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, After: &after})
		wantExpired(t, fmt.Sprintf("after=%d", after), err, oldest)
	}
	for _, before := range []uint64{1, seqs[3], oldest} {
		_, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, Before: &before})
		wantExpired(t, fmt.Sprintf("before=%d", before), err, oldest)
	}
	// From the oldest retained on, pages read: after the sequence before
	// it (every pruned event is before that), and after it.
	page, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, After: new(oldest - 1), Limit: new(uint32(2))})
	if err != nil || !slices.Equal(seqsOf(page), seqs[7:9]) || page.HasMoreBefore || !page.HasMoreAfter {
		t.Errorf("after the oldest retained less one = %v, %v, want %v, nothing before", seqsOf(page), err, seqs[7:9])
	}
	page, err = h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, After: new(oldest), Limit: new(uint32(2))})
	if err != nil || !slices.Equal(seqsOf(page), seqs[8:10]) || !page.HasMoreBefore || !page.HasMoreAfter {
		t.Errorf("after the oldest retained = %v, %v, want %v with more on both sides", seqsOf(page), err, seqs[8:10])
	}
	// Beyond the newest: an empty page, nothing more after.
	for _, after := range []uint64{newest, newest + 1, newest + 1_000_000} {
		page, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, After: &after})
		if err != nil || len(page.Events) != 0 || page.HasMoreAfter || !page.HasMoreBefore {
			t.Errorf("after=%d (newest %d) = %+v, %v; want an empty page, hasMoreAfter false", after, newest, page, err)
		}
	}
	for _, before := range []uint64{newest + 1, newest + 1_000_000} {
		page, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: sid, Before: &before})
		if err != nil || !slices.Equal(seqsOf(page), seqs[7:]) || page.HasMoreAfter {
			t.Errorf("before=%d = %v, %v; want the retained %v, hasMoreAfter false", before, seqsOf(page), err, seqs[7:])
		}
	}
}

// A cursor that is another session's sequence reads this session's events
// around it, or is expired like any other cursor, and names nothing of the
// other session.
func TestCursorOfAnotherSession(t *testing.T) {
	for _, maxEvents := range []int64{0, 5} {
		t.Run(fmt.Sprint("maxEvents=", maxEvents), func(t *testing.T) {
			h := start(t, maxEvents)
			seqs := h.write(t, "s1", 12)
			// A third session that s1 never meets.
			stranger := eventlog.NewWriter(h.js, "default", "stranger", eventlog.Position{}, "w")
			if _, err := stranger.Append(t.Context(), eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{
				Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"secret"}}`),
			}}); err != nil {
				t.Fatal(err)
			}
			foreign := append(h.otherSeqs(t, "s1"), stranger.Position().LastSeq)
			if maxEvents > 0 {
				seqs = seqs[len(seqs)-int(maxEvents):]
			}
			for _, cur := range foreign {
				for _, req := range []events.AcpReadHistoryRequest{
					{SessionID: new("s1"), After: new(cur), Limit: new(uint32(3))},
					{SessionID: new("s1"), Before: new(cur), Limit: new(uint32(3))},
				} {
					page, err := h.read(t, &req)
					if err != nil {
						e := events.AsError(err)
						if e == nil || e.Code != events.CodeCursorExpired || cur >= seqs[0] {
							t.Errorf("cursor %d = %v; want a page, or cursor_expired before %d", cur, err, seqs[0])
						}
						if strings.Contains(err.Error(), "other") || strings.Contains(err.Error(), "stranger") {
							t.Errorf("cursor %d: error %q names another session", cur, err)
						}
						continue
					}
					var want []uint64
					if req.After != nil {
						i, _ := slices.BinarySearch(seqs, cur+1)
						want = seqs[i:min(i+3, len(seqs))]
					} else {
						i, _ := slices.BinarySearch(seqs, cur)
						want = seqs[max(0, i-3):i]
					}
					if got := seqsOf(page); !slices.Equal(got, want) {
						t.Errorf("cursor %d (after %v): sequences %v, want s1's %v", cur, req.After != nil, got, want)
					}
					// The other sessions' events are a plan update and
					// "secret": neither may be anywhere in the page.
					data, err := events.Marshal(page)
					if err != nil {
						t.Fatal(err)
					}
					if bytes.Contains(data, []byte("secret")) || bytes.Contains(data, []byte(`"plan"`)) || bytes.Contains(data, []byte("other")) || bytes.Contains(data, []byte("stranger")) {
						t.Errorf("cursor %d: the page holds another session's event", cur)
					}
					for _, e := range page.Events {
						if e.SessionID != "s1" {
							t.Errorf("cursor %d: page holds an event of %s", cur, e.SessionID)
						}
					}
				}
			}
		})
	}
}

// Events pruned past the byte cap expire cursors as the count cap does.
func TestCursorExpiredByBytes(t *testing.T) {
	h := startWith(t, streams.Options{MaxBytesPerSession: 1000})
	seqs := h.write(t, "s1", 40) // about 90 bytes each
	page, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: new("s1"), Limit: new(uint32(100))})
	if err != nil {
		t.Fatal(err)
	}
	got := seqsOf(page)
	if len(got) == 0 || len(got) == len(seqs) || !slices.Equal(got, seqs[len(seqs)-len(got):]) || page.HasMoreBefore {
		t.Fatalf("newest page = %v, want a suffix of %v, pruned", got, seqs)
	}
	oldest := got[0]
	for _, after := range []uint64{0, seqs[0], oldest - 2} {
		_, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: new("s1"), After: &after})
		wantExpired(t, fmt.Sprintf("after=%d", after), err, oldest)
	}
}
