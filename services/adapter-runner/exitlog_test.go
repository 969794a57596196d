package adapterrunner_test

import (
	"regexp"
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// The log line of an adapter that exited on its own says its exit code as
// a number, or none for one a signal ended: not a pointer's address.
func TestExitCodeIsLoggedAsANumber(t *testing.T) {
	h := start(t)
	exitLine := regexp.MustCompile(`msg="adapter exited".*`)
	await := func(sid string) string {
		t.Helper()
		var line string
		if err := testutil.Poll(t.Context(), "the exit's log line", func() (bool, error) {
			for _, l := range exitLine.FindAllString(h.logs.String(), -1) {
				if regexp.MustCompile(`session_id=` + sid + `\b`).MatchString(l) {
					line = l
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatal(err)
		}
		return line
	}

	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "crash 3")
	until[*events.AcpAgentExitedEvent](t, h)
	if line := await("s1"); !regexp.MustCompile(`\bexit_code=3\b`).MatchString(line) {
		t.Errorf("log line %q, want exit_code=3", line)
	}

	created := h.create(t, "s2", "p2", "test")
	if err := syscall.Kill(int(*created.Pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	until[*events.AcpAgentExitedEvent](t, h)
	if line := await("s2"); !regexp.MustCompile(`\bexit_code=none\b`).MatchString(line) {
		t.Errorf("log line %q, want exit_code=none", line)
	}
}
