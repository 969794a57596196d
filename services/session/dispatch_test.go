package session_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/session"
)

// link is an in-process connection provider that the test can cut: cut
// closes every connection it made, as a NATS node's death does, and until
// mend it refuses new ones, so the client keeps reconnecting.
type link struct {
	ns *server.Server

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (l *link) InProcessConn() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return nil, errors.New("link cut")
	}
	c, err := l.ns.InProcessConn()
	if err == nil {
		l.conns = append(l.conns, c)
	}
	return c, err
}

func (l *link) sever() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

func (l *link) mend() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
}

// connectLinked opens a connection to the rig's server through a link of
// its own, which reconnects quickly and for ever.
func (r *rig) connectLinked() (*nats.Conn, *link) {
	r.t.Helper()
	l := &link{ns: r.ns}
	nc, err := nats.Connect("", nats.InProcessServer(l), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(nc.Close)
	return nc, l
}

// A dispatch that gets no answer, because the runner is off NATS for a
// moment (its node died, and it is reconnecting), does not fail the turn:
// the owner asks the runner whether it wrote the prompt until the runner
// answers, then sends the prompt again, and the turn completes with its
// output. The adapter is given the prompt once.
func TestUnansweredDispatchIsConfirmed(t *testing.T) {
	h := startRig(t, session.Config{})
	h.stopRunner()
	nc, l := h.connectLinked()
	h.startRunnerOn("r1", nc)
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if res, err := h.prompt(ctx, "s1", "", "say warm"); err != nil || !strings.Contains(string(res.Message), "warm") {
		t.Fatalf("first prompt = %+v, %v", res, err)
	}

	// The runner goes off NATS; once the server has dropped its
	// subscriptions, nothing answers its subjects.
	l.sever()
	status := events.RunnerSubject("r1", events.RunnerStatus)
	if err := testutil.Poll(ctx, "the runner's subscriptions gone", func() (bool, error) {
		_, err := h.nc.Request(status, nil, time.Second)
		return errors.Is(err, nats.ErrNoResponders), nil
	}); err != nil {
		t.Fatal(err)
	}
	// The owner's first question about the dispatch is the sign that the
	// dispatch went unanswered: then the runner comes back.
	asked, err := h.nc.SubscribeSync(status)
	if err != nil {
		t.Fatal(err)
	}
	flush(t, h.nc)
	done := h.promptAsync(ctx, "s1", "", "say confirmed")
	m, err := asked.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the owner never asked the runner about its dispatch: %v", err)
	}
	turnID := m.Header.Get(events.HeaderTurnID)
	_ = asked.Unsubscribe()
	l.mend()

	res := <-done
	if res.err != nil || !strings.Contains(string(res.res.Message), "confirmed") {
		t.Fatalf("prompt over a lost dispatch = %+v, %v; want it completed", res.res, res.err)
	}
	if got := testutil.Metric(t, h.reg, "acp_session_dispatch_confirms_total", "outcome", "resent"); got != 1 {
		t.Errorf("dispatches sent again = %v, want 1", got)
	}
	log, _ := h.readLog(t, "s1")
	if len(log.Turns) != 2 || log.Turns[1].Finish == nil || log.Turns[1].Finish.Outcome != events.OutcomeCompleted {
		t.Fatalf("turns %+v, want the second completed", log.Turns)
	}
	if log.Turns[1].ID != turnID {
		t.Errorf("the owner asked about turn %s, the prompt was turn %s", turnID, log.Turns[1].ID)
	}
	// The adapter answered the turn once: its prompt was written once.
	recs, err := eventlog.Forward(ctx, h.js, events.StreamIO, events.IOSessionSubjects("default", "s1"), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	answers := 0
	for _, rec := range recs {
		if v, err := events.Unmarshal(rec.Data); err == nil {
			if a, ok := v.(*events.AdapterPromptResult); ok && a.TurnID == turnID {
				answers++
			}
		}
	}
	if answers != 1 {
		t.Errorf("the adapter answered turn %s %d times, want once", turnID, answers)
	}
}
