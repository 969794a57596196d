package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"skein.dev/pkg/events"
)

// The session service counts the adapters a request attaches against the
// quota of the principal the gateway authenticated (session.
// max-adapters-per-principal): the gateway names it, in Acp-Principal, on
// the requests that may attach one, an open and a prompt, and on every
// other op of a session it sends.
func TestSecurityGatewayNamesThePrincipal(t *testing.T) {
	e := newEnv(t, withConfig(withTokens))
	sub, err := e.nc.SubscribeSync(events.APIWildcard("*"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if r := e.send(http.MethodPut, "/v1/sessions/p1", `{"agent":"demo"}`, bearer(userToken)); r.status != http.StatusOK {
		t.Fatalf("open = %d %s", r.status, r.body)
	}
	if r := e.send(http.MethodPost, "/v1/sessions/p1/prompt", `{"content":[{"type":"text","text":"say hi"}]}`, bearer(userToken)); r.status != http.StatusOK {
		t.Fatalf("prompt = %d %s", r.status, r.body)
	}
	if r := e.send(http.MethodPost, "/v1/sessions/p1/unload", `{}`, bearer(adminToken)); r.status != http.StatusOK {
		t.Fatalf("unload = %d %s", r.status, r.body)
	}
	want := map[events.Op]string{events.OpOpenSession: "bob", events.OpPrompt: "bob", events.OpUnloadSession: "alice"}
	for len(want) > 0 {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("requests not seen: %v (%v)", want, err)
		}
		op := events.Op(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		p, ok := want[op]
		if !ok {
			continue
		}
		if got := m.Header.Get(events.HeaderPrincipal); got != p {
			t.Errorf("%s carries %s %q, want %q", op, events.HeaderPrincipal, got, p)
		}
		delete(want, op)
	}
}
