package turnwait_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
)

// turnLog writes one session's log as the session service does: the
// accepting user message, other records, the turn's TurnFinished.
type turnLog struct {
	tb  testing.TB
	js  jetstream.JetStream
	sid events.SessionID
	w   *eventlog.Writer
}

func newTurnLog(tb testing.TB, js jetstream.JetStream, sid events.SessionID) *turnLog {
	tb.Helper()
	l := &turnLog{tb: tb, js: js, sid: sid, w: eventlog.NewWriter(js, "default", sid, eventlog.Position{}, "w")}
	l.append(eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test", PermissionPolicy: events.PolicyAllowAll}})
	return l
}

func (l *turnLog) append(entries ...eventlog.Entry) uint64 {
	l.tb.Helper()
	got, err := l.w.Append(l.tb.Context(), entries...)
	if err != nil {
		l.tb.Fatalf("Append: %v", err)
	}
	return got[0].Seq
}

// accept appends the accepting record of turn id (keyed when key is set)
// and returns the PromptAccepted the session service answers.
func (l *turnLog) accept(id string, key *string) *events.PromptAccepted {
	l.tb.Helper()
	hdr := nats.Header{events.HeaderTurnID: {id}, events.HeaderTurnAccepted: {"1"}, events.HeaderContentHash: {"h"}}
	if key != nil {
		hdr.Set(events.HeaderIdempotencyKey, *key)
	}
	seq := l.append(eventlog.Entry{Kind: events.LogEvents, Header: hdr, Value: &events.AcpDurableSessionUpdate{
		Update: events.JSON(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}`),
	}})
	keyed := key != nil
	return &events.PromptAccepted{SessionID: string(l.sid), TurnID: id, Sequence: seq, Keyed: &keyed}
}

// update appends a public event of turn id.
func (l *turnLog) update(id string) uint64 {
	l.tb.Helper()
	return l.append(eventlog.Entry{Kind: events.LogEvents, Header: nats.Header{events.HeaderTurnID: {id}}, Value: &events.AcpDurableSessionUpdate{
		Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}`),
	}})
}

// finish appends the TurnFinished of turn id, on its key's subject when
// keyed. named sets HeaderTurnID on it, as a writer may or may not.
func (l *turnLog) finish(id string, key *string, stopReason string, named bool) uint64 {
	l.tb.Helper()
	e := finishEntry(l.sid, id, key, stopReason)
	if named {
		e.Header = nats.Header{events.HeaderTurnID: {id}}
	}
	return l.append(e)
}

func finishEntry(sid events.SessionID, id string, key *string, stopReason string) eventlog.Entry {
	e := eventlog.Entry{Kind: events.LogControl, Value: &events.TurnFinished{
		TurnID: id, IdempotencyKey: key, ContentHash: "h", Outcome: events.OutcomeCompleted, StopReason: stopReason,
	}}
	if key != nil {
		e.Subject = events.KeySubject("default", sid, *key)
	}
	return e
}

// awaitAsync runs Await in a goroutine; the result arrives on the
// channel. The test's end waits for it.
type awaitResult struct {
	f   *events.TurnFinished
	err error
}

func awaitAsync(t *testing.T, ctx context.Context, js jetstream.JetStream, sid events.SessionID, acc *events.PromptAccepted) <-chan awaitResult {
	t.Helper()
	ch := make(chan awaitResult, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f, err := turnwait.Await(ctx, js, "default", sid, acc)
		ch <- awaitResult{f, err}
	}()
	t.Cleanup(func() { <-done })
	return ch
}

// receive returns the result of an Await, failing the test if none
// comes within a generous deadline.
func receive(t *testing.T, ch <-chan awaitResult) awaitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("Await did not return within 30s")
		return awaitResult{}
	}
}

func wantFinished(t *testing.T, r awaitResult, id, stopReason string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("Await = %v, want the TurnFinished of %s", r.err, id)
	}
	if r.f.TurnID != id || r.f.StopReason != stopReason {
		t.Fatalf("Await = turn %s stopReason %q, want turn %s stopReason %q", r.f.TurnID, r.f.StopReason, id, stopReason)
	}
}

// firstRead waits until a wait has subscribed and read the log once.
func firstRead(t *testing.T, o *turnwait.AwaitObserver) {
	t.Helper()
	select {
	case <-o.FirstRead:
	case <-time.After(30 * time.Second):
		t.Fatal("Await did not read the log within 30s")
	}
}

