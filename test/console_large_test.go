package test

import (
	"fmt"
	"strings"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
)

// TestConsoleLargeMessages: the console reads back a session of large
// messages, three answers of one chunk and one of five (stored in records
// that each fit a NATS message; testutil.LargeScale: 4 MB and 20 MB on
// skein dev's max_payload of 8 MiB in make test-long): every page of its
// history answers, and scrolled to the start, the page shows every byte of
// every answer.
func TestConsoleLargeMessages(t *testing.T) {
	maxPayload, chunk := testutil.LargeScale()
	answers := 8 * chunk
	big := fmt.Sprintf("big %d", chunk)
	b := newBrowser(t)
	ns := natstest.Run(t, natstest.WithMaxPayload(maxPayload))
	st := startConsoleStack(t, ns, testutil.TempDir(t), "")
	base := st.url + "/v1/sessions/large"
	call(t, "PUT", base, consoleToken, `{"agent":"test"}`)
	for range 3 {
		call(t, "POST", base+"/prompt", consoleToken, promptBody(big))
	}
	call(t, "POST", base+"/prompt", consoleToken, promptBody(strings.Repeat(big+"\n", 5)))

	b.signIn(st.url, consoleToken)
	b.openSession("large")
	b.wait("the newest answer", `document.querySelectorAll('[data-kind=agent]').length > 0`)
	// What the page shows: its items, and the bytes of its answers (an
	// older page may only lengthen an answer whose newer records are
	// shown already).
	const shownJS = `[...document.querySelectorAll('[data-kind=agent] .body')].reduce((n, e) => n + e.textContent.trim().length, 0)`
	for scrolls := 0; ; scrolls++ {
		var start bool
		b.value(`!!document.querySelector('[data-role=start]')`, &start)
		if start {
			break
		}
		if scrolls > 20 {
			t.Fatalf("still not at the start after %d scrolls", scrolls)
		}
		var items, shown int
		b.value(`document.querySelectorAll('[data-kind]').length`, &items)
		b.value(shownJS, &shown)
		b.js(`(() => { const log = document.querySelector('[data-role=log]'); log.scrollTop = 0; log.dispatchEvent(new Event('scroll')); })()`)
		b.wait("an older page", fmt.Sprintf(`document.querySelectorAll('[data-kind]').length > %d || %s > %d || document.querySelector('[data-role=start]') || document.querySelector('[data-role=notice]')`, items, shownJS, shown))
		var notice string
		b.value(`document.querySelector('[data-role=notice]')?.textContent ?? ''`, &notice)
		if notice != "" {
			t.Fatalf("the page says %q", notice)
		}
	}
	var shown int
	b.value(`[...document.querySelectorAll('[data-kind=agent] .body')].reduce((n, e) => n + e.textContent.trim().length, 0)`, &shown)
	if shown != answers {
		t.Errorf("the page shows %d bytes of answers, want %d", shown, answers)
	}
	b.check()
}
