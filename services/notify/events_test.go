package notify_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/stacktest"
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

// TestWebhookStallAndBudget: a turn whose agent goes silent past
// session.stall-after raises session.stalled (its end of the stall raises
// nothing), and a turn that crosses its session's spending cap raises
// budget.exhausted alone, not turn.failed or turn.finished: both on the
// real session service, and on acp.notify.<ns>.<type> for other services.
func TestWebhookStallAndBudget(t *testing.T) {
	r := newRigStack(t, webhook.Loopback, []stacktest.Option{stacktest.Uncounted(),
		stacktest.WithStallAfter(200*time.Millisecond, 50*time.Millisecond)})
	rc, _ := r.subscribe(`{"url":"URL","events":["session.stalled","budget.exhausted","turn.failed","turn.finished"]}`)
	// The notification stream, as another service reads it.
	sub, err := r.stack.Conn().SubscribeSync("acp.notify.default.>")
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		m, err := sub.NextMsg(testutil.PollTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(jetstream.MsgIDHeader) == "" {
			t.Errorf("%s carries no Nats-Msg-Id", m.Subject)
		}
		return m.Subject
	}

	// A silent agent: paused until its stall was notified.
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.prompt("s9", "pause quiet\nsay back", http.StatusOK)
	}()
	r.stack.Paused("quiet")
	ds := rc.await("session.stalled", func(ds []delivery) bool { return len(ofType(ds, webhook.TypeSessionStalled)) == 1 })
	for _, d := range ofType(ds, webhook.TypeSessionStalled) {
		if d.Body.Data.QuietMs < 200 || d.Body.Data.SessionID != "s9" || d.Body.Data.TurnID == "" {
			t.Errorf("session.stalled data %+v", d.Body.Data)
		}
	}
	r.stack.Release("quiet")
	<-done
	if got := []string{next(), next()}; strings.Join(got, " ") != "acp.notify.default.session.stalled acp.notify.default.turn.finished" {
		t.Errorf("subjects %v, want the stall, then the turn's end (nothing for the stall's end)", got)
	}

	// A capped session whose agent's cost crosses the cap.
	if status, body := r.do("PUT", "/v1/sessions/capped", `{"agent":"plain","budget":{"maxCost":{"amount":1,"currency":"USD"}}}`); status != http.StatusOK {
		t.Fatalf("open: %d %s", status, body)
	}
	r.prompt("capped", "cost 1 2 1.5 USD\nsay too dear", http.StatusPaymentRequired)
	ds = rc.await("budget.exhausted", func(ds []delivery) bool { return len(ofType(ds, webhook.TypeBudgetExhausted)) == 1 })
	for _, d := range ofType(ds, webhook.TypeBudgetExhausted) {
		if d.Body.Data.SessionID != "capped" || d.Body.Data.TurnID == "" {
			t.Errorf("budget.exhausted data %+v", d.Body.Data)
		}
	}
	if got := next(); got != "acp.notify.default.budget.exhausted" {
		t.Errorf("after the capped turn: %s, want budget.exhausted alone", got)
	}
	// A marker after it: once it is notified, nothing else was.
	r.prompt("s9", "say marker", http.StatusOK)
	if got := next(); got != "acp.notify.default.turn.finished" {
		t.Errorf("after the marker: %s", got)
	}
	if n := len(ofType(rc.deliveries(), webhook.TypeTurnFailed)); n != 0 {
		t.Errorf("%d turn.failed for the capped turn, want none", n)
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