// wantFoundBy checks how the last wait found its end.
func wantFoundBy(t *testing.T, o *turnwait.AwaitObserver, want string) {
	t.Helper()
	select {
	case got := <-o.Found:
		if got != want {
			t.Errorf("the wait found its end by %s, want %s", got, want)
		}
	default:
		t.Error("the wait did not say how it ended")
	}
}

func TestAwaitTurnFinishedBefore(t *testing.T) {
	js := setup(t)
	ctx, o := turnwait.ObserveAwait(t.Context())
	l := newTurnLog(t, js, "s1")
	acc := l.accept("t1", nil)
	l.update("t1")
	l.finish("t1", nil, "end_turn", false)
	wantFinished(t, receive(t, awaitAsync(t, ctx, js, "s1", acc)), "t1", "end_turn")
	wantFoundBy(t, o, "read")
}

func TestAwaitTurnFinishedAfter(t *testing.T) {
	js := setup(t)
	ctx, o := turnwait.ObserveAwait(t.Context())
	l := newTurnLog(t, js, "s1")
	acc := l.accept("t1", nil)
	ch := awaitAsync(t, ctx, js, "s1", acc)
	firstRead(t, o)
	l.update("t1")
	l.finish("t1", nil, "end_turn", true)
	wantFinished(t, receive(t, ch), "t1", "end_turn")
	wantFoundBy(t, o, "live")
}

func TestAwaitTurnKeyed(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run("finished="+when, func(t *testing.T) {
			js := setup(t)
			ctx, o := turnwait.ObserveAwait(t.Context())
			l := newTurnLog(t, js, "s1")
			key := new("key-1")
			acc := l.accept("t1", key)
			if when == "before" {
				l.finish("t1", key, "end_turn", false)
			}
			ch := awaitAsync(t, ctx, js, "s1", acc)
			if when == "after" {
				firstRead(t, o)
				l.finish("t1", key, "end_turn", false)
			}
			r := receive(t, ch)
			wantFinished(t, r, "t1", "end_turn")
			wantFoundBy(t, o, map[string]string{"before": "read", "after": "live"}[when])
			if r.f.IdempotencyKey == nil || *r.f.IdempotencyKey != *key {
				t.Errorf("TurnFinished.IdempotencyKey = %v, want %q", r.f.IdempotencyKey, *key)
			}
		})
	}
}

// A keyed retry of a turn that already ended carries its TurnFinished: no
// read at all (a nil JetStream would panic on one).
func TestAwaitTurnAlreadyFinished(t *testing.T) {
	want := &events.TurnFinished{TurnID: "t1", Outcome: events.OutcomeCompleted, StopReason: "end_turn"}
	got, err := turnwait.Await(t.Context(), nil, "default", "s1", &events.PromptAccepted{SessionID: "s1", TurnID: "t1", Sequence: 9, Finished: want})
	if err != nil || got != want {
		t.Fatalf("Await(Finished set) = %v, %v; want the acceptance's TurnFinished", got, err)
	}
}

// Other turns' TurnFinished records, before the acceptance and after it,
// on the control subject and on other keys, never end the wait.
func TestAwaitTurnIgnoresOtherTurns(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run("finished="+when, func(t *testing.T) {
			js := setup(t)
			ctx, o := turnwait.ObserveAwait(t.Context())
			l := newTurnLog(t, js, "s1")
			other := newTurnLog(t, js, "s2")
			l.accept("t0", nil)
			l.finish("t0", nil, "t0", true)
			acc := l.accept("t1", nil)
			noise := func() {
				l.finish("t9", nil, "t9", true)               // named by header
				l.finish("t8", nil, "t8", false)              // found by decoding
				l.finish("t7", new("other-key"), "t7", false) // another key
				l.append(eventlog.Entry{Kind: events.LogControl, Value: &events.OwnerChanged{Owner: "r2", LeaseRevision: 2}})
				other.accept("t1", nil)                         // another session, same turn ID
				other.finish("t1", nil, "other-session", false) //
				l.update("t1")
			}
			var ch <-chan awaitResult
			if when == "before" {
				noise()
				l.finish("t1", nil, "end_turn", false)
				ch = awaitAsync(t, ctx, js, "s1", acc)
			} else {
				ch = awaitAsync(t, ctx, js, "s1", acc)
				firstRead(t, o)
				noise()
				l.finish("t1", nil, "end_turn", false)
			}
			wantFinished(t, receive(t, ch), "t1", "end_turn")
		})
	}
}

