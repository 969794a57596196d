package eventlog_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
)

// writeBursty stores n events of session "long" among other sessions'
// events that come in bursts of random length (none, a few, or up to 200
// at once), so the session's density in the stream varies along it, and
// returns the session's sequences.
func writeBursty(tb testing.TB, js jetstream.JetStream, rng *rand.Rand, n int) (string, []uint64) {
	tb.Helper()
	subject := events.LogSubject("default", "long", events.LogEvents)
	otherNo := map[int]uint64{}
	var futs []jetstream.PubAckFuture
	published := 0
	publish := func(subject string, no uint64) jetstream.PubAckFuture {
		m := nats.NewMsg(subject)
		m.Header.Set(events.HeaderRecord, events.AcpDurableSessionUpdate{}.VariantName())
		m.Header.Set(events.HeaderEventNo, strconv.FormatUint(no, 10))
		m.Data = []byte("event " + strconv.FormatUint(no, 10))
		// Wait for the acknowledgements every few hundred publishes: more
		// outstanding stalls the client on a loaded machine.
		if published++; published%500 == 0 {
			<-js.PublishAsyncComplete()
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			tb.Fatal(err)
		}
		return f
	}
	for i := range n {
		futs = append(futs, publish(subject, uint64(i+1)))
		burst := 0
		switch rng.IntN(4) {
		case 0:
		case 1, 2:
			burst = rng.IntN(5)
		default:
			burst = rng.IntN(200)
		}
		for range burst {
			o := rng.IntN(100)
			otherNo[o]++
			publish(events.LogSubject("default", events.SessionID(fmt.Sprint("other", o)), events.LogEvents), otherNo[o])
		}
	}
	<-js.PublishAsyncComplete()
	seqs := make([]uint64, len(futs))
	for i, f := range futs {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			tb.Fatal(err)
		}
	}
	return subject, seqs
}

// Backward pages are forward pages read in reverse, at every depth, for
// several random interleavings and page sizes, with and without the
// session's start pruned.
func TestBackwardEqualsForwardReversed(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			js := setup(t)
			rng := rand.New(rand.NewPCG(seed, 7))
			subject, seqs := writeBursty(t, js, rng, 300)
			if seed%2 == 1 {
				// Prune the session's oldest events: its first retained
				// event number is above 1.
				str, err := js.Stream(t.Context(), events.StreamLog)
				if err != nil {
					t.Fatal(err)
				}
				cut := 1 + rng.IntN(50)
				if err := str.Purge(t.Context(), jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seqs[cut])); err != nil {
					t.Fatal(err)
				}
				seqs = seqs[cut:]
			}
			end := seqs[len(seqs)-1] + 1
			var fellBack atomic.Int64
			counted := eventlog.CountReads(t.Context(), &fellBack, nil)
			defer func() {
				if n := fellBack.Load(); n != 0 {
					t.Errorf("Backward stepped back record by record %d times; want event-number searches only", n)
				}
			}()
			for _, limit := range []int{1, 2, 7, 50, 100, 1000} {
				// Walk the whole session back, page by page, from past its end.
				var back []uint64
				// A cursor far past the stream's end is past the session's end.
				for before := end + uint64(limit%2)*1_000_000; ; {
					page, err := eventlog.Backward(counted, js, events.StreamLog, subject, before, limit)
					if err != nil {
						t.Fatal(err)
					}
					if len(page) == 0 {
						break
					}
					if len(page) > limit {
						t.Fatalf("Backward(before %d, limit %d) = %d records", before, limit, len(page))
					}
					for i := len(page) - 1; i >= 0; i-- {
						back = append(back, page[i].Sequence)
					}
					before = page[0].Sequence
				}
				slices.Reverse(back)
				if !slices.Equal(back, seqs) {
					t.Fatalf("limit %d: backward pages reversed = %d sequences, want the %d forward ones", limit, len(back), len(seqs))
				}
			}
			// Pages before random cursors, other sessions' sequences among
			// them, are the records just before the cursor.
			for range 50 {
				before := 1 + uint64(rng.Int64N(int64(end)))
				limit := 1 + rng.IntN(120)
				page, err := eventlog.Backward(counted, js, events.StreamLog, subject, before, limit)
				if err != nil {
					t.Fatal(err)
				}
				i, _ := slices.BinarySearch(seqs, before)
				want := seqs[max(0, i-limit):i]
				got := make([]uint64, len(page))
				for k, r := range page {
					got[k] = r.Sequence
					if r.Subject != subject {
						t.Fatalf("Backward(before %d) returned a record of %s", before, r.Subject)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("Backward(before %d, limit %d) = %v, want %v", before, limit, got, want)
				}
			}
		})
	}
}

