package eventlog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
)

func setup(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	ns := natstest.Run(tb)
	js, err := jetstream.New(natstest.Connect(tb, ns))
	if err != nil {
		tb.Fatal(err)
	}
	if err := streams.Provision(tb.Context(), js, streams.Options{}, true); err != nil {
		tb.Fatal(err)
	}
	return js
}

func update(text string) eventlog.Entry {
	return eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{
		Update: events.JSON(fmt.Sprintf(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q}}`, text)),
	}}
}

func TestAppendSingleAndBatch(t *testing.T) {
	js := setup(t)
	ctx := t.Context()
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w1")

	got, err := w.Append(ctx, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test", PermissionPolicy: events.PolicyAllowAll}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Seq == 0 || got[0].EventNo != 0 {
		t.Fatalf("Append(ctl) = %+v, want a sequence and no event number", got)
	}
	batch, err := w.Append(ctx, eventlog.Entry{Kind: events.LogControl, Value: &events.TurnFinished{TurnID: "t1", Outcome: events.OutcomeCompleted}}, update("a"), update("b"))
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range batch {
		if want := got[0].Seq + 1 + uint64(i); a.Seq != want {
			t.Errorf("batch[%d].Seq = %d, want %d", i, a.Seq, want)
		}
	}
	if batch[1].EventNo != 1 || batch[2].EventNo != 2 {
		t.Errorf("event numbers = %d, %d, want 1, 2", batch[1].EventNo, batch[2].EventNo)
	}

	pos, last, err := eventlog.LoadPosition(ctx, js, "default", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if pos != w.Position() || last.Sequence != batch[2].Seq {
		t.Errorf("LoadPosition = %+v (last %d), want %+v (last %d)", pos, last.Sequence, w.Position(), batch[2].Seq)
	}
}

// A second writer that believes the log ends earlier must fail and store
// nothing: the compare-and-set is the single-writer fence.
func TestStaleWriterIsFenced(t *testing.T) {
	js := setup(t)
	ctx := t.Context()
	a := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "a")
	if _, err := a.Append(ctx, update("first")); err != nil {
		t.Fatal(err)
	}
	stale := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "b")
	for _, entries := range [][]eventlog.Entry{{update("x")}, {update("x"), update("y")}} {
		_, err := stale.Append(ctx, entries...)
		if e := events.AsError(err); e == nil || e.Code != events.CodeWriteConflict {
			t.Fatalf("stale Append(%d entries) = %v, want %s", len(entries), err, events.CodeWriteConflict)
		}
	}
	// A writer on another session is not affected.
	other := eventlog.NewWriter(js, "default", "s2", eventlog.Position{}, "b")
	if _, err := other.Append(ctx, update("other")); err != nil {
		t.Fatalf("Append on another session: %v", err)
	}
	recs, err := eventlog.Forward(ctx, js, events.StreamLog, events.LogSubject("default", "s1", events.LogEvents), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("s1 has %d events, want 1", len(recs))
	}
}

// A write_conflict reaches API callers: it once carried the stream's raw
// sequences and the server's wording. It names neither.
func TestSecurityWriteConflictSaysNoInternals(t *testing.T) {
	js := setup(t)
	ctx := t.Context()
	if _, err := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "a").Append(ctx, update("first")); err != nil {
		t.Fatal(err)
	}
	stale := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "b")
	for _, entries := range [][]eventlog.Entry{{update("x")}, {update("x"), update("y")}} {
		_, err := stale.Append(ctx, entries...)
		e := events.AsError(err)
		if e == nil || e.Code != events.CodeWriteConflict {
			t.Fatalf("stale Append(%d entries) = %v, want %s", len(entries), err, events.CodeWriteConflict)
		}
		if strings.ContainsAny(strings.ReplaceAll(e.Message, "s1", ""), "0123456789") || strings.Contains(e.Message, "nats") {
			t.Errorf("write_conflict message %q carries internals", e.Message)
		}
	}
}

// Republishing a message whose ID is already stored is acknowledged as a
// duplicate: what makes a timed-out append safe to retry.
func TestRetryIsStoredOnce(t *testing.T) {
	js := setup(t)
	ctx := t.Context()
	msg := func() *nats.Msg {
		m := nats.NewMsg(events.LogSubject("default", "s1", events.LogControl))
		m.Header.Set(jetstream.MsgIDHeader, "default.s1.0.w.0")
		m.Data = []byte("x")
		return m
	}
	first, err := js.PublishMsg(ctx, msg())
	if err != nil {
		t.Fatal(err)
	}
	again, err := js.PublishMsg(ctx, msg())
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.Sequence != first.Sequence {
		t.Errorf("retry ack = %+v, want duplicate of %d", again, first.Sequence)
	}
}

func TestForwardAndBackward(t *testing.T) {
	js := setup(t)
	ctx := t.Context()
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w")
	noise := eventlog.NewWriter(js, "default", "noise", eventlog.Position{}, "w")
	var seqs []uint64
	for i := range 20 {
		a, err := w.Append(ctx, update(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, a[0].Seq)
		if _, err := noise.Append(ctx, update("n")); err != nil {
			t.Fatal(err)
		}
	}
	subj := events.LogSubject("default", "s1", events.LogEvents)
	fwd, err := eventlog.Forward(ctx, js, events.StreamLog, subj, seqs[4], 5)
	if err != nil {
		t.Fatal(err)
	}
	back, err := eventlog.Backward(ctx, js, events.StreamLog, subj, seqs[10], 5)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		got  []*eventlog.Record
		want []uint64
	}{
		"forward":  {fwd, seqs[5:10]},
		"backward": {back, seqs[5:10]},
	} {
		if len(tc.got) != len(tc.want) {
			t.Fatalf("%s: %d records, want %d", name, len(tc.got), len(tc.want))
		}
		for i, r := range tc.got {
			if r.Sequence != tc.want[i] || eventlog.EventNo(r) != uint64(6+i) {
				t.Errorf("%s[%d] = seq %d eventNo %d, want seq %d eventNo %d", name, i, r.Sequence, eventlog.EventNo(r), tc.want[i], 6+i)
			}
		}
	}
	if got, _ := eventlog.Backward(ctx, js, events.StreamLog, subj, seqs[0], 5); len(got) != 0 {
		t.Errorf("Backward before the first event = %d records, want 0", len(got))
	}
}

// AppendEach pipelines; what it stores must be exactly the entries, in
// order, numbered without gaps, even when other sessions' records land in
// between and spoil its predictions.
func TestAppendEachKeepsOrderUnderInterleaving(t *testing.T) {
	js := setup(t)
	const n = 600
	writers := make([]*eventlog.Writer, 3)
	errs := make(chan error, len(writers))
	for i := range writers {
		writers[i] = eventlog.NewWriter(js, "default", events.SessionID(fmt.Sprint("s", i)), eventlog.Position{}, "w")
		go func(w *eventlog.Writer) {
			entries := make([]eventlog.Entry, n)
			for j := range entries {
				entries[j] = update(fmt.Sprint(j))
			}
			got, err := w.AppendEach(t.Context(), entries)
			if err == nil && len(got) != n {
				err = fmt.Errorf("stored %d of %d", len(got), n)
			}
			errs <- err
		}(writers[i])
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range writers {
		subj := events.LogSubject("default", events.SessionID(fmt.Sprint("s", i)), events.LogEvents)
		var all []*eventlog.Record
		var after uint64
		for {
			recs, err := eventlog.Forward(t.Context(), js, events.StreamLog, subj, after, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			all = append(all, recs...)
			after = recs[len(recs)-1].Sequence
		}
		if len(all) != n {
			t.Fatalf("s%d has %d records, want %d", i, len(all), n)
		}
		for j, r := range all {
			want := fmt.Sprintf(`"text":"%d"`, j)
			if !strings.Contains(string(r.Data), want) || eventlog.EventNo(r) != uint64(j+1) {
				t.Fatalf("s%d record %d = eventNo %d %q, want eventNo %d with %s", i, j, eventlog.EventNo(r), r.Data, j+1, want)
			}
		}
		if pos := writers[i].Position(); pos.LastSeq != all[n-1].Sequence || pos.LastEventNo != n {
			t.Errorf("s%d writer position = %+v, want the last record %d / %d", i, pos, all[n-1].Sequence, n)
		}
	}
}

func TestAppendEachStaleWriterStoresNothing(t *testing.T) {
	js := setup(t)
	a := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "a")
	if _, err := a.Append(t.Context(), update("first")); err != nil {
		t.Fatal(err)
	}
	stale := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "b")
	entries := []eventlog.Entry{update("x"), update("y"), update("z")}
	got, err := stale.AppendEach(t.Context(), entries)
	if e := events.AsError(err); e == nil || e.Code != events.CodeWriteConflict || len(got) != 0 {
		t.Fatalf("stale AppendEach = %d stored, %v; want none and %s", len(got), err, events.CodeWriteConflict)
	}
	recs, err := eventlog.Forward(t.Context(), js, events.StreamLog, events.LogSubject("default", "s1", events.LogEvents), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Errorf("the log has %d events, want only the first writer's", len(recs))
	}
}

// TestFirstSince: the oldest record of a subject stored at or after a time,
// the other sessions' records passed over; none after the newest.
func TestFirstSince(t *testing.T) {
	js := setup(t)
	ctx := t.Context()
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w")
	noise := eventlog.NewWriter(js, "default", "noise", eventlog.Position{}, "w")
	var seqs []uint64
	for i := range 3 {
		if _, err := noise.Append(ctx, update("n")); err != nil {
			t.Fatal(err)
		}
		a, err := w.Append(ctx, update(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, a[0].Seq)
	}
	subj := events.LogFilter("default", "s1")
	second, err := eventlog.At(ctx, js, events.StreamLog, seqs[1])
	if err != nil || second == nil {
		t.Fatalf("At(%d) = %v, %v", seqs[1], second, err)
	}
	got, err := eventlog.FirstSince(ctx, js, events.StreamLog, subj, second.Time)
	if err != nil || got == nil || got.Sequence != seqs[1] {
		t.Fatalf("FirstSince(the second record's time) = %+v, %v; want record %d", got, err, seqs[1])
	}
	got, err = eventlog.FirstSince(ctx, js, events.StreamLog, subj, second.Time.Add(time.Hour))
	if err != nil || got != nil {
		t.Fatalf("FirstSince(an hour later) = %+v, %v; want none", got, err)
	}
}

// TestDirectGetUnansweredEnds: a direct get nobody answers (the request
// lost while a node dies) ends with an error after the connection's
// request timeout, though its context has no deadline. It waited for ever:
// a session service held a session's lock so for twenty minutes.
func TestDirectGetUnansweredEnds(t *testing.T) {
	// The get has no deadline of its own: the connection's request
	// timeout ends it, here 3 s rather than natstest's 30.
	nc := natstest.Connect(t, natstest.Run(t), nats.Timeout(3*time.Second))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A responder that takes the requests of a stream's direct get and
	// answers none, as a request on its way to a node that died is.
	sub, err := nc.Subscribe("$JS.API.DIRECT.GET.SILENT", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := eventlog.Last(context.Background(), js, "SILENT", "x.>")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an unanswered direct get returned no error")
		}
		t.Logf("an unanswered direct get: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("an unanswered direct get with no deadline still waits after a minute")
	}
}

// An append rides out a stream that answers no publish for a while, as
// ACP_LOG during a leader election: it is sent again, with the same
// message IDs, until the stream stores it. Here the stream stops capturing
// the session's subjects, then captures them again once the writer has
// retried.
func TestAppendRidesOutNoResponders(t *testing.T) {
	js := setup(t)
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w")
	ctx, retries := eventlog.ObserveAppendRetries(t.Context())
	s, err := js.Stream(ctx, events.StreamLog)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	away := cfg
	away.Subjects, away.RePublish = []string{"acp.elsewhere.>"}, nil
	if _, err := js.UpdateStream(ctx, away); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.Append(ctx, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionUnloaded{Reason: events.UnloadIdle}})
		done <- err
	}()
	select {
	case <-retries:
	case err := <-done:
		t.Fatalf("Append without responders = %v before any retry", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Append did not retry within 30s")
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Append once the stream is back = %v, want it stored", err)
	}
	last, err := eventlog.Last(ctx, js, events.StreamLog, "acp.log.default.s1.ctl")
	if err != nil || last == nil || last.Header.Get(events.HeaderRecord) != events.RecordSessionUnloaded {
		t.Fatalf("newest control record = %v (%v), want the SessionUnloaded", last, err)
	}
}
