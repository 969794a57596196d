package gateway_test

import (
	"context"
	"net/http"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// Over the request rate, or over the streams held open, a request is 429
// rate_limited with Retry-After; the probes are never limited.
func TestRateLimited(t *testing.T) {
	e := newEnv(t, withConfig(func(c *gateway.Config) { c.RateLimit, c.RateBurst, c.MaxStreams = 0.001, 3, 1 }))
	e.backend.Open("s1", "demo")
	// One stream held open, counted against the burst too.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/v1/sessions/s1/events?after=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := e.client.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("the stream = %v, %v", stream, err)
	}
	defer stream.Body.Close()
	r := e.do(http.MethodGet, "/v1/sessions/s1/events?after=0", "")
	wantError(t, r, http.StatusTooManyRequests, events.CodeRateLimited)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("a second stream's Retry-After = %q, want 1", got)
	}
	for range 2 {
		if r := e.do(http.MethodGet, "/v1/sessions/s1", ""); r.status != http.StatusOK {
			t.Fatalf("a request within the burst = %d %s", r.status, r.body)
		}
	}
	r = e.do(http.MethodGet, "/v1/sessions/s1", "")
	wantError(t, r, http.StatusTooManyRequests, events.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Error("a request past the rate has no Retry-After")
	}
	for range 5 {
		if r := e.do(http.MethodGet, "/healthz", ""); r.status != http.StatusOK {
			t.Fatalf("/healthz = %d, want 200: probes are not limited", r.status)
		}
	}
}