func TestAwaitTurnSessionDeleted(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run("deleted="+when, func(t *testing.T) {
			js := setup(t)
			ctx, o := turnwait.ObserveAwait(t.Context())
			l := newTurnLog(t, js, "s1")
			acc := l.accept("t1", new("k"))
			del := func() {
				l.append(eventlog.Entry{Kind: events.LogControl, Value: &events.SessionDeleted{Reason: events.DeleteRequested}})
			}
			if when == "before" {
				del()
			}
			ch := awaitAsync(t, ctx, js, "s1", acc)
			if when == "after" {
				firstRead(t, o)
				del()
			}
			r := receive(t, ch)
			if !errors.Is(r.err, events.ErrSessionNotFound) {
				t.Fatalf("Await after a deletion = %v, %v; want %s", r.f, r.err, events.CodeSessionNotFound)
			}
		})
	}
}

// A deletion of an earlier life of the session ID, before the acceptance,
// is history: the wait goes on to the turn's end.
func TestAwaitTurnEarlierDeletionIgnored(t *testing.T) {
	js := setup(t)
	l := newTurnLog(t, js, "s1")
	l.append(eventlog.Entry{Kind: events.LogControl, Value: &events.SessionDeleted{Reason: events.DeleteRequested}})
	l.append(eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test", PermissionPolicy: events.PolicyAllowAll}})
	acc := l.accept("t1", nil)
	l.finish("t1", nil, "end_turn", false)
	wantFinished(t, receive(t, awaitAsync(t, t.Context(), js, "s1", acc)), "t1", "end_turn")
}

func TestAwaitTurnContextCancelled(t *testing.T) {
	js := setup(t)
	traced, o := turnwait.ObserveAwait(t.Context())
	l := newTurnLog(t, js, "s1")
	acc := l.accept("t1", nil)
	ctx, cancel := context.WithCancelCause(traced)
	subs := js.Conn().NumSubscriptions()
	ch := awaitAsync(t, ctx, js, "s1", acc)
	firstRead(t, o)
	cause := errors.New("client went away")
	cancel(cause)
	r := receive(t, ch)
	if !errors.Is(r.err, cause) {
		t.Fatalf("Await after cancel = %v, %v; want the cause %v", r.f, r.err, cause)
	}
	// Nothing is left subscribed.
	if n := js.Conn().NumSubscriptions(); n != subs {
		t.Errorf("%d subscriptions after the wait, want %d as before it", n, subs)
	}
}

func TestAwaitTurnInvalid(t *testing.T) {
	for name, tc := range map[string]struct {
		ns   events.Namespace
		sid  events.SessionID
		acc  *events.PromptAccepted
		code events.Code
	}{
		"nil acceptance": {"default", "s1", nil, events.CodeInvalidRequest},
		"bad namespace":  {"Bad.NS", "s1", &events.PromptAccepted{TurnID: "t", Sequence: 1}, events.CodeInvalidNamespace},
		"bad session":    {"default", "a.b", &events.PromptAccepted{TurnID: "t", Sequence: 1}, events.CodeInvalidSessionID},
		"no turn":        {"default", "s1", &events.PromptAccepted{Sequence: 1}, events.CodeInvalidPayload},
		"no sequence":    {"default", "s1", &events.PromptAccepted{TurnID: "t"}, events.CodeInvalidPayload},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := turnwait.Await(t.Context(), nil, tc.ns, tc.sid, tc.acc)
			if e := events.AsError(err); e == nil || e.Code != tc.code {
				t.Fatalf("Await = %v, want %s", err, tc.code)
			}
		})
	}
}

// The safety net: a stream that republishes nothing (as if every live
// message were dropped) still ends the wait, by reading the log again.
func TestAwaitTurnWithoutLiveDelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the re-read interval")
	}
	js := setup(t)
	cfg := streams.LogConfig(streams.Options{})
	cfg.RePublish = nil
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	ctx, o := turnwait.ObserveAwait(t.Context())
	l := newTurnLog(t, js, "s1")
	acc := l.accept("t1", nil)
	ch := awaitAsync(t, ctx, js, "s1", acc)
	firstRead(t, o)
	l.finish("t1", nil, "end_turn", false)
	wantFinished(t, receive(t, ch), "t1", "end_turn")
	wantFoundBy(t, o, "read")
}

