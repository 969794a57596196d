package history_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/history"
)

// startPayload runs the history service on an embedded NATS whose
// max_payload is maxPayload.
func startPayload(t *testing.T, maxPayload int32) *harness {
	t.Helper()
	nc := natstest.Connect(t, natstest.Run(t, natstest.WithMaxPayload(maxPayload)))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{}, true); err != nil {
		t.Fatal(err)
	}
	serve(t, nc, history.Config{})
	return &harness{nc: nc, js: js}
}

// writeSizes appends one agent message of each size to sid, each turn
// accepted by a small user message, and returns the sequences of the
// agent messages.
func (h *harness) writeSizes(t *testing.T, sid events.SessionID, sizes ...int) []uint64 {
	t.Helper()
	w := eventlog.NewWriter(h.js, "default", sid, eventlog.Position{}, "w")
	if _, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test"}}); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i, n := range sizes {
		turn := fmt.Sprintf("t%d", i)
		if _, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogEvents,
			Header: nats.Header{events.HeaderTurnID: []string{turn}, events.HeaderTurnAccepted: []string{"1"}},
			Value:  &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"go"}}`)}}); err != nil {
			t.Fatal(err)
		}
		text := strings.Repeat(string(rune('a'+i%26)), n)
		a, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogEvents, Header: nats.Header{events.HeaderTurnID: []string{turn}},
			Value: &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)}})
		if err != nil {
			t.Fatalf("append a message of %d bytes: %v", n, err)
		}
		seqs = append(seqs, a[0].Seq)
		if _, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogControl, Header: nats.Header{events.HeaderTurnID: []string{turn}},
			Value: &events.TurnFinished{TurnID: turn, Outcome: events.OutcomeCompleted, StopReason: "end_turn"}}); err != nil {
			t.Fatal(err)
		}
	}
	return seqs
}

// pageWait bounds one page read: a page answers at once or not at all.
const pageWait = 20 * time.Second

// readAll pages through sid's history in one direction with limit,
// requiring every page to answer within pageWait, and returns every
// event's sequence, oldest first, and the pages' sizes in events.
func (h *harness) readAll(t *testing.T, sid string, forward, state bool, limit uint32) ([]uint64, []int) {
	t.Helper()
	var seqs []uint64
	var sizes []int
	var cursor *uint64
	if forward {
		cursor = new(uint64(0))
	}
	for range 1000 {
		req := &events.AcpReadHistoryRequest{SessionID: &sid, Limit: &limit, IncludeState: state}
		if forward {
			req.After = cursor
		} else {
			req.Before = cursor
		}
		ctx, cancel := context.WithTimeout(t.Context(), pageWait)
		page, err := history.ReadPage(ctx, h.nc, "default", req)
		cancel()
		if err != nil {
			t.Fatalf("page %d (forward %v, state %v, limit %d, cursor %v): %v", len(sizes), forward, state, limit, cursor, err)
		}
		var got []uint64
		for _, e := range page.Events {
			if _, ok := e.Event.V.(*events.SessionStateChange); !ok {
				got = append(got, e.Sequence)
			}
		}
		sizes = append(sizes, len(got))
		if forward {
			seqs = append(seqs, got...)
			if !page.HasMoreAfter {
				return seqs, sizes
			}
			if len(got) == 0 {
				t.Fatalf("page %d is empty but has more after", len(sizes))
			}
			cursor = new(got[len(got)-1])
		} else {
			seqs = append(got, seqs...)
			if !page.HasMoreBefore {
				return seqs, sizes
			}
			if len(got) == 0 {
				t.Fatalf("page %d is empty but has more before", len(sizes))
			}
			cursor = new(got[0])
		}
	}
	t.Fatal("more than 1000 pages")
	return nil, nil
}

// A session of large messages reads back, both ways, at every limit: each
// page is bounded by bytes below the payload limit as well as by count,
// with exact hasMore flags, and a message larger than a page comes in a
// page of its own. (testutil.LargeScale: answers of 4 MB and 20 MB on
// skein dev's max_payload of 8 MiB in make test-long.)
func TestLargeMessagesPage(t *testing.T) {
	maxPayload, chunk := testutil.LargeScale()
	h := startPayload(t, maxPayload)
	// Three answers of a chunk; then one of five, as the session service
	// stores it: in records that each fit a NATS message.
	record := int(maxPayload) - 16<<10 - 256
	sizes := []int{chunk, chunk, chunk, record, record, 5*chunk - 2*record}
	msgs := h.writeSizes(t, "big", sizes...)
	all, _ := h.readAll(t, "big", true, false, events.MaxHistoryLimit)
	if len(all) != 2*len(sizes) {
		t.Fatalf("forward read %d events, want %d", len(all), 2*len(sizes))
	}
	for _, m := range msgs {
		if !slices.Contains(all, m) {
			t.Errorf("message %d not read", m)
		}
	}
	for _, forward := range []bool{true, false} {
		for _, state := range []bool{false, true} {
			for _, limit := range []uint32{1, 2, 6, 7, 100, events.MaxHistoryLimit} {
				t.Run(fmt.Sprintf("forward=%v,state=%v,limit=%d", forward, state, limit), func(t *testing.T) {
					got, pages := h.readAll(t, "big", forward, state, limit)
					if !slices.Equal(got, all) {
						t.Errorf("read %v, want %v", got, all)
					}
					for i, n := range pages {
						if n > int(limit) {
							t.Errorf("page %d holds %d events, more than the limit %d", i, n, limit)
						}
					}
				})
			}
		}
	}
}

// Pages of a session whose events total more than a page, mixed sizes
// interleaved with another session's: every page's reply fits one NATS
// message, and paging both ways reads every event once, in order.
func TestPagesBoundedByBytes(t *testing.T) {
	const maxPayload = 1 << 20
	h := startPayload(t, maxPayload)
	var sizes []int
	for i := range 20 {
		sizes = append(sizes, []int{300_000, 10, 200_000, 1000, 600_000}[i%5])
	}
	h.writeSizes(t, "mixed", sizes...)
	h.write(t, "mixed-other", 3)
	all, _ := h.readAll(t, "mixed", true, false, events.MaxHistoryLimit)
	if len(all) != 2*len(sizes) {
		t.Fatalf("forward read %d events, want %d", len(all), 2*len(sizes))
	}
	for _, forward := range []bool{true, false} {
		for _, limit := range []uint32{1, 3, 50, events.MaxHistoryLimit} {
			sid := "mixed"
			var cursor *uint64
			if forward {
				cursor = new(uint64(0))
			}
			var got []uint64
			for {
				req := &events.AcpReadHistoryRequest{SessionID: &sid, Limit: &limit, IncludeState: true}
				if forward {
					req.After = cursor
				} else {
					req.Before = cursor
				}
				page, err := history.ReadPage(t.Context(), h.nc, "default", req)
				if err != nil {
					t.Fatalf("forward %v limit %d: %v", forward, limit, err)
				}
				body, err := events.Marshal(page)
				if err != nil {
					t.Fatal(err)
				}
				if len(body) > maxPayload {
					t.Errorf("forward %v limit %d: a page of %d bytes, more than max_payload %d", forward, limit, len(body), maxPayload)
				}
				var seqs []uint64
				for _, e := range page.Events {
					if _, ok := e.Event.V.(*events.SessionStateChange); !ok {
						seqs = append(seqs, e.Sequence)
					}
				}
				if len(seqs) == 0 || len(seqs) > int(limit) {
					t.Fatalf("forward %v limit %d: a page of %d events", forward, limit, len(seqs))
				}
				if forward {
					got = append(got, seqs...)
					if !page.HasMoreAfter {
						break
					}
					cursor = new(seqs[len(seqs)-1])
				} else {
					got = append(seqs, got...)
					if !page.HasMoreBefore {
						break
					}
					cursor = new(seqs[0])
				}
			}
			if !slices.Equal(got, all) {
				t.Errorf("forward %v limit %d: read %v, want %v", forward, limit, got, all)
			}
		}
	}
}

// An event whose page is larger than one NATS message carries (its state
// change beside it, with includeState) is chunked by the transport to a
// reader that accepts chunks, and fails at once, typed, for one that
// does not.
func TestPageLargerThanAMessage(t *testing.T) {
	const maxPayload = 256 << 10
	h := startPayload(t, maxPayload)
	// One record as large as the server stores, with few headers: its
	// entry, and the turn_accepted state change before it, do not fit.
	hdr := nats.Header{
		events.HeaderRecord:       []string{(&events.AcpDurableSessionUpdate{}).VariantName()},
		events.HeaderEventNo:      []string{"1"},
		events.HeaderTurnID:       []string{"t1"},
		events.HeaderTurnAccepted: []string{"1"},
	}
	hdrBytes := 0
	for k, v := range hdr {
		hdrBytes += len(k) + len(v[0]) + 4
	}
	var data []byte
	for n := maxPayload - hdrBytes - 200; ; n-- {
		var err error
		data, err = events.Marshal(&events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"` + strings.Repeat("y", n) + `"}}`)})
		if err != nil {
			t.Fatal(err)
		}
		if len(data)+hdrBytes+64 <= maxPayload {
			break
		}
	}
	hdr.Set(events.HeaderEventBytes, fmt.Sprint(len(data)))
	if _, err := h.js.PublishMsg(t.Context(), &nats.Msg{Subject: events.LogSubject("default", "huge", events.LogEvents), Header: hdr, Data: data}); err != nil {
		t.Fatal(err)
	}
	sid := "huge"
	req := &events.AcpReadHistoryRequest{SessionID: &sid, After: new(uint64(0)), IncludeState: true}
	ctx, cancel := context.WithTimeout(t.Context(), pageWait)
	defer cancel()
	_, err := rpc.Call[events.AcpHistoryPageResponse](ctx, h.nc, events.APISubject("default", events.OpReadHistory), req, nil)
	if e := events.AsError(err); e == nil || e.Code != events.CodePayloadTooLarge {
		t.Fatalf("a page larger than max_payload, not chunked = %v, want %s at once", err, events.CodePayloadTooLarge)
	}
	page, err := history.ReadPage(ctx, h.nc, "default", req)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 || page.HasMoreAfter || page.HasMoreBefore {
		t.Fatalf("page = %d entries (more before %v, after %v), want the state change and the event, nothing more", len(page.Events), page.HasMoreBefore, page.HasMoreAfter)
	}
	body, _ := events.Marshal(page)
	if len(body) <= maxPayload {
		t.Errorf("the page is %d bytes, within max_payload %d: the test proves nothing", len(body), maxPayload)
	}
}
