package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/sync/errgroup"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
)

// consoleToken is the bearer token of the console tests' stacks.
const consoleToken = "console-test-token-4f2a9c"

// startConsoleStack starts the stack with bearer tokens on, as skein dev
// runs it, at addr ("" for any port).
func startConsoleStack(t *testing.T, ns *server.Server, dataDir, addr string) *testStack {
	t.Helper()
	return startStackTB(t, ns, dataDir, func(c *stackConfig) {
		c.Gateway.Auth.Tokens = devTokens(consoleToken)
		if addr != "" {
			c.Gateway.Addr = addr
		}
	})
}

// TestConsoleTurn drives a whole turn from the page: the token typed in,
// a session opened with the test agent in a folder picked from the
// workspace, a prompt sent, the permission request answered by a click,
// and the reply, tool calls and plan shown as they should be.
func TestConsoleTurn(t *testing.T) {
	b := newBrowser(t)
	ns := natstest.Run(t)
	dataDir := testutil.TempDir(t)
	proj := filepath.Join(dataDir, "workspaces", "default", "proj")
	if err := os.MkdirAll(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	st := startConsoleStack(t, ns, dataDir, "")

	b.run("open the console", chromedp.Navigate(st.url+"/"))
	b.wait("the redirect to /ui/", `location.pathname === "/ui/"`)
	// Without a token the list is refused, and the page says what to do.
	b.wait("the request for a token", `document.querySelector('[data-role=list-error]')?.textContent.includes('bearer token')`)
	b.signIn(st.url, consoleToken)
	var kept struct {
		Token  string `json:"token"`
		Cookie string `json:"cookie"`
		Local  int    `json:"local"`
	}
	b.value(`({token: sessionStorage.getItem('skein.token'), cookie: document.cookie, local: localStorage.length})`, &kept)
	if kept.Token != consoleToken || kept.Cookie != "" || kept.Local != 0 {
		t.Errorf("the token is kept as %+v, want in sessionStorage only", kept)
	}

	b.click(`[data-role=new-session]`)
	b.wait("the agent list", `[...document.querySelectorAll('[data-role=agent] option')].some((o) => o.value === 'test')`)
	b.setField(`[data-role=session-id]`, "console-turn")
	b.setField(`[data-role=agent]`, "test")
	root := filepath.Join(dataDir, "workspaces", "default")
	b.click(fmt.Sprintf(`button[data-path=%q]`, root))
	b.wait("the folders of the namespace's root", fmt.Sprintf(`document.querySelector('button[data-path=%q]')`, proj))
	b.click(fmt.Sprintf(`button[data-path=%q]`, proj))
	b.wait("the folder chosen", fmt.Sprintf(`document.querySelector('[data-role=cwd]').textContent === %q`, proj))
	b.click(`[data-role=open]`)
	b.wait("the session's page", `location.hash === '#/s/console-turn' && document.querySelector('[data-stream=live]')`)

	script := strings.Join([]string{
		"plan [x] read the code | [~] edit the config | run the tests",
		"tool call_1 Read README.md",
		"permission call_2 allow_once=allow,reject_once=reject",
		`elicit "Which branch?" {"type":"object","properties":{"branch":{"type":"string"}},"required":["branch"]}`,
		"say **Edited** the config.",
	}, "\n")
	b.setField(`[data-role=prompt]`, script)
	b.click(`[data-role=send]`)

	pending := `[data-role=permission].pending`
	b.wait("the permission request", `document.querySelector('`+pending+` button[data-option=allow]')`)
	var willRun string
	b.value(`document.querySelector('`+pending+` [data-role=will-run]').textContent`, &willRun)
	if !strings.Contains(willRun, "call_2") {
		t.Errorf("the permission request shows %q as what will run, want the agent's command", willRun)
	}
	b.wait("the state: waiting", `document.querySelector('[data-role=status]').textContent === 'waiting'`)
	b.click(pending + ` button[data-option=allow]`)

	// Then the agent asks for input: a form of its schema.
	b.wait("the input request", `document.querySelector('[data-role=input].pending input[name=branch]')`)
	b.setField(`[data-role=input].pending input[name=branch]`, "main")
	b.click(`[data-role=input].pending button[type=submit]`)
	b.wait("the input answered", `[...document.querySelectorAll('[data-kind=agent]')].some((e) => e.textContent.includes('input: accept {"branch":"main"}'))`)

	b.wait("the reply, as Markdown", `[...document.querySelectorAll('[data-kind=agent] strong')].some((e) => e.textContent === 'Edited')`)
	b.wait("the permission answered", `document.querySelector('[data-role=permission] [data-role=resolution]')?.textContent.includes('allow')`)
	// Who did what: the token's principal opened the session, sent the
	// prompt and answered the requests.
	b.wait("who answered", `document.querySelector('[data-role=permission] [data-role=resolution]').textContent.endsWith(' by dev') &&
		document.querySelector('[data-role=input] [data-role=resolution]')?.textContent.endsWith(' by dev')`)
	b.wait("who sent the prompt", `document.querySelector('[data-kind=user] [data-role=who]')?.textContent === 'dev'`)
	b.wait("who opened the session", `document.querySelector('[data-role=created-by]')?.textContent === 'opened by dev'`)
	b.wait("the turn over", `document.querySelector('[data-role=status]').textContent === 'idle'`)
	b.wait("the tool call completed", `document.querySelector('[data-role=tool][data-status=completed] .tool-title')?.textContent === 'Read README.md'`)
	var plan []bool
	b.value(`[...document.querySelectorAll('[data-role=plan] input[type=checkbox]')].map((c) => c.checked)`, &plan)
	if fmt.Sprint(plan) != "[true false false]" {
		t.Errorf("the plan's checkboxes are %v, want [true false false]", plan)
	}

	// The answer the page sent is the one the log holds.
	var page historyPage
	if err := json.Unmarshal(call(t, "GET", st.url+"/v1/sessions/console-turn/history?after=0&limit=1000", consoleToken, ""), &page); err != nil {
		t.Fatal(err)
	}
	var answered bool
	for _, e := range page.Events {
		if e["type"] == "permission_response" {
			out, _ := e["outcome"].(map[string]any)
			answered = e["status"] == "accepted" && out["optionId"] == "allow"
		}
	}
	if !answered {
		t.Errorf("history holds no accepted permission_response with allow: %v", page.Events)
	}

	// Rename, from the header.
	b.click(`[data-role=rename]`)
	b.setField(`.rename input[name=title]`, "Edit the config")
	b.click(`.rename button[type=submit]`)
	b.wait("the new title", `document.querySelector('[data-role=title]')?.textContent === 'Edit the config' &&
		document.querySelector('[data-session=console-turn] .row-title')?.textContent === 'Edit the config'`)
	if path := os.Getenv("SKEIN_CONSOLE_SCREENSHOT"); path != "" {
		screenshot(t, b, path)
	}

	// Cancel a running turn: its streamed text goes, the turn ends.
	b.setField(`[data-role=prompt]`, "say started\nsleep 30s\nsay too late")
	b.click(`[data-role=send]`)
	b.wait("the slow turn running", `document.querySelector('[data-role=status]').textContent === 'running' &&
		[...document.querySelectorAll('[data-kind=agent]')].some((e) => e.textContent.includes('started'))`)
	b.click(`[data-role=cancel]`)
	b.wait("the turn cancelled", `document.querySelector('[data-role=status]').textContent === 'idle' &&
		!document.querySelector('[data-role=send]').textContent.includes('Running')`)
	// Its turn_finished state change ends it on the page, and the text
	// streamed for it, never made durable, is gone.
	b.wait("the cancelled turn's end", `document.querySelector('[data-role=turn-end][data-outcome=cancelled]') &&
		![...document.querySelectorAll('[data-kind=agent]')].some((e) => e.textContent.includes('started'))`)

	// Unload, then delete: the page goes back to the list, without it.
	b.click(`[data-role=unload]`)
	b.click(`[data-role=delete]`)
	b.click(`[data-role=confirm-delete]`)
	b.wait("the session gone", `location.hash === '#/' && !document.querySelector('[data-session=console-turn]')`)
	var status int
	b.value(`fetch('/v1/sessions/console-turn', {headers: {Authorization: 'Bearer ' + sessionStorage.getItem('skein.token')}}).then((r) => r.status)`, &status)
	if status != http.StatusNotFound {
		t.Errorf("GET the deleted session = %d, want 404", status)
	}
	b.check()
}

// TestConsoleReconnect stops the stack under an open session page and
// starts it again at the same address: the page resumes by itself, shows
// the turn that followed, and shows no message twice.
func TestConsoleReconnect(t *testing.T) {
	b := newBrowser(t)
	ns := natstest.Run(t)
	dataDir := testutil.TempDir(t)
	st := startConsoleStack(t, ns, dataDir, "")
	addr := strings.TrimPrefix(st.url, "http://")
	base := st.url + "/v1/sessions/rc"
	call(t, "PUT", base, consoleToken, `{"agent":"test"}`)
	call(t, "POST", base+"/prompt", consoleToken, promptBody("say before the restart"))

	b.signIn(st.url, consoleToken)
	b.openSession("rc")
	b.wait("the first reply", `[...document.querySelectorAll('[data-kind=agent]')].some((e) => e.textContent.includes('before the restart'))`)

	st.stop()
	b.wait("the page to notice the drop", `document.querySelector('[data-stream=reconnecting]')`)
	st = startConsoleStack(t, ns, dataDir, addr)
	// A turn right after the restart, whether the page has reconnected yet
	// or not: it sees the turn live or from its resume, once either way.
	call(t, "POST", st.url+"/v1/sessions/rc/prompt", consoleToken, promptBody("say after the restart"))
	b.wait("the page to resume", `document.querySelector('[data-stream=live]')`)
	b.wait("the second reply", `[...document.querySelectorAll('[data-kind=agent]')].some((e) => e.textContent.includes('after the restart'))`)

	// Once more live, so that whatever a resume could repeat has arrived.
	call(t, "POST", st.url+"/v1/sessions/rc/prompt", consoleToken, promptBody("say third"))
	b.wait("the third reply", `[...document.querySelectorAll('[data-kind=agent]')].some((e) => e.textContent.includes('third'))`)
	// Every turn's end, from history or live, shows once.
	ends := `document.querySelectorAll('[data-role=turn-end][data-outcome=end_turn]').length`
	b.wait("the third turn's end", ends+` >= 3`)
	var n int
	b.value(ends, &n)
	if n != 3 {
		t.Errorf("the page shows %d turn ends, want 3", n)
	}
	var shown []string
	b.value(`[...document.querySelectorAll('[data-role=message]')].map((e) => e.dataset.kind + ': ' + e.querySelector('.body').textContent.trim())`, &shown)
	// The test agent keeps no state across its restart: the restored
	// session's first turn gets Skein's continuation preamble, which the
	// agent echoes before its reply, in a message whose ID its first
	// process used too. So that one message is checked by its end, and
	// for the reply once.
	want := []string{
		"user: say before the restart", "agent: before the restart",
		"user: say after the restart", "agent: …after the restart",
		"user: say third", "agent: third",
	}
	ok := len(shown) == len(want)
	for i := 0; ok && i < len(want); i++ {
		if rest, cut := strings.CutPrefix(want[i], "agent: …"); cut {
			ok = strings.HasPrefix(shown[i], "agent: ") && strings.HasSuffix(shown[i], rest) && strings.Count(shown[i], rest) == 1
		} else {
			ok = shown[i] == want[i]
		}
	}
	if !ok {
		t.Errorf("the page shows %q, want %q", shown, want)
	}
	b.check()
}

// xssPayload is agent output that runs script if a page renders it as
// HTML: each part sets window.__xss, which must stay unset.
const xssPayload = `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>` +
	`<iframe srcdoc="<script>parent.__xss=3</script>"></iframe> [link](javascript:window.__xss=4) **bold**`

// TestConsoleXSS has the agent write HTML and script into a message, a
// tool call's title and the session's title: the page shows them as text,
// runs none of them, and breaks none of its policy.
func TestConsoleXSS(t *testing.T) {
	b := newBrowser(t)
	ns := natstest.Run(t)
	st := startConsoleStack(t, ns, t.TempDir(), "")
	base := st.url + "/v1/sessions/xss"
	call(t, "PUT", base, consoleToken, `{"agent":"test"}`)
	title := `<img src=x onerror="window.__xss=5">`
	script := strings.Join([]string{
		"title " + strconv.Quote(title),
		"tool call_x " + `<svg onload="window.__xss=6">`,
		"say " + strconv.Quote(xssPayload),
	}, "\n")
	call(t, "POST", base+"/prompt", consoleToken, promptBody(script))

	b.signIn(st.url, consoleToken)
	b.openSession("xss")
	b.wait("the message", `[...document.querySelectorAll('[data-kind=agent] strong')].some((e) => e.textContent === 'bold')`)
	b.wait("the title", `document.querySelector('[data-role=title]').textContent === `+jsString(title))

	var got struct {
		XSS      any    `json:"xss"`
		Text     string `json:"text"`
		Elements int    `json:"elements"`
		JSLinks  int    `json:"jsLinks"`
		Tool     string `json:"tool"`
		Row      string `json:"row"`
	}
	b.value(`({
		xss: window.__xss ?? null,
		text: document.querySelector('[data-kind=agent] .body').textContent,
		elements: document.querySelectorAll('[data-role=log] img, [data-role=log] script, [data-role=log] iframe, [data-role=log] svg, [data-role=sessions] img').length,
		jsLinks: document.querySelectorAll('a[href^="javascript:" i]').length,
		tool: document.querySelector('[data-role=tool] .tool-title').textContent,
		row: document.querySelector('[data-session=xss] .row-title').textContent,
	})`, &got)
	if got.XSS != nil {
		t.Errorf("the payload ran: window.__xss = %v", got.XSS)
	}
	for _, part := range []string{`<img src=x onerror="window.__xss=1">`, `<script>window.__xss=2</script>`, `<iframe srcdoc="<script>parent.__xss=3</script>"></iframe>`} {
		if !strings.Contains(got.Text, part) {
			t.Errorf("the message shows %q, want %q in it as text", got.Text, part)
		}
	}
	if got.Elements != 0 || got.JSLinks != 0 {
		t.Errorf("the page made %d elements and %d javascript: links of agent output", got.Elements, got.JSLinks)
	}
	if got.Tool != `<svg onload="window.__xss=6">` || got.Row != title {
		t.Errorf("the tool call's title shows %q and the list's title %q, want the agent's text", got.Tool, got.Row)
	}
	b.check()
}

// TestConsoleHistoryPaging scrolls back through a session of 1,000
// messages: the page starts with the newest page and reads each older one
// as the reader scrolls to the top, until the first, each message once and
// in order.
func TestConsoleHistoryPaging(t *testing.T) {
	const messages = 1000
	b := newBrowser(t)
	ns := natstest.Run(t)
	st := startConsoleStack(t, ns, t.TempDir(), "")
	base := st.url + "/v1/sessions/long"
	call(t, "PUT", base, consoleToken, `{"agent":"test"}`)
	var script strings.Builder
	for i := 1; i <= messages; i++ {
		fmt.Fprintf(&script, "message\nsay m%04d\n", i)
	}
	call(t, "POST", base+"/prompt", consoleToken, promptBody(script.String()))

	b.signIn(st.url, consoleToken)
	b.openSession("long")
	b.wait("the newest message", `[...document.querySelectorAll('[data-kind=agent]')].some((e) => e.textContent.includes('m1000'))`)
	var first int
	b.value(`document.querySelectorAll('[data-kind=agent]').length`, &first)
	if first >= messages {
		t.Fatalf("the page showed %d messages at once, want the newest page only", first)
	}
	pages := 0
	for {
		var state struct {
			Count int  `json:"count"`
			Start bool `json:"start"`
		}
		b.value(`({count: document.querySelectorAll('[data-kind=agent]').length, start: !!document.querySelector('[data-role=start]')})`, &state)
		if state.Start {
			break
		}
		pages++
		if pages > messages/100 {
			t.Fatalf("still not at the start after %d scrolls", pages)
		}
		// Scroll to the top as a reader would; the page reads the page
		// before and keeps the reader's place.
		b.js(`(() => { const log = document.querySelector('[data-role=log]'); log.scrollTop = 0; log.dispatchEvent(new Event('scroll')); })()`)
		b.wait("an older page", fmt.Sprintf(`document.querySelectorAll('[data-kind=agent]').length > %d || document.querySelector('[data-role=start]')`, state.Count))
	}
	if pages < 2 {
		t.Errorf("reached the start after %d scrolls, want several pages", pages)
	}
	var shown []string
	b.value(`[...document.querySelectorAll('[data-kind=agent] .body')].map((e) => e.textContent.trim())`, &shown)
	if len(shown) != messages {
		t.Fatalf("the page shows %d messages, want %d", len(shown), messages)
	}
	for i, s := range shown {
		if want := fmt.Sprintf("m%04d", i+1); s != want {
			t.Fatalf("message %d shows %q, want %q", i, s, want)
		}
	}
	b.check()
}

// screenshot saves the page as a PNG, for the README (docs/console.png):
// SKEIN_CONSOLE_SCREENSHOT=$PWD/docs/console.png go test -run TestConsoleTurn ./test
func screenshot(t *testing.T, b *browser, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testutil.PollTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot written to %s", path)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestConsoleSessionList pages the session list on scroll: the first 25
// sessions, then the rest as the list is scrolled to its end, each once,
// with its title and state.
func TestConsoleSessionList(t *testing.T) {
	const sessions = 30
	b := newBrowser(t)
	ns := natstest.Run(t)
	st := startConsoleStack(t, ns, t.TempDir(), "")
	// Each open starts the session's agent: a few at a time.
	var opens errgroup.Group
	opens.SetLimit(4)
	for i := 1; i <= sessions; i++ {
		opens.Go(func() error {
			url := fmt.Sprintf("%s/v1/sessions/list-%02d", st.url, i)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, url, strings.NewReader(`{"agent":"test"}`))
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+consoleToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("PUT %s = %d", url, resp.StatusCode)
			}
			return nil
		})
	}
	if err := opens.Wait(); err != nil {
		t.Fatal(err)
	}
	call(t, "PATCH", st.url+"/v1/sessions/list-01", consoleToken, `{"title":"The oldest, renamed"}`)

	b.signIn(st.url, consoleToken)
	rows := `document.querySelectorAll('[data-role=session-row]').length`
	b.wait("the first page", rows+` === 25`)
	b.js(`(() => { const l = document.querySelector('[data-role=sessions]'); l.scrollTop = l.scrollHeight; l.dispatchEvent(new Event('scroll')); })()`)
	b.wait("the next page", rows+` === 30`)
	var got struct {
		IDs    []string `json:"ids"`
		Title  string   `json:"title"`
		Status string   `json:"status"`
	}
	b.value(`({
		ids: [...document.querySelectorAll('[data-role=session-row]')].map((r) => r.dataset.session),
		title: document.querySelector('[data-session=list-01] .row-title').textContent,
		status: document.querySelector('[data-session=list-02] .badge').textContent,
	})`, &got)
	seen := map[string]bool{}
	for _, id := range got.IDs {
		if seen[id] {
			t.Errorf("session %s is listed twice", id)
		}
		seen[id] = true
	}
	if len(seen) != sessions || got.Title != "The oldest, renamed" || got.Status != "idle" {
		t.Errorf("the list shows %d sessions, list-01 titled %q, list-02 %q; want %d, the new title, idle", len(seen), got.Title, got.Status, sessions)
	}
	b.check()
}
