package notify_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/webhook"
	"skein.dev/services/notify"
)

// subscribe registers a webhook with body, whose "URL" is replaced by a
// new receiver's, and returns the receiver and the webhook's ID.
func (r *rig) subscribe(body string) (*receiver, string) {
	r.t.Helper()
	rc := newReceiver(r.t, 0)
	status, out := r.do("POST", "/v1/webhooks", strings.ReplaceAll(body, "URL", rc.srv.URL))
	if status != http.StatusCreated {
		r.t.Fatalf("create: %d %s", status, out)
	}
	var c created
	if err := jsonUnmarshal(out, &c); err != nil {
		r.t.Fatal(err)
	}
	rc.mu.Lock()
	rc.secret = c.Secret
	rc.mu.Unlock()
	return rc, c.ID
}

// settled waits until the webhook's consumer has nothing pending and
// nothing unacknowledged: every notification it had was delivered, or
// dropped as it should be.
func (r *rig) settled(id string) {
	r.t.Helper()
	testutil.Eventually(r.t, "webhook "+id+" settled", func() bool {
		c, err := r.stack.JetStream().Consumer(r.t.Context(), events.StreamNotify, webhook.ConsumerName("default", id))
		if err != nil {
			return false
		}
		info, err := c.Info(r.t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 && info.Delivered.Stream > 0
	})
}

// TestWebhookWaiting: a permission request raises session.waiting at
// once; a webhook with a delay gets it only if the request is still open
// after the delay: the one answered at once is never sent to it, the one
// left open is.
func TestWebhookWaiting(t *testing.T) {
	r := newRig(t)
	now, _ := r.subscribe(`{"url":"URL","events":["session.waiting"]}`)
	late, lateID := r.subscribe(`{"url":"URL","events":["session.waiting"],"delay":"1s"}`)

	if status, body := r.do("PUT", "/v1/sessions/s1", `{"agent":"plain","permissionPolicy":"ask"}`); status != http.StatusOK {
		t.Fatalf("open: %d %s", status, body)
	}
	done := make(chan int, 1)
	go func() {
		// Two permission requests, one after the other: the first is
		// answered at once, the second left open.
		status, _ := r.do("POST", "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"permission call_1\npermission call_2"}]}`)
		done <- status
	}()
	first := now.await("the first request", countType(1, webhook.TypeSessionWaiting))
	req1 := first[0].Body.Data
	if req1.Kind != webhook.KindPermission || req1.RequestID == "" || req1.SessionID != "s1" {
		t.Fatalf("session.waiting data %+v", req1)
	}
	if status, body := r.do("POST", "/v1/sessions/s1/permissions/"+req1.RequestID, `{"optionId":"allow"}`); status != http.StatusOK {
		t.Fatalf("answer: %d %s", status, body)
	}
	ds := now.await("the second request", countType(2, webhook.TypeSessionWaiting))
	var req2 webhook.Data
	for _, d := range ds {
		if d.Body.Data.RequestID != req1.RequestID {
			req2 = d.Body.Data
		}
	}
	late.await("the open request, late", countType(1, webhook.TypeSessionWaiting))
	r.settled(lateID)
	got := late.deliveries()
	if len(got) != 1 || got[0].Body.Data.RequestID != req2.RequestID {
		t.Errorf("the delayed webhook got %+v, want the open request %s alone", got, req2.RequestID)
	}
	stored, err := time.Parse(time.RFC3339Nano, got[0].Body.Timestamp)
	if err != nil {
		t.Fatal(err)
	}
	if sent := time.Unix(mustInt(t, got[0].Timestamp), 0); sent.Before(stored.Add(time.Second).Truncate(time.Second)) {
		t.Errorf("the delayed request was sent at %s, stored at %s: before its delay", sent, stored)
	}
	if status, body := r.do("POST", "/v1/sessions/s1/permissions/"+req2.RequestID, `{"optionId":"allow"}`); status != http.StatusOK {
		t.Fatalf("answer: %d %s", status, body)
	}
	if status := <-done; status != http.StatusOK {
		t.Errorf("prompt: %d", status)
	}
}

// TestWebhookStallAndBudget: a TurnStall that says stalled raises
// session.stalled (one that says the agent spoke again raises nothing),
// and a turn that ended for its budget raises budget.exhausted alone.
// The records are stored as the session service stores them.
func TestWebhookStallAndBudget(t *testing.T) {
	r := newRig(t)
	rc, _ := r.subscribe(`{"url":"URL","events":["session.stalled","budget.exhausted","turn.failed","turn.finished"]}`)
	// The notification stream, as another service reads it.
	sub, err := r.stack.Conn().SubscribeSync("acp.notify.default.>")
	if err != nil {
		t.Fatal(err)
	}
	store := func(v events.Variant) {
		t.Helper()
		data, err := events.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: events.LogSubject("default", "s9", events.LogControl), Data: data, Header: nats.Header{}}
		msg.Header.Set(events.HeaderRecord, v.VariantName())
		msg.Header.Set(events.HeaderTurnID, "t1")
		if _, err := r.stack.JetStream().PublishMsg(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
	}
	store(&events.TurnStall{Stalled: true, QuietMs: 90_000})
	store(&events.TurnStall{QuietMs: 95_000})
	store(&events.TurnFinished{TurnID: "t1", Outcome: "budget_exhausted", StopReason: "end_turn"})
	ds := rc.await("session.stalled and budget.exhausted", func(ds []delivery) bool {
		return len(ofType(ds, webhook.TypeSessionStalled)) == 1 && len(ofType(ds, webhook.TypeBudgetExhausted)) == 1
	})
	for _, d := range ofType(ds, webhook.TypeSessionStalled) {
		if d.Body.Data.QuietMs != 90_000 || d.Body.Data.SessionID != "s9" || d.Body.Data.TurnID != "t1" {
			t.Errorf("session.stalled data %+v", d.Body.Data)
		}
	}
	// What another service reads on acp.notify.<ns>.<type>: the same two,
	// and nothing for the stall's end or as turn.finished/turn.failed.
	var subjects []string
	for range 2 {
		m, err := sub.NextMsg(testutil.PollTimeout)
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, m.Subject)
		if m.Header.Get(jetstream.MsgIDHeader) == "" {
			t.Errorf("%s carries no Nats-Msg-Id", m.Subject)
		}
	}
	if want := []string{"acp.notify.default.session.stalled", "acp.notify.default.budget.exhausted"}; strings.Join(subjects, " ") != strings.Join(want, " ") {
		t.Errorf("subjects %v, want %v", subjects, want)
	}
	// A marker after them: once it is notified, nothing else was.
	store(&events.TurnFinished{TurnID: "t2", Outcome: events.OutcomeCompleted, StopReason: "end_turn"})
	m, err := sub.NextMsg(testutil.PollTimeout)
	if err != nil || m.Subject != "acp.notify.default.turn.finished" {
		t.Errorf("after the marker: %v %v", m, err)
	}
}

// TestWebhookDialRefused: an address the notify service may not reach is
// refused where it connects, whatever the gateway checked: a webhook
// stored for 127.0.0.1 (as if its name had resolved elsewhere at
// registration: DNS rebinding) reaches nothing, and its attempts say so.
func TestWebhookDialRefused(t *testing.T) {
	r := newRig(t, func(c *notify.Config) { c.Allow = nil })
	rc := newReceiver(t, 0)
	c := r.create(rc.srv.URL, webhook.TypeTurnFinished)
	r.prompt("s1", "say hi", http.StatusOK)
	testutil.Eventually(t, "a refused attempt listed", func() bool {
		for _, a := range r.attempts(c.ID) {
			if a.Status == 0 && strings.Contains(a.Error, "not allowed") {
				return true
			}
		}
		return false
	})
	if ds := rc.deliveries(); len(ds) != 0 {
		t.Errorf("the receiver got %d requests", len(ds))
	}
}

// TestWebhookWaitingInput: an agent's input request (elicitation) raises
// session.waiting of kind input, which its answer then closes.
func TestWebhookWaitingInput(t *testing.T) {
	r := newRig(t)
	rc, _ := r.subscribe(`{"url":"URL","events":["session.waiting","turn.finished"]}`)
	if status, body := r.do("PUT", "/v1/sessions/s1", `{"agent":"plain"}`); status != http.StatusOK {
		t.Fatalf("open: %d %s", status, body)
	}
	done := make(chan int, 1)
	go func() {
		status, _ := r.do("POST", "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"elicit \"Your name?\" {\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}}}\nsay after"}]}`)
		done <- status
	}()
	ds := rc.await("the input request", countType(1, webhook.TypeSessionWaiting))
	d := ds[0].Body.Data
	if d.Kind != webhook.KindInput || d.RequestID == "" || d.SessionID != "s1" {
		t.Fatalf("session.waiting data %+v", d)
	}
	if status, body := r.do("POST", "/v1/sessions/s1/inputs/"+d.RequestID, `{"action":"decline"}`); status != http.StatusOK {
		t.Fatalf("answer: %d %s", status, body)
	}
	if status := <-done; status != http.StatusOK {
		t.Errorf("prompt: %d", status)
	}
	rc.await("the turn's end", countType(1, webhook.TypeTurnFinished))
}
