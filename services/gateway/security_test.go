package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// The security suite's share of the bodies and headers: every route that
// takes a body, tried with a valid token and malformed JSON, unknown
// fields, trailing data and a body over its cap; every route tried with
// headers over their cap. Each attempt gets its typed error, and nothing
// reaches the log or the buckets.
func TestBadInputEveryRoute(t *testing.T) {
	e := newEnv(t, withConfig(func(c *gateway.Config) {
		withTokens(c)
		c.MaxBodyBytes, c.MaxPromptBodyBytes, c.MaxHeaderBytes = 2<<10, 4<<10, 4<<10
	}))
	e.backend.Open("s1", "demo")
	e.awaitProjected(events.DefaultNamespace, "s1")
	before := e.streamStates()
	admin := bearer(adminToken)

	withBody := 0
	for _, rt := range gateway.Routes() {
		path, body := routeRequest(rt, "s1")
		if rt.Method == http.MethodDelete {
			body = "{}" // it takes an empty body, or {}
		}
		name := rt.Method + " " + rt.Path
		if !isPublicRoute(rt) {
			// Headers over the cap, and a URL that makes them so.
			wantErrorOf(t, name+", oversized header", e.send(rt.Method, path, body, admin, "X-Pad", strings.Repeat("a", 5<<10)),
				http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
			wantErrorOf(t, name+", oversized URL", e.send(rt.Method, path+"?pad="+strings.Repeat("a", 5<<10), body, admin),
				http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
		}
		if body == "" || isPublicRoute(rt) {
			continue // the route reads no body
		}
		withBody++
		for what, bad := range map[string]string{
			"malformed JSON": `{"a":`,
			"not an object":  `[1]`,
			"unknown field":  body[:len(body)-1] + `,"zzz":1}`,
			"trailing data":  body + ` {}`,
		} {
			if body == "{}" && what == "unknown field" {
				bad = `{"zzz":1}`
			}
			wantErrorOf(t, name+", "+what, e.send(rt.Method, path, bad, admin), http.StatusBadRequest, events.CodeInvalidRequest)
		}
		over := `{"pad":"` + strings.Repeat("a", 5<<10) + `"}`
		wantErrorOf(t, name+", oversize body", e.send(rt.Method, path, over, admin), http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)
	}
	if withBody < 8 {
		t.Errorf("%d routes with a body tried, want every one (open, rename, prompt, cancel, unload, delete, answer, config)", withBody)
	}
	e.wantStreamsUnchanged(before)
}

// wantErrorOf checks that r is the typed error, naming the attempt.
func wantErrorOf(t *testing.T, attempt string, r response, status int, code events.Code) {
	t.Helper()
	if r.status != status || !strings.Contains(string(r.body), `"code":"`+string(code)+`"`) {
		t.Errorf("%s = %d %s, want %d %s", attempt, r.status, r.body, status, code)
	}
}