// Control records carry no event numbers: Backward steps back over them.
func TestBackwardWithoutEventNumbers(t *testing.T) {
	js := setup(t)
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w")
	var seqs []uint64
	for i := range 12 {
		a, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogControl, Value: &events.TurnFinished{TurnID: fmt.Sprint("t", i), Outcome: events.OutcomeCompleted}}, update("x"))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, a[0].Seq)
	}
	page, err := eventlog.Backward(t.Context(), js, events.StreamLog, events.LogSubject("default", "s1", events.LogControl), seqs[10], 4)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, r := range page {
		got = append(got, r.Sequence)
	}
	if !slices.Equal(got, seqs[6:10]) {
		t.Errorf("Backward over control records = %v, want %v", got, seqs[6:10])
	}
}

// Replay yields what reading everything forward does, from the start and
// from a cursor, on a literal subject and on a session's wildcard filter.
func TestReplayEqualsForward(t *testing.T) {
	js := setup(t)
	subject, seqs := writeBursty(t, js, rand.New(rand.NewPCG(3, 3)), 800)
	forward := func(subject string, after uint64) []*eventlog.Record {
		var out []*eventlog.Record
		for {
			recs, err := eventlog.Forward(t.Context(), js, events.StreamLog, subject, after, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				return out
			}
			out = append(out, recs...)
			after = recs[len(recs)-1].Sequence
		}
	}
	for _, tc := range []struct {
		subject string
		after   uint64
	}{
		{subject, 0}, {subject, seqs[400]}, {subject, seqs[len(seqs)-1]}, {subject, seqs[len(seqs)-1] + 10},
		{events.LogFilter("default", "long"), 0}, {events.LogFilter("default", "other7"), seqs[100]},
	} {
		want := forward(tc.subject, tc.after)
		var got []*eventlog.Record
		for r, err := range eventlog.Replay(t.Context(), js, events.StreamLog, tc.subject, tc.after) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		if len(got) != len(want) {
			t.Fatalf("Replay(%s after %d) = %d records, want %d", tc.subject, tc.after, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Sequence != w.Sequence || g.Subject != w.Subject || string(g.Data) != string(w.Data) ||
				g.Header.Get(events.HeaderEventNo) != w.Header.Get(events.HeaderEventNo) || !g.Time.Equal(w.Time) {
				t.Fatalf("Replay(%s after %d)[%d] = %d %s, want %d %s", tc.subject, tc.after, i, g.Sequence, g.Subject, w.Sequence, w.Subject)
			}
		}
	}
}

// setupRetention provisions ACP_LOG with the given caps.
func setupRetention(tb testing.TB, maxEvents, maxBytes int64) jetstream.JetStream {
	tb.Helper()
	ns := natstest.Run(tb)
	js, err := jetstream.New(natstest.Connect(tb, ns))
	if err != nil {
		tb.Fatal(err)
	}
	if err := streams.Provision(tb.Context(), js, streams.Options{MaxEventsPerSession: maxEvents, MaxBytesPerSession: maxBytes}, true); err != nil {
		tb.Fatal(err)
	}
	return js
}

// retained reads a session's public events.
func retained(tb testing.TB, js jetstream.JetStream, sid events.SessionID) []*eventlog.Record {
	tb.Helper()
	recs, err := eventlog.Forward(tb.Context(), js, events.StreamLog, events.LogSubject("default", sid, events.LogEvents), 0, 10000)
	if err != nil {
		tb.Fatal(err)
	}
	return recs
}

// An append with more events or event bytes than a session keeps is
// payload_too_large, and nothing of it is written.
func TestAppendOverCapsRejected(t *testing.T) {
	js := setupRetention(t, 10, 4000)
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w")
	if _, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test"}}); err != nil {
		t.Fatal(err)
	}
	before := w.Position()
	many := make([]eventlog.Entry, 11)
	for i := range many {
		many[i] = update("x")
	}
	big := []eventlog.Entry{update(string(make([]byte, 1500))), update(string(make([]byte, 1500))), update(string(make([]byte, 1500)))}
	for name, appendFn := range map[string]func() error{
		"11 events":             func() error { _, err := w.Append(t.Context(), many...); return err },
		"4,500 bytes":           func() error { _, err := w.Append(t.Context(), big...); return err },
		"11 events, each alone": func() error { _, err := w.AppendEach(t.Context(), many); return err },
		"one event over the cap": func() error {
			_, err := w.AppendEach(t.Context(), []eventlog.Entry{update(string(make([]byte, 5000)))})
			return err
		},
	} {
		if err := appendFn(); events.AsError(err) == nil || events.AsError(err).Code != events.CodePayloadTooLarge {
			t.Errorf("append of %s = %v, want %s", name, err, events.CodePayloadTooLarge)
		}
	}
	pos, _, err := eventlog.LoadPosition(t.Context(), js, "default", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if pos != before || w.Position() != before || len(retained(t, js, "s1")) != 0 {
		t.Errorf("after rejected appends the log ends at %+v (writer %+v), want %+v and no events", pos, w.Position(), before)
	}
	// Exactly the caps is fine.
	if _, err := w.Append(t.Context(), many[:10]...); err != nil {
		t.Errorf("append of 10 events = %v", err)
	}
}

// JetStream prunes a session's oldest events past the event cap; the
// others' are untouched.
func TestPruneByCount(t *testing.T) {
	js := setupRetention(t, 5, 0)
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w")
	other := eventlog.NewWriter(js, "default", "s2", eventlog.Position{}, "w")
	for i := range 12 {
		if _, err := w.Append(t.Context(), update(fmt.Sprint("e", i+1))); err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if _, err := other.Append(t.Context(), update("o")); err != nil {
				t.Fatal(err)
			}
		}
	}
	recs := retained(t, js, "s1")
	if len(recs) != 5 || eventlog.EventNo(recs[0]) != 8 || eventlog.EventNo(recs[4]) != 12 {
		t.Errorf("retained %d events from %d, want 5 from 8", len(recs), eventlog.EventNo(recs[0]))
	}
	if n := len(retained(t, js, "s2")); n != 3 {
		t.Errorf("the other session keeps %d events, want 3", n)
	}
}

