package test

import (
	"context"
	"fmt"
	"testing"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
)

// notificationWatch runs in the page before its own scripts and records
// the title of every browser notification the page raises, through the
// browser's own Notification (its permission granted by the test).
const notificationWatch = `window.__notifications = [];
(() => {
  const Real = window.Notification;
  window.Notification = class extends Real {
    constructor(title, options) { super(title, options); window.__notifications.push(title); }
  };
})();`

// TestConsolePhone drives the console as a phone shows it (issue 32 §6):
// a 390 × 844 touch screen, where the session pane was squeezed beside the
// list and the page scrolled sideways.
//
//   - One pane at a time: the list, then a session with a way back, and
//     no page ever wider than the screen.
//   - Send, Stop and a permission request's answers are at the foot of the
//     screen, where a thumb reaches, and tall enough to tap.
//   - A permission request raises a browser notification, the person having
//     allowed them, while the page is not in view, and the list shows the
//     session's badge, and counts it in the tab's title.
func TestConsolePhone(t *testing.T) {
	b := newBrowser(t)
	ns := natstest.Run(t)
	st := startConsoleStack(t, ns, testutil.TempDir(t), "")
	b.run("a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateTouch))
	b.run("notifications allowed, and watched", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, chromedp.FromContext(b.ctx).Browser, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: "notifications"}, Setting: cdpbrowser.PermissionSettingGranted}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: notificationWatch})
		return err
	}))
	call(t, "PUT", st.url+"/v1/sessions/phone", consoleToken, `{"agent":"test","permissionPolicy":"ask"}`)

	b.signIn(st.url, consoleToken)
	noSideways := `document.documentElement.scrollWidth <= innerWidth`
	shown := func(sel string) string {
		return fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.getClientRects().length > 0; })()`, sel)
	}
	// atThumb: the element is on screen, in its lower third, and at least
	// 44 px tall (the size a finger needs).
	atThumb := func(sel string) string {
		return fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false;
			const r = e.getBoundingClientRect();
			return r.height >= 44 && r.top >= innerHeight * 2 / 3 && r.bottom <= innerHeight && r.left >= 0 && r.right <= innerWidth; })()`, sel)
	}

	// The list alone.
	b.wait("the list", `document.querySelector('[data-role=session-row][data-session=phone]')`)
	b.wait("the list alone", shown(`[data-role=sessions]`)+` && !`+shown(`main.main`))
	b.wait("no sideways scroll on the list", noSideways)

	// A session alone, with a way back; Send at the thumb.
	b.click(`[data-role=session-row][data-session=phone]`)
	b.wait("the session alone", `document.querySelector('[data-session=phone] [data-stream=live]') && !`+shown(`[data-role=sessions]`))
	b.wait("a way back", shown(`[data-role=back]`))
	b.setField(`[data-role=prompt]`, "permission call_1 allow_once=allow,reject_once=reject\nsay thumbs up")
	b.wait("Send at the thumb", atThumb(`[data-role=send]`))
	b.wait("no sideways scroll on the session", noSideways)

	// The person looks away; the agent asks.
	b.js(`Object.defineProperty(document, 'visibilityState', { get: () => 'hidden' })`)
	b.click(`[data-role=send]`)
	b.wait("Stop at the thumb while the turn runs", atThumb(`[data-role=stop]`))
	pending := `[data-role=permission].pending button[data-option=allow]`
	b.wait("the permission request", `document.querySelector('`+pending+`')`)
	b.wait("its answer at the thumb", atThumb(pending))
	b.wait("a notification", `window.__notifications.some((t) => t.includes('phone') && t.includes('needs you'))`)
	b.wait("no sideways scroll with the request shown", noSideways)

	// Back to the list: the session's badge, and the count in the title.
	b.click(`[data-role=back]`)
	b.wait("the badge in the list", `document.querySelector('[data-session=phone] [data-role=needs]')?.textContent.includes('permission')`)
	b.wait("the count in the tab's title", `document.title.startsWith('(1) ')`)

	// Answered by a tap, the turn ends, and the badge goes.
	b.click(`[data-role=session-row][data-session=phone]`)
	b.wait("the request again", `document.querySelector('`+pending+`')`)
	b.click(pending)
	b.wait("the reply", `[...document.querySelectorAll('[data-kind=agent]')].some((e) => e.textContent.includes('thumbs up'))`)
	b.wait("the turn over", `document.querySelector('[data-role=status]').textContent === 'idle'`)
	b.wait("no Stop once idle", `!document.querySelector('[data-role=stop]')`)
	b.click(`[data-role=back]`)
	b.wait("no badge once answered", `document.querySelector('[data-session=phone]') && !document.querySelector('[data-session=phone] [data-role=needs]')`)
	b.wait("no count in the title", `document.title === 'Skein console'`)
	b.check()
}
