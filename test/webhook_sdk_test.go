package test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events/webhook"
)

// TestWebhookStandardLibrary: a webhook delivery, from a turn's end through
// the notify service to a receiver, verifies with the Standard Webhooks
// reference library (standardwebhooks on npm), a verifier Skein did not
// write; and the same delivery with its body changed does not.
func TestWebhookStandardLibrary(t *testing.T) {
	dir := acpSDKDir(t)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks", "package.json")); err != nil {
		t.Skipf("the Standard Webhooks library is not installed in %s (%v): run `make acp-sdk`", dir, err)
	}
	st := startStackTB(t, natstest.Run(t), testutil.TempDir(t), func(c *stackConfig) {
		c.Gateway.Auth.Tokens = devTokens(consoleToken)
		c.Gateway.WebhookAllow = webhook.Loopback
		c.Notify.Allow = webhook.Loopback
	})
	type got struct {
		headers map[string]string
		body    string
	}
	var mu sync.Mutex
	var deliveries []got
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		deliveries = append(deliveries, got{map[string]string{
			"webhook-id": r.Header.Get("webhook-id"), "webhook-timestamp": r.Header.Get("webhook-timestamp"),
			"webhook-signature": r.Header.Get("webhook-signature"),
		}, string(b)})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)

	code, body := doAs(t, http.MethodPost, st.url+"/v1/webhooks", consoleToken, `{"url":"`+rc.URL+`/hook","events":["turn.finished"]}`)
	var created struct{ Secret string }
	if code != http.StatusCreated || json.Unmarshal(body, &created) != nil || !strings.HasPrefix(created.Secret, "whsec_") {
		t.Fatalf("create the webhook: %d %s", code, body)
	}
	if code, body := doAs(t, http.MethodPut, st.url+"/v1/sessions/wh", consoleToken, `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("open: %d %s", code, body)
	}
	if code, body := doAs(t, http.MethodPost, st.url+"/v1/sessions/wh/prompt", consoleToken, `{"content":[{"type":"text","text":"say hi"}]}`); code != http.StatusOK {
		t.Fatalf("prompt: %d %s", code, body)
	}
	var d got
	testutil.Eventually(t, "the delivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(deliveries) > 0 {
			d = deliveries[0]
		}
		return len(deliveries) > 0
	})

	verify := func(body string) (string, error) {
		in, _ := json.Marshal(map[string]any{"secret": created.Secret, "headers": d.headers, "body": body})
		cmd := exec.CommandContext(t.Context(), "node", filepath.Join("testdata", "acp-sdk", "verify-webhook.mjs"), dir)
		cmd.Stdin = strings.NewReader(string(in))
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := verify(d.body); err != nil || out != "turn.finished" {
		t.Errorf("the reference library on the delivery = %v: %s; want it verified, turn.finished", err, out)
	}
	if out, err := verify(strings.Replace(d.body, "turn.finished", "turn.failed", 1)); err == nil {
		t.Errorf("the reference library verified a changed body: %s", out)
	}
}
