package notify_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events/webhook"
	"skein.dev/services/gateway"
	"skein.dev/services/notify"
)

// rig is a stack (runner, session, history) with a gateway and a notify
// service in front, each on its own connection, and receivers.
type rig struct {
	t     testing.TB
	stack *stacktest.Stack
	url   string // the gateway's
	token string // the bearer token do sends
	cfg   notify.Config
	stop  func() // the notify service's
}

// The rig's tokens: a user's and a reader's of the default namespace, and
// a user's of namespace "other".
const (
	tokenUser  = "user-token"
	tokenRead  = "read-token"
	tokenOther = "other-token"
)

func newRig(t testing.TB, edit ...func(*notify.Config)) *rig {
	return newRigGateway(t, webhook.Loopback, edit...)
}

// newRigGateway is newRig with a gateway that allows webhooks to reach
// allow.
func newRigGateway(t testing.TB, allow []netip.Prefix, edit ...func(*notify.Config)) *rig {
	t.Helper()
	return newRigStack(t, allow, []stacktest.Option{stacktest.Uncounted()}, edit...)
}

// newRigStack is newRigGateway on a stack started with opts.
func newRigStack(t testing.TB, allow []netip.Prefix, opts []stacktest.Option, edit ...func(*notify.Config)) *rig {
	t.Helper()
	s := stacktest.Start(t, opts...)
	gcfg := gateway.DefaultConfig()
	gcfg.Addr = "127.0.0.1:0"
	gcfg.WebhookAllow = allow
	gcfg.Auth.Tokens = []gateway.Token{
		{SHA256: gateway.HashToken(tokenUser), Principal: "u", Namespaces: []string{"default"}, Role: gateway.RoleUser},
		{SHA256: gateway.HashToken(tokenRead), Principal: "r", Namespaces: []string{"default"}, Role: gateway.RoleRead},
		{SHA256: gateway.HashToken(tokenOther), Principal: "o", Namespaces: []string{"other"}, Role: gateway.RoleUser},
	}
	gw, err := gateway.New(gcfg, stacktest.Logger(t), s.Connect(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	stacktest.RunService(t, "gateway", gw)
	r := &rig{t: t, stack: s, url: "http://" + gw.Addr(), token: tokenUser}
	r.cfg = notify.Config{Allow: webhook.Loopback, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Timeout: 5 * time.Second}
	for _, e := range edit {
		e(&r.cfg)
	}
	r.startNotify()
	return r
}

func (r *rig) startNotify() {
	r.t.Helper()
	svc, err := notify.New(r.cfg, stacktest.Logger(r.t), r.stack.Connect(), prometheus.NewRegistry())
	if err != nil {
		r.t.Fatal(err)
	}
	r.stop = stacktest.RunService(r.t, "notify", svc)
}

// do sends a request to the gateway and returns its status and body.
func (r *rig) do(method, path, body string) (int, []byte) {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.t.Context(), method, r.url+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type created struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

func (r *rig) create(url string, events ...string) created {
	r.t.Helper()
	evs, _ := json.Marshal(events)
	status, body := r.do("POST", "/v1/webhooks", `{"url":"`+url+`","events":`+string(evs)+`}`)
	if status != http.StatusCreated {
		r.t.Fatalf("create webhook: %d %s", status, body)
	}
	var c created
	if err := json.Unmarshal(body, &c); err != nil {
		r.t.Fatal(err)
	}
	return c
}

// prompt opens session sid (idempotent) and runs one prompt to its end,
// which must answer want.
func (r *rig) prompt(sid, script string, want int) {
	r.t.Helper()
	if status, body := r.do("PUT", "/v1/sessions/"+sid, `{"agent":"plain"}`); status != http.StatusOK {
		r.t.Fatalf("open: %d %s", status, body)
	}
	text, _ := json.Marshal(script)
	if status, body := r.do("POST", "/v1/sessions/"+sid+"/prompt", `{"content":[{"type":"text","text":`+string(text)+`}]}`); status != want {
		r.t.Fatalf("prompt: %d %s", status, body)
	}
}

// delivery is one request a receiver got.
type delivery struct {
	At                       time.Time // when it arrived
	ID, Timestamp, Signature string
	Body                     webhook.Body
	Raw                      []byte
}

// receiver is a webhook receiver that checks every signature itself (the
// Standard Webhooks scheme, written out here, not webhook.Sign) and fails
// the first failFirst requests with 503.
type receiver struct {
	t         testing.TB
	secret    string
	mu        sync.Mutex
	got       []delivery
	failFirst int
	arrived   chan struct{}
	srv       *httptest.Server
}

func newReceiver(t testing.TB, failFirst int) *receiver {
	rc := &receiver{t: t, failFirst: failFirst, arrived: make(chan struct{}, 1000)}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	d := delivery{At: time.Now(), ID: r.Header.Get("webhook-id"), Timestamp: r.Header.Get("webhook-timestamp"), Signature: r.Header.Get("webhook-signature"), Raw: raw}
	if err := json.Unmarshal(raw, &d.Body); err != nil {
		rc.t.Errorf("body %q: %v", raw, err)
	}
	rc.mu.Lock()
	secret := rc.secret
	rc.got = append(rc.got, d)
	fail := len(rc.got) <= rc.failFirst
	rc.mu.Unlock()
	if err := verify(secret, d); err != nil {
		rc.t.Errorf("delivery %s: %v", d.ID, err)
	}
	if fail {
		w.WriteHeader(http.StatusServiceUnavailable)
	} else {
		w.WriteHeader(http.StatusNoContent)
	}
	rc.arrived <- struct{}{}
}

// verify checks a delivery as a receiver following the Standard Webhooks
// specification does.
func verify(secret string, d delivery) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		return fmt.Errorf("secret %q is not whsec_<base64>", secret)
	}
	ts, err := strconv.ParseInt(d.Timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q", d.Timestamp)
	}
	if age := time.Since(time.Unix(ts, 0)); age > 5*time.Minute || age < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %d is %s away", ts, age)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.", d.ID, d.Timestamp)
	mac.Write(d.Raw)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for sig := range strings.FieldsSeq(d.Signature) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("webhook-signature %q, want %q", d.Signature, want)
}

