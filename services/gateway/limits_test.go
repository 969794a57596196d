package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// countingReader is an endless body that counts what was read of it.
type countingReader struct{ n atomic.Int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// A prompt's body may be as large as MaxPromptBodyBytes, any other route's
// as large as MaxBodyBytes; a larger one is payload_too_large, read no
// further than the cap.
func TestBodyCaps(t *testing.T) {
	e := newEnv(t, withConfig(func(c *gateway.Config) { c.MaxBodyBytes, c.MaxPromptBodyBytes = 2<<10, 8<<10 }))
	e.backend.Open("s1", "demo")
	text := strings.Repeat("x", 4<<10) // over the cap of other routes, under the prompt's
	if r := e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"`+text+`"}]}`); r.status != http.StatusOK {
		t.Errorf("a 4 KiB prompt = %d %s, want 200", r.status, r.body)
	}
	wantError(t, e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"`+strings.Repeat("x", 9<<10)+`"}]}`),
		http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
	wantError(t, e.do(http.MethodPut, "/v1/sessions/s2", `{"agent":"demo","additionalInstructions":"`+text+`"}`),
		http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
	wantError(t, e.do(http.MethodPatch, "/v1/sessions/s1", `{"title":"`+text+`"}`),
		http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)

	// An endless body: refused, and not read to its end.
	body := &countingReader{}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/v1/sessions/s1/prompt", io.LimitReader(body, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("an endless prompt = %d, want 413", resp.StatusCode)
		}
	} // else the server closed the connection while the client still wrote: refused as well
	if n := body.n.Load(); n >= 1<<30 {
		t.Errorf("the gateway read all %d bytes of an oversize body", n)
	}
}

// A request's line and headers together may be MaxHeaderBytes; more is
// payload_too_large, typed, up to twice that, where the HTTP server itself
// refuses (431).
func TestHeaderCaps(t *testing.T) {
	e := newEnv(t, withConfig(func(c *gateway.Config) { c.MaxHeaderBytes = 4 << 10 }))
	e.backend.Open("s1", "demo")
	if r := e.do(http.MethodGet, "/v1/sessions/s1", "", "X-Note", strings.Repeat("a", 2<<10)); r.status != http.StatusOK {
		t.Errorf("a 2 KiB header = %d %s, want 200", r.status, r.body)
	}
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1", "", "X-Note", strings.Repeat("a", 5<<10)), http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
	wantError(t, e.do(http.MethodGet, "/v1/sessions/s1/history?limit=1&x="+strings.Repeat("a", 5<<10), ""), http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
	if r := e.do(http.MethodGet, "/v1/sessions/s1", "", "X-Note", strings.Repeat("a", 64<<10)); r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 64 KiB header = %d %s, want 431", r.status, r.body)
	}
}

// The prompt limits docs/API.md states are the ones enforced: it once
// said 16,384 blocks and 64 MiB, while 1,000 blocks were refused and a
// prompt over the transport's 8 MiB failed 503 (which tells a client to
// retry). Over HTTP, as many blocks as the docs allow are taken and one
// more is payload_too_large; the docs name the session service's
// defaults.
func TestSecurityDocumentedPromptLimits(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "API.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("`content` is 1 to %s blocks", thousands(events.DefaultMaxPromptBlocks)),
		fmt.Sprintf("at most %d MiB (`session.max-prompt-bytes`", events.DefaultMaxPromptBytes>>20),
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/API.md does not say %q", want)
		}
	}
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	blocks := func(n int) string {
		return `{"content":[` + strings.Repeat(`{"type":"text","text":""},`, n-1) + `{"type":"text","text":"say done"}]}`
	}
	if r := e.do(http.MethodPost, "/v1/sessions/s1/prompt", blocks(events.DefaultMaxPromptBlocks)); r.status != http.StatusOK {
		t.Errorf("a prompt of %d blocks = %d %s, want 200", events.DefaultMaxPromptBlocks, r.status, r.body)
	}
	wantError(t, e.do(http.MethodPost, "/v1/sessions/s1/prompt", blocks(events.DefaultMaxPromptBlocks+1)),
		http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
}

// thousands writes n with commas, as the docs do: 16384 is "16,384".
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
