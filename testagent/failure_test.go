package testagent_test

import (
	"fmt"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/testagent"
)

// A silent agent reads every request and answers none of them.
func TestSilent(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--silent"}})
		p.request("initialize", map[string]any{"protocolVersion": 1})
		// The agent logs a request once it has decided not to answer it, so
		// an answer would be on stdout by now.
		testutil.Eventually(t, "the silent log line", func() bool {
			return strings.Contains(p.stderr.String(), "silent: not answering") && strings.Contains(p.stderr.String(), "method=initialize")
		})
		p.idle()
		p.closeStdin()
		p.expectEOF()
	})
}

// --garbage N writes N lines that are not JSON first; the agent then speaks
// ACP as usual.
func TestGarbage(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{env: map[string]string{testagent.EnvGarbage: "2"}})
		for i := 1; i <= 2; i++ {
			if got, want := string(p.nextLine()), fmt.Sprintf("this is not json: garbage line %d of 2", i); got != want {
				t.Errorf("line %d = %q, want %q", i, got, want)
			}
		}
		p.newSession()
	})
}

// --fail-load fails the first N loads and resumes of each session with
// -32603, or all of them.
func TestFailLoad(t *testing.T) {
	forEachMode(t, func(t *testing.T, start startFunc) {
		p := start(t, opts{args: []string{"--load-session", "--resume", "--fail-load=2"}})
		sid, _ := p.newSession()
		other, _ := p.newSession()
		wantError(t, p.call("session/load", setupParams(sid)), -32603)
		wantError(t, p.call("session/resume", setupParams(sid)), -32603)
		result[map[string]any](t, p.call("session/resume", setupParams(sid)))
		wantError(t, p.call("session/resume", setupParams(other)), -32603) // counted per session

		p = start(t, opts{args: []string{"--load-session", "--fail-load=always"}})
		sid, _ = p.newSession()
		for range 3 {
			wantError(t, p.call("session/load", setupParams(sid)), -32603)
		}
		if ups, stop := p.turn(sid, "say still here"); stop != "end_turn" || agentText(ups) != "still here" {
			t.Errorf("turn after failed loads = %q, %q; want the session to work", agentText(ups), stop)
		}
	})
}