// The TurnFinished lands while the waiter subscribes and reads: whichever
// way it comes, it is found once. Run with -count=20.
func TestAwaitTurnRaceWithFinish(t *testing.T) {
	js := setup(t)
	for i := range 40 {
		sid := events.SessionID("race" + strconv.Itoa(i))
		l := newTurnLog(t, js, sid)
		key := (*string)(nil)
		if i%2 == 1 {
			key = new("k" + strconv.Itoa(i))
		}
		acc := l.accept("t1", key)
		entry := finishEntry(sid, "t1", key, "end_turn")
		ch := awaitAsync(t, t.Context(), js, sid, acc)
		for range i % 8 { // move the append across the subscribe/fetch boundary
			runtime.Gosched()
		}
		if _, err := l.w.Append(t.Context(), entry); err != nil {
			t.Fatal(err)
		}
		wantFinished(t, receive(t, ch), "t1", "end_turn")
	}
}

// promptService answers prompt as the session service does: it accepts
// (or refuses) at once and finishes the turn in the log afterwards. The
// handler's appends outlive the caller's wait (which may see the finish
// before its append is acknowledged), so they use a context of their own,
// and the test's end waits for them.
func promptService(t *testing.T, js jetstream.JetStream, sid events.SessionID, refuse error, failure *events.AcpErrorResponse) {
	t.Helper()
	l := newTurnLog(t, js, sid)
	ctx := context.WithoutCancel(t.Context())
	var (
		mu   sync.Mutex
		w    = eventlog.NewWriter(js, "default", sid, l.w.Position(), "svc")
		n    int
		errs []error
	)
	handle := func(req micro.Request) error {
		if refuse != nil {
			return rpc.RespondError(req, refuse)
		}
		p, err := events.Decode[events.AcpPromptRequest](req.Data())
		if err != nil {
			return rpc.RespondError(req, err)
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		id := "t" + strconv.Itoa(n)
		hdr := nats.Header{events.HeaderTurnID: {id}, events.HeaderTurnAccepted: {"1"}}
		got, err := w.Append(ctx, eventlog.Entry{Kind: events.LogEvents, Header: hdr, Value: &events.AcpDurableSessionUpdate{
			Update: events.JSON(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}`),
		}})
		if err != nil {
			return err
		}
		if err := rpc.Respond(req, &events.PromptAccepted{SessionID: string(sid), TurnID: id, Sequence: got[0].Seq}); err != nil {
			return err
		}
		e := finishEntry(sid, id, p.IdempotencyKey, "end_turn")
		if failure == nil {
			// The turn's reply, named by its finish as the session
			// service names it.
			reply := events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"done"}}`)
			got, err := w.Append(ctx, eventlog.Entry{Kind: events.LogEvents, Header: nats.Header{events.HeaderTurnID: {id}},
				Value: &events.AcpDurableSessionUpdate{Update: reply}})
			if err != nil {
				return err
			}
			f := e.Value.(*events.TurnFinished)
			f.Message, f.MessageSeq = reply, got[0].Seq
		} else {
			f := e.Value.(*events.TurnFinished)
			f.Outcome, f.StopReason, f.Message, f.Error = events.OutcomeFailed, "", nil, failure
		}
		_, err = w.Append(ctx, e)
		return err
	}
	svc, err := micro.AddService(js.Conn(), micro.Config{Name: "fake-session", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = svc.Stop() // returns once no handler runs
		mu.Lock()
		defer mu.Unlock()
		for _, err := range errs {
			t.Errorf("prompt handler: %v", err)
		}
	})
	err = svc.AddEndpoint("prompt", micro.HandlerFunc(func(req micro.Request) {
		if err := handle(req); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}), micro.WithEndpointSubject(events.APISubject("default", events.OpPrompt)))
	if err != nil {
		t.Fatal(err)
	}
}

func TestPrompt(t *testing.T) {
	req := func() *events.AcpPromptRequest {
		return &events.AcpPromptRequest{SessionID: new("s1"), Content: events.JSON(`[{"type":"text","text":"hi"}]`)}
	}
	t.Run("completed", func(t *testing.T) {
		js := setup(t)
		promptService(t, js, "s1", nil, nil)
		resp, err := turnwait.Prompt(t.Context(), js, "default", req())
		if err != nil {
			t.Fatal(err)
		}
		if resp.SessionID != "s1" || resp.StopReason != "end_turn" || len(resp.Message) == 0 {
			t.Errorf("Prompt = %+v, want s1, end_turn and the message", resp)
		}
		// The message in its public form, as history shows it.
		for _, want := range []string{`"sessionId":"s1"`, `"type":"agent_message_chunk"`, `"text":"done"`} {
			if !strings.Contains(string(resp.Message), want) {
				t.Errorf("Prompt's message = %s, want it to hold %s", resp.Message, want)
			}
		}
	})
	t.Run("failed", func(t *testing.T) {
		js := setup(t)
		promptService(t, js, "s1", nil, events.ErrAdapterExited.Response())
		_, err := turnwait.Prompt(t.Context(), js, "default", req())
		if !errors.Is(err, events.ErrAdapterExited) {
			t.Fatalf("Prompt = %v, want %s", err, events.CodeAdapterExited)
		}
	})
	t.Run("refused", func(t *testing.T) {
		js := setup(t)
		promptService(t, js, "s1", events.ErrSessionBusy, nil)
		_, err := turnwait.Prompt(t.Context(), js, "default", req())
		if !errors.Is(err, events.ErrSessionBusy) {
			t.Fatalf("Prompt = %v, want %s", err, events.CodeSessionBusy)
		}
	})
	t.Run("no service", func(t *testing.T) {
		js := setup(t)
		_, err := turnwait.Prompt(t.Context(), js, "default", req())
		if !errors.Is(err, events.ErrUnavailable) {
			t.Fatalf("Prompt = %v, want %s", err, events.CodeUnavailable)
		}
	})
	t.Run("bad session", func(t *testing.T) {
		js := setup(t)
		_, err := turnwait.Prompt(t.Context(), js, "default", &events.AcpPromptRequest{SessionID: new("a.b")})
		if e := events.AsError(err); e.Code != events.CodeInvalidSessionID {
			t.Fatalf("Prompt = %v, want %s", err, events.CodeInvalidSessionID)
		}
	})
}

// BenchmarkAwait measures one wait: found by the first read (the turn
// ended before the call) or live (it ends while the caller waits).
func BenchmarkAwaitTurn(b *testing.B) {
	for _, when := range []string{"before", "during"} {
		b.Run("finished="+when, func(b *testing.B) {
			js := setup(b)
			l := newTurnLog(b, js, "bench")
			i := 0
			for b.Loop() {
				i++
				id := fmt.Sprint("t", i)
				acc := l.accept(id, nil)
				entry := finishEntry("bench", id, nil, "end_turn")
				if when == "before" {
					l.append(entry)
					if _, err := turnwait.Await(b.Context(), js, "default", "bench", acc); err != nil {
						b.Fatal(err)
					}
					continue
				}
				done := make(chan error, 1)
				go func() {
					_, err := turnwait.Await(b.Context(), js, "default", "bench", acc)
					done <- err
				}()
				l.append(entry)
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// An acceptance that does not say whether its turn is keyed (an older
// session service) is waited for on both subjects: a keyed finish is found
// by the read and live.
func TestAwaitTurnKeyedNotSaid(t *testing.T) {
	js := setup(t)
	for _, live := range []bool{false, true} {
		sid := events.SessionID(fmt.Sprint("unsaid-", live))
		l := newTurnLog(t, js, sid)
		key := "k1"
		acc := l.accept("t1", &key)
		acc.Keyed = nil
		if !live {
			l.finish("t1", &key, "end_turn", true)
		}
		ch := awaitAsync(t, t.Context(), js, sid, acc)
		if live {
			l.finish("t1", &key, "end_turn", true)
		}
		if r := receive(t, ch); r.err != nil || r.f.TurnID != "t1" {
			t.Errorf("live=%v: Await = %+v, %v; want turn t1's finish", live, r.f, r.err)
		}
	}
}

// A wait rides out a log that answers no direct get for a while, as while
// every node of a cluster restarts: the read finds no responders (status
// 503), which is transient like a timeout, and the wait goes on until its
// turn ends.
func TestAwaitTurnNoResponders(t *testing.T) {
	js := setup(t)
	ctx, o := turnwait.ObserveAwait(t.Context())
	l := newTurnLog(t, js, "s1")
	acc := l.accept("t1", nil)
	allowDirect := func(on bool) {
		t.Helper()
		s, err := js.Stream(t.Context(), events.StreamLog)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.AllowDirect = on
		if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	allowDirect(false)
	if _, err := eventlog.Forward(t.Context(), js, events.StreamLog, "acp.log.default.s1.ctl", 0, 10); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("Forward without direct gets = %v, want nats.ErrNoResponders", err)
	}
	ch := awaitAsync(t, ctx, js, "s1", acc)
	firstRead(t, o)
	allowDirect(true)
	l.finish("t1", nil, "end_turn", true)
	wantFinished(t, receive(t, ch), "t1", "end_turn")
}

// setup returns a JetStream context on a fresh embedded server with the
// contract's streams.
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