// deliveries returns what rc got so far.
func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

// await waits until rc has got deliveries that ok accepts.
func (rc *receiver) await(what string, ok func([]delivery) bool) []delivery {
	rc.t.Helper()
	deadline := time.After(testutil.PollTimeout)
	for {
		if ds := rc.deliveries(); ok(ds) {
			return ds
		}
		select {
		case <-rc.arrived:
		case <-deadline:
			rc.t.Fatalf("receiver: no %s; got %d deliveries: %+v", what, len(rc.deliveries()), rc.deliveries())
		}
	}
}

// ofType returns the distinct notifications (by webhook-id) of type typ
// that were answered 2xx or are the last attempts: what a receiver that
// dedupes by webhook-id keeps.
func ofType(ds []delivery, typ string) map[string]delivery {
	out := map[string]delivery{}
	for _, d := range ds {
		if d.Body.Type == typ {
			out[d.ID] = d
		}
	}
	return out
}

func countType(n int, typ string) func([]delivery) bool {
	return func(ds []delivery) bool { return len(ofType(ds, typ)) >= n }
}

// TestWebhookTurnEvents: a turn that ends and one that fails reach the
// webhook that asked for them, signed, with what they carry; a receiver
// failing its first attempts gets them again, with the same webhook-id,
// and the deliveries listing shows the attempts with their status codes.
func TestWebhookTurnEvents(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 2)
	c := r.create(rc.srv.URL+"/hook", webhook.TypeTurnFinished, webhook.TypeTurnFailed)
	rc.mu.Lock()
	rc.secret = c.Secret
	rc.mu.Unlock()
	if !strings.HasPrefix(c.Secret, "whsec_") || !webhook.ValidID(c.ID) {
		t.Fatalf("created %+v", c)
	}

	r.prompt("s1", "say hi\nstop end_turn", http.StatusOK)
	r.prompt("s1", "error -32000 boom", http.StatusBadGateway)
	ds := rc.await("turn.finished and turn.failed", func(ds []delivery) bool {
		return len(ofType(ds, webhook.TypeTurnFinished)) == 1 && len(ofType(ds, webhook.TypeTurnFailed)) == 1 && len(ds) >= 4
	})
	for _, d := range ofType(ds, webhook.TypeTurnFinished) {
		if d.Body.Data.SessionID != "s1" || d.Body.Data.StopReason != "end_turn" || d.Body.Data.Outcome != "completed" {
			t.Errorf("turn.finished data %+v", d.Body.Data)
		}
	}
	for _, d := range ofType(ds, webhook.TypeTurnFailed) {
		if d.Body.Data.SessionID != "s1" || d.Body.Data.ErrorCode == "" {
			t.Errorf("turn.failed data %+v", d.Body.Data)
		}
	}
	// The first two attempts failed: what they carried was tried again
	// under the same webhook-id, with the same body.
	checkRetries(t, ds, 2)

	// The listing shows the attempts, the newest first, with their codes.
	var list struct {
		Deliveries []webhook.Attempt `json:"deliveries"`
	}
	testutil.Eventually(t, "four attempts listed", func() bool {
		status, body := r.do("GET", "/v1/webhooks/"+c.ID+"/deliveries", "")
		if status != http.StatusOK {
			t.Fatalf("deliveries: %d %s", status, body)
		}
		list.Deliveries = nil
		_ = json.Unmarshal(body, &list)
		return len(list.Deliveries) >= 4
	})
	codes := map[int]int{}
	for _, a := range list.Deliveries {
		codes[a.Status]++
	}
	if codes[503] != 2 || codes[204] < 2 {
		t.Errorf("attempts' status codes %v, want two 503 and 204s: %+v", codes, list.Deliveries)
	}
}

// checkRetries checks that ds holds at least retried attempts more than
// distinct webhook-ids, and that every attempt of one webhook-id carried
// the same body.
func checkRetries(t *testing.T, ds []delivery, retried int) {
	t.Helper()
	byID := map[string][]byte{}
	for _, d := range ds {
		if first, ok := byID[d.ID]; ok && !bytes.Equal(first, d.Raw) {
			t.Errorf("attempts of %s differ: %s / %s", d.ID, first, d.Raw)
		}
		byID[d.ID] = d.Raw
	}
	if len(ds)-len(byID) < retried {
		t.Errorf("%d attempts of %d notifications, want at least %d retries", len(ds), len(byID), retried)
	}
}
