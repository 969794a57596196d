package test

import (
	"net/http"
	"strings"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
)

// TestConsoleQueue: while a turn runs, the console's Queue action puts the
// prompt in the session's queue, which the page lists with a way to
// withdraw each entry; what stays runs as its own turn once the running one
// ends (issue 32 §1).
func TestConsoleQueue(t *testing.T) {
	b := newBrowser(t)
	ns := natstest.Run(t)
	st := startConsoleStack(t, ns, testutil.TempDir(t), "")
	if code, body := doAs(t, http.MethodPut, st.url+"/v1/sessions/console-queue", consoleToken, `{"agent":"test","permissionPolicy":"ask"}`); code != http.StatusOK {
		t.Fatalf("open: %d %s", code, body)
	}
	b.signIn(st.url, consoleToken)
	b.openSession("console-queue")
	b.wait("the session's page", `document.querySelector('[data-session=console-queue]') && document.querySelector('[data-stream=live]')`)

	// A turn that waits on a person runs until someone answers.
	b.setField(`[data-role=prompt]`, "permission call_1 allow_once=allow,reject_once=reject\nsay first done")
	b.click(`[data-role=send]`)
	b.wait("the permission request", `document.querySelector('[data-role=permission].pending button[data-option=allow]')`)
	b.wait("the Queue action while the turn runs", `document.querySelector('[data-role=queue]')`)

	for _, text := range []string{"say queued one", "say queued two"} {
		b.setField(`[data-role=prompt]`, text)
		b.click(`[data-role=queue]`)
		b.wait("the prompt listed in the queue", `[...document.querySelectorAll('[data-role=queued]')].some((q) => q.textContent.includes(`+jsString(text)+`))`)
	}
	var positions string
	b.value(`[...document.querySelectorAll('[data-role=queued] .pos')].map((p) => p.textContent).join(',')`, &positions)
	if positions != "1,2" {
		t.Errorf("the queue lists positions %q, want 1,2", positions)
	}
	b.click(`[data-role=queued]:nth-of-type(3) [data-role=withdraw]`) // the queue head is the first child
	b.wait("the second withdrawn", `document.querySelectorAll('[data-role=queued]').length === 1`)

	b.click(`[data-role=permission].pending button[data-option=allow]`)
	b.wait("the queued turn's reply", `document.querySelector('[data-role=log]').textContent.includes('queued one')`)
	b.wait("the queue empty", `!document.querySelector('[data-role=queue-list]')`)
	var log string
	b.value(`document.querySelector('[data-role=log]').textContent`, &log)
	if strings.Contains(log, "queued two") {
		t.Errorf("the withdrawn prompt ran: %q", log)
	}
	if i, j := strings.Index(log, "first done"), strings.Index(log, "queued one"); i < 0 || j < i {
		t.Errorf("the queued turn's reply is not after the first turn's: %q", log)
	}
}
