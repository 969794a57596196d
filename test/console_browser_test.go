package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"skein.dev/internal/testutil"
)

// The console's tests drive the page in a real browser, Debian's
// chromium (.ci/run installs it), headless, against the whole stack
// in-process. This file holds what they share; console_test.go the tests.

// browserNames are the commands tried for the browser, in order.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findBrowser returns the browser's path, from SKEIN_BROWSER or the PATH,
// and skips the test, saying why, where there is none.
func findBrowser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SKEIN_BROWSER"); p != "" {
		return p
	}
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skipf("no browser to drive: none of %v is on the PATH (apt-get install chromium; .ci/run installs it), and SKEIN_BROWSER is not set", browserNames)
	return ""
}

// cspWatch runs in the page before its own scripts (the DevTools protocol
// injects it, so the page's policy does not apply to it) and records every
// violation of the policy: a payload the page let through would be
// refused by the policy, and show here.
const cspWatch = `window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI);
});`

// browser is one headless tab and what it reported that a test must not
// accept: uncaught exceptions, console errors other than failed network
// requests (a restart refuses connections, a missing token is a 401).
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := findBrowser(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
	)
	if os.Geteuid() == 0 {
		// Chromium will not start its sandbox as root: the one flag that
		// running as root needs.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx}
	var console sync.WaitGroup
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		console.Wait()
	})
	// The first Run starts the browser; it gets no deadline, which would
	// end the browser with it.
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspWatch})
		return err
	}))
	if err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	messages := chromedp.Console(ctx)
	console.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if (m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleError) && m.Source != "network" {
				b.mu.Lock()
				b.problems = append(b.problems, m.String())
				b.mu.Unlock()
			}
		}
	})
	return b
}

// check fails the test on what the page reported: exceptions, console
// errors and policy violations.
func (b *browser) check() {
	b.t.Helper()
	b.mu.Lock()
	problems := append([]string(nil), b.problems...)
	b.mu.Unlock()
	for _, p := range problems {
		b.t.Errorf("the page reported: %s", p)
	}
	var violations []string
	if err := b.eval(`window.__cspViolations || []`, &violations); err != nil {
		b.t.Errorf("read the policy violations: %v", err)
	}
	for _, v := range violations {
		b.t.Errorf("the page broke its Content-Security-Policy: %s", v)
	}
}

// run runs actions with a deadline.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testutil.PollTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\n%s", what, err, b.dump())
	}
}

// eval evaluates a JavaScript expression into v.
func (b *browser) eval(expr string, v any) error {
	ctx, cancel := context.WithTimeout(b.ctx, testutil.PollTimeout)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// js evaluates expr and fails the test if it throws.
func (b *browser) js(expr string) {
	b.t.Helper()
	if err := b.eval(expr, nil); err != nil {
		b.t.Fatalf("%s: %v\n%s", expr, err, b.dump())
	}
}

// value evaluates expr into v and fails the test if it throws.
func (b *browser) value(expr string, v any) {
	b.t.Helper()
	if err := b.eval(expr, v); err != nil {
		b.t.Fatalf("%s: %v\n%s", expr, err, b.dump())
	}
}

// wait polls expr, a JavaScript boolean expression, until it is true.
func (b *browser) wait(what, expr string) {
	b.t.Helper()
	err := testutil.Poll(b.ctx, what, func() (bool, error) {
		var ok bool
		if err := b.eval("!!("+expr+")", &ok); err != nil {
			return false, err
		}
		return ok, nil
	})
	if err != nil {
		b.t.Fatalf("%v\n%s", err, b.dump())
	}
}

// dump is the page's text, for a failure's message.
func (b *browser) dump() string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), testutil.PollTimeout/3)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	if err != nil {
		return "(no page text: " + err.Error() + ")"
	}
	if len(text) > 4000 {
		text = text[:2000] + "\n…\n" + text[len(text)-2000:]
	}
	return "page:\n" + text
}

// click clicks the element a CSS selector finds, as a user's mouse would.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.run("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// setField sets a form field's value and tells the page, as typing or
// choosing would.
func (b *browser) setField(sel, value string) {
	b.t.Helper()
	sj, _ := json.Marshal(sel)
	vj, _ := json.Marshal(value)
	b.js(fmt.Sprintf(`(() => {
		const el = document.querySelector(%s);
		el.value = %s;
		el.dispatchEvent(new Event(el.tagName === 'SELECT' ? 'change' : 'input', { bubbles: true }));
	})()`, sj, vj))
}

// signIn opens the console and enters the bearer token in its field.
func (b *browser) signIn(baseURL, token string) {
	b.t.Helper()
	b.run("open the console", chromedp.Navigate(baseURL+"/"))
	b.wait("the redirect to /ui/", `location.pathname === "/ui/" && document.querySelector('[data-role=token]')`)
	b.run("type the token", chromedp.SendKeys(chromedp.CSS(`[data-role=token]`), token))
	b.click(`[data-role=save-token]`)
	b.wait("the token kept", `document.querySelector('[data-role=forget-token]')`)
}

// openSession shows a session's page.
func (b *browser) openSession(id string) {
	b.t.Helper()
	ij, _ := json.Marshal("#/s/" + id)
	b.js(`location.hash = ` + string(ij))
	b.wait("the session's page", fmt.Sprintf(`document.querySelector('[data-session=%q] [data-stream=live]')`, id))
}

// call sends one API request with the token and returns the answer's body,
// failing the test on a status other than 200.
func call(t *testing.T, method, url, token, body string) []byte {
	t.Helper()
	status, b := doAs(t, method, url, token, body)
	if status != http.StatusOK {
		t.Fatalf("%s %s = %d %s", method, url, status, b)
	}
	return b
}