// The writer prunes a session's oldest events past the byte cap: after
// every append the session keeps at most the cap, its newest events, in
// order and contiguous, whether appended alone, in batches or pipelined,
// and by a writer that took over the log midway.
func TestPruneByBytes(t *testing.T) {
	const maxBytes = 20_000
	js := setupRetention(t, 0, maxBytes)
	rng := rand.New(rand.NewPCG(5, 5))
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w")
	other := eventlog.NewWriter(js, "default", "s2", eventlog.Position{}, "w")
	var pruneErr error
	w.OnPruneError(func(err error) { pruneErr = err })
	written := 0
	check := func(step string) {
		t.Helper()
		if pruneErr != nil {
			t.Fatalf("%s: prune: %v", step, pruneErr)
		}
		recs := retained(t, js, "s1")
		size := 0
		for i, r := range recs {
			size += len(r.Data)
			if i > 0 && eventlog.EventNo(r) != eventlog.EventNo(recs[i-1])+1 {
				t.Fatalf("%s: retained events %d then %d: not contiguous", step, eventlog.EventNo(recs[i-1]), eventlog.EventNo(r))
			}
		}
		if size > maxBytes {
			t.Fatalf("%s: the session keeps %d bytes, over the cap of %d", step, size, maxBytes)
		}
		if n := eventlog.EventNo(recs[len(recs)-1]); n != uint64(written) {
			t.Fatalf("%s: newest retained event %d, want %d", step, n, written)
		}
	}
	entry := func() eventlog.Entry { return update(string(make([]byte, 50+rng.IntN(900)))) }
	for i := range 150 {
		switch i % 3 {
		case 0:
			if _, err := w.Append(t.Context(), entry()); err != nil {
				t.Fatal(err)
			}
			written++
		case 1:
			batch := []eventlog.Entry{entry(), entry(), entry()}
			if _, err := w.Append(t.Context(), batch...); err != nil {
				t.Fatal(err)
			}
			written += len(batch)
		default:
			batch := []eventlog.Entry{entry(), entry(), entry(), entry()}
			if _, err := w.AppendEach(t.Context(), batch); err != nil {
				t.Fatal(err)
			}
			written += len(batch)
		}
		if _, err := other.Append(t.Context(), update("o")); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprint("append ", i))
		if i == 75 {
			// A new owner: its writer starts from the log.
			pos, _, err := eventlog.LoadPosition(t.Context(), js, "default", "s1")
			if err != nil {
				t.Fatal(err)
			}
			w = eventlog.NewWriter(js, "default", "s1", pos, "w2")
			w.OnPruneError(func(err error) { pruneErr = err })
		}
	}
	if recs := retained(t, js, "s1"); eventlog.EventNo(recs[0]) == 1 {
		t.Error("nothing was pruned")
	}
	if n := len(retained(t, js, "s2")); n != 150 {
		t.Errorf("the other session keeps %d events, want all 150", n)
	}
}
