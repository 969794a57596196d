package test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/client"
	"skein.dev/pkg/events"
)

// collect gathers what an iterator yields until its context ends.
type collect struct {
	mu   sync.Mutex
	seqs map[string][]uint64 // per session
	err  error
	done chan struct{}
}

func collectFrom(seq func(yield func(*events.AcpDurableHistoryEntry, error) bool)) *collect {
	c := &collect{seqs: map[string][]uint64{}, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for e, err := range seq {
			c.mu.Lock()
			if err != nil {
				c.err = err
				c.mu.Unlock()
				return
			}
			c.seqs[e.SessionID] = append(c.seqs[e.SessionID], e.Sequence)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collect) of(sid string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seqs[sid])
}

// The Go client drives a session over NATS as a service would: open,
// prompt (the end read from the log), a permission answered, history both
// ways a page of two at a time, the session list, and live subscriptions
// that see every durable event once, in order.
func TestGoClient(t *testing.T) {
	ns := natstest.Run(t)
	startStack(t, ns, t.TempDir())
	cl, err := client.New(natstest.Connect(t, ns), client.WithPageSize(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ask := events.PolicyAsk
	if err := cl.Open(ctx, "c1", events.AcpOpenSessionRequest{Agent: "test", PermissionPolicy: &ask}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Open(ctx, "c2", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	subCtx, stopSubs := context.WithCancel(ctx)
	follow := collectFrom(cl.Follow(subCtx))
	sub := collectFrom(cl.Subscribe(subCtx, "c1", 0))
	// Follow reads from when its iteration subscribes, in its own
	// goroutine here: it is live once it has seen a turn of c2's, and only
	// then does c1's first turn begin.
	if err := pollFor(ctx, "the follow to be live", func() bool {
		if _, err := cl.PromptText(ctx, "c2", "say ready"); err != nil {
			t.Fatalf("prompt c2: %v", err)
		}
		return len(follow.of("c2")) > 0
	}); err != nil {
		t.Fatal(err)
	}

	res, err := cl.PromptText(ctx, "c1", "chunks 3 x\nsay done")
	if err != nil || res.StopReason != "end_turn" || !strings.Contains(string(res.Message), "done") {
		t.Fatalf("prompt = %+v, %v", res, err)
	}
	asked := make(chan error, 1)
	go func() {
		_, err := cl.PromptText(ctx, "c1", "permission call_1 allow_once=yes,reject_once=no\nsay after", client.WithIdempotencyKey("k1"))
		asked <- err
	}()
	var requestID string
	if err := pollFor(ctx, "the permission request", func() bool {
		s, err := cl.Session(ctx, "c1")
		if err != nil {
			return false
		}
		st, err := events.ParseSessionState(s.State)
		if err != nil || len(st.Requests) == 0 {
			return false
		}
		requestID = st.Requests[0].RequestID
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if r, err := cl.RespondPermission(ctx, "c1", requestID, "yes"); err != nil || r.Status != events.PermissionAccepted {
		t.Fatalf("respond = %+v, %v", r, err)
	}
	if err := <-asked; err != nil {
		t.Fatalf("the prompt that asked: %v", err)
	}
	// The turn that asked has ended: a cancel finds nothing to cancel (or,
	// so soon after, says that turn completed first).
	if st, err := cl.Cancel(ctx, "c1"); err != nil || (st != events.CancelNoActivePrompt && st != events.OutcomeCompleted) {
		t.Errorf("cancel with no turn = %q, %v", st, err)
	}

	var forward, backward []uint64
	for e, err := range cl.History(ctx, "c1", 0) {
		if err != nil {
			t.Fatal(err)
		}
		forward = append(forward, e.Sequence)
	}
	for e, err := range cl.HistoryBackward(ctx, "c1", 0) {
		if err != nil {
			t.Fatal(err)
		}
		backward = append(backward, e.Sequence)
	}
	slices.Reverse(backward)
	if len(forward) < 6 || !slices.Equal(forward, backward) || !slices.IsSorted(forward) {
		t.Fatalf("history forward %v, backward reversed %v", forward, backward)
	}
	mid := forward[len(forward)/2]
	var after []uint64
	for e, err := range cl.History(ctx, "c1", mid) {
		if err != nil {
			t.Fatal(err)
		}
		after = append(after, e.Sequence)
	}
	if want := forward[len(forward)/2+1:]; !slices.Equal(after, want) {
		t.Errorf("history after %d = %v, want %v", mid, after, want)
	}

	if err := pollFor(ctx, "the subscriptions to see the whole history", func() bool {
		return slices.Equal(sub.of("c1"), forward) && slices.Equal(follow.of("c1"), forward)
	}); err != nil {
		t.Errorf("%v: subscribe %v, follow %v, want %v", err, sub.of("c1"), follow.of("c1"), forward)
	}
	resumed := collectFrom(cl.Subscribe(subCtx, "c1", mid))
	if err := pollFor(ctx, "a subscription from the middle", func() bool {
		return slices.Equal(resumed.of("c1"), forward[len(forward)/2+1:])
	}); err != nil {
		t.Errorf("%v: %v", err, resumed.of("c1"))
	}
	stopSubs()
	for _, c := range []*collect{follow, sub, resumed} {
		<-c.done
		if !errors.Is(c.err, context.Canceled) {
			t.Errorf("a subscription ended with %v, want the context's end", c.err)
		}
	}

	var listed []string
	for s, err := range cl.Sessions(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, s.SessionID)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, []string{"c1", "c2"}) {
		t.Errorf("sessions = %v, want c1 and c2", listed)
	}

	if _, err := cl.Session(ctx, "nope"); !errors.Is(err, events.ErrSessionNotFound) {
		t.Errorf("session nope = %v, want ErrSessionNotFound", err)
	}
	for _, err := range cl.History(ctx, "nope", 0) {
		if !errors.Is(err, events.ErrSessionNotFound) {
			t.Errorf("history of nope = %v, want ErrSessionNotFound", err)
		}
	}
	if _, err := client.New(natstest.Connect(t, ns), client.WithNamespace("bad namespace!")); err == nil {
		t.Error("a bad namespace was accepted")
	}
}

// goClientOn starts the whole stack on an embedded NATS, its runner's data
// in dataDir, and returns a Go client of it: the set-up of every test of
// pkg/client against the real services.
func goClientOn(t *testing.T, dataDir string, edits ...func(*stackConfig)) *client.Client {
	t.Helper()
	ns := natstest.Run(t)
	startStackTB(t, ns, dataDir, edits...)
	cl, err := client.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
