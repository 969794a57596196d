package notify_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/webhook"
)

// as returns the rig sending token.
func (r *rig) as(token string) *rig {
	c := *r
	c.token = token
	return &c
}

// attempts returns the webhook's listed attempts.
func (r *rig) attempts(id string) []webhook.Attempt {
	r.t.Helper()
	status, body := r.do("GET", "/v1/webhooks/"+id+"/deliveries", "")
	if status != http.StatusOK {
		r.t.Fatalf("deliveries: %d %s", status, body)
	}
	var list struct {
		Deliveries []webhook.Attempt `json:"deliveries"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		r.t.Fatal(err)
	}
	return list.Deliveries
}

// relisten serves rc again on addr, after rc.srv was closed there.
func (rc *receiver) relisten(t *testing.T, addr string) {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(rc.serve)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestWebhookRestart: a receiver that goes down, and a notify service
// stopped while turns end, lose nothing: once both are back, every turn's
// notification arrives (at least once, each retry with the same
// webhook-id and body), signed.
func TestWebhookRestart(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 0)
	addr := rc.srv.Listener.Addr().String()
	c := r.create(rc.srv.URL, webhook.TypeTurnFinished)
	rc.mu.Lock()
	rc.secret = c.Secret
	rc.mu.Unlock()

	r.prompt("s1", "say one", http.StatusOK)
	rc.await("the first turn.finished", countType(1, webhook.TypeTurnFinished))

	// The receiver goes down: the next turn's attempts fail, connection
	// refused, and are listed so.
	rc.srv.Close()
	r.prompt("s1", "say two", http.StatusOK)
	testutil.Eventually(t, "a failed attempt listed", func() bool {
		for _, a := range r.attempts(c.ID) {
			if a.Status == 0 && a.Error != "" {
				return true
			}
		}
		return false
	})

	// The notify service stops; a third turn ends while it is down.
	r.stop()
	r.prompt("s2", "say three", http.StatusOK)

	// Both come back: every turn's end arrives.
	rc.relisten(t, addr)
	r.startNotify()
	ds := rc.await("three turn.finished", countType(3, webhook.TypeTurnFinished))
	sessions := map[string]int{}
	for _, d := range ofType(ds, webhook.TypeTurnFinished) {
		sessions[d.Body.Data.SessionID]++
		if d.ID != webhook.EventID(d.Body.Data.Sequence) {
			t.Errorf("webhook-id %s of the record at %d", d.ID, d.Body.Data.Sequence)
		}
	}
	if sessions["s1"] != 2 || sessions["s2"] != 1 {
		t.Errorf("turn.finished by session %v, want s1:2 s2:1", sessions)
	}
	checkRetries(t, ds, 0)
}

// TestWebhookBadInput: every refusal is a typed error, 400
// invalid_request unless said otherwise, and writes nothing.
func TestWebhookBadInput(t *testing.T) {
	r := newRigGateway(t, nil)
	for _, tc := range []struct{ name, body, code string }{
		{"malformed JSON", `{"url":`, "invalid_request"},
		{"not an object", `[]`, "invalid_request"},
		{"unknown field", `{"url":"https://example.com/h","events":["turn.finished"],"secret":"x"}`, "invalid_request"},
		{"trailing data", `{"url":"https://example.com/h","events":["turn.finished"]} {}`, "invalid_request"},
		{"no events", `{"url":"https://example.com/h","events":[]}`, "invalid_request"},
		{"unknown event type", `{"url":"https://example.com/h","events":["turn.started"]}`, "invalid_request"},
		{"event twice", `{"url":"https://example.com/h","events":["turn.failed","turn.failed"]}`, "invalid_request"},
		{"delay not a duration", `{"url":"https://example.com/h","events":["session.waiting"],"delay":"soon"}`, "invalid_request"},
		{"delay zero", `{"url":"https://example.com/h","events":["session.waiting"],"delay":"0s"}`, "invalid_request"},
		{"delay over a day", `{"url":"https://example.com/h","events":["session.waiting"],"delay":"25h"}`, "invalid_request"},
		{"delay without session.waiting", `{"url":"https://example.com/h","events":["turn.finished"],"delay":"1m"}`, "invalid_request"},
		{"scheme", `{"url":"ftp://example.com/h","events":["turn.finished"]}`, "invalid_request"},
		{"credentials", `{"url":"https://u:p@example.com/h","events":["turn.finished"]}`, "invalid_request"},
		{"loopback", `{"url":"http://127.0.0.1:9/h","events":["turn.finished"]}`, "invalid_request"},
		{"loopback by name", `{"url":"http://localhost:9/h","events":["turn.finished"]}`, "invalid_request"},
		{"IPv6 loopback", `{"url":"http://[::1]:9/h","events":["turn.finished"]}`, "invalid_request"},
		{"private", `{"url":"http://10.1.2.3/h","events":["turn.finished"]}`, "invalid_request"},
		{"cloud metadata", `{"url":"http://169.254.169.254/latest/meta-data","events":["turn.finished"]}`, "invalid_request"},
		{"unique-local", `{"url":"http://[fd00:ec2::254]/h","events":["turn.finished"]}`, "invalid_request"},
		{"IPv4-mapped loopback", `{"url":"http://[::ffff:127.0.0.1]/h","events":["turn.finished"]}`, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := r.do("POST", "/v1/webhooks", tc.body)
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			_ = json.Unmarshal(body, &e)
			if status != http.StatusBadRequest || e.Error.Code != tc.code {
				t.Errorf("%d %s, want 400 %s", status, body, tc.code)
			}
		})
	}
	// A read token may not register, list or see attempts: webhooks need
	// a write token.
	for _, req := range [][2]string{{"POST", "/v1/webhooks"}, {"GET", "/v1/webhooks"}, {"GET", "/v1/webhooks/wh_abc/deliveries"}, {"DELETE", "/v1/webhooks/wh_abc"}} {
		if status, body := r.as(tokenRead).do(req[0], req[1], `{"url":"https://example.com/h","events":["turn.finished"]}`); status != http.StatusForbidden {
			t.Errorf("%s %s as a reader: %d %s, want 403", req[0], req[1], status, body)
		}
	}
	for _, path := range []string{"/v1/webhooks/wh_abc", "/v1/webhooks/nope"} {
		if status, body := r.do("DELETE", path, ""); status != http.StatusNotFound {
			t.Errorf("DELETE %s: %d %s, want 404", path, status, body)
		}
	}
	// Nothing was written.
	kv, err := r.stack.JetStream().KeyValue(t.Context(), events.BucketWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.ListKeys(t.Context()); err != nil {
		t.Fatal(err)
	} else {
		for k := range keys.Keys() {
			t.Errorf("a refused webhook was stored: %s", k)
		}
	}
}

// TestWebhookNamespaces: a webhook belongs to its namespace: another's
// token neither lists it nor deletes it; its own lists it without the
// secret and deletes it.
func TestWebhookNamespaces(t *testing.T) {
	r := newRig(t)
	c := r.create("http://127.0.0.1:9/h", webhook.TypeTurnFinished)
	if status, body := r.as(tokenOther).do("GET", "/v1/webhooks", ""); status != http.StatusOK || string(body) != `{"webhooks":[]}` {
		t.Errorf("another namespace's list: %d %s", status, body)
	}
	if status, _ := r.as(tokenOther).do("DELETE", "/v1/webhooks/"+c.ID, ""); status != http.StatusNotFound {
		t.Errorf("another namespace's delete: %d, want 404", status)
	}
	status, body := r.do("GET", "/v1/webhooks", "")
	var list struct{ Webhooks []map[string]any }
	if err := json.Unmarshal(body, &list); status != http.StatusOK || err != nil || len(list.Webhooks) != 1 || list.Webhooks[0]["id"] != c.ID {
		t.Fatalf("list: %d %s", status, body)
	}
	if _, ok := list.Webhooks[0]["secret"]; ok {
		t.Errorf("the list shows the secret: %s", body)
	}
	if status, body := r.do("DELETE", "/v1/webhooks/"+c.ID, ""); status != http.StatusOK {
		t.Errorf("delete: %d %s", status, body)
	}
	if status, body := r.do("GET", "/v1/webhooks", ""); status != http.StatusOK || string(body) != `{"webhooks":[]}` {
		t.Errorf("list after delete: %d %s", status, body)
	}
	// The notify service deletes the webhook's consumer.
	testutil.Eventually(t, "the deleted webhook's consumer gone", func() bool {
		_, err := r.stack.JetStream().Consumer(t.Context(), events.StreamNotify, webhook.ConsumerName("default", c.ID))
		return err != nil
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
