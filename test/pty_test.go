package test

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/creack/pty"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
)

// The interactive tests run the real skein binary (skeinBin) on a
// pseudo-terminal, as a person runs it: its standard input, output and
// error are the terminal, and Ctrl-C is the byte 0x03 typed into it,
// which the terminal turns into SIGINT for the process.

// terminal is a skein process on a pseudo-terminal.
type terminal struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	out  testutil.Buffer // everything it wrote, escape sequences and all
	read chan struct{}   // closed once the terminal has nothing more to read
}

func startTerminal(t *testing.T, bin string, env []string, args ...string) *terminal {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 100})
	if err != nil {
		t.Fatalf("start skein on a pty: %v", err)
	}
	term := &terminal{t: t, cmd: cmd, pty: f, read: make(chan struct{})}
	go func() {
		defer close(term.read)
		_, _ = io.Copy(&term.out, f) // ends with EIO once the process exits
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		f.Close()
	})
	return term
}

// ansi matches the escape sequences skein writes on a terminal.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// text returns what the terminal got, escape sequences dropped.
func (term *terminal) text() string { return ansi.ReplaceAllString(term.out.String(), "") }

// waitFor waits until the terminal shows s.
func (term *terminal) waitFor(s string) {
	term.t.Helper()
	testutil.Eventually(term.t, "the terminal to show "+s, func() bool { return strings.Contains(term.text(), s) })
}

// typeIn types s on the terminal.
func (term *terminal) typeIn(s string) {
	term.t.Helper()
	if _, err := term.pty.Write([]byte(s)); err != nil {
		term.t.Fatalf("type %q: %v", s, err)
	}
}

// exit waits for the process to exit and returns its exit code.
func (term *terminal) exit() int {
	term.t.Helper()
	err := term.cmd.Wait()
	<-term.read
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.ExitCode()
	}
	if err != nil {
		term.t.Fatalf("wait: %v", err)
	}
	return 0
}

func TestInteractiveTerminal(t *testing.T) {
	bin := skeinBin(t)
	ns := natstest.Run(t)
	st := startStack(t, ns, t.TempDir())
	env := append(os.Environ(), envServer+"="+st.url, envData+"="+t.TempDir(), "TERM=xterm")

	t.Run("Ctrl-C cancels the turn and reports it", func(t *testing.T) {
		term := startTerminal(t, bin, env, "prompt", "-s", "c1", "say \"started\\n\"\nsleep 1h\nsay never")
		term.waitFor("started")
		// The spinner runs while the agent sleeps, with the time elapsed.
		spinner := regexp.MustCompile(`started\r?\n(.|\n)*thinking [0-9.]+s`)
		testutil.Eventually(t, "the spinner", func() bool { return spinner.MatchString(term.text()) })
		term.typeIn("\x03")
		term.waitFor("cancelling the turn")
		if code := term.exit(); code != exitCancelled {
			t.Errorf("exit code %d, want %d; the terminal showed\n%s", code, exitCancelled, term.text())
		}
		if txt := term.text(); !strings.Contains(txt, "cancelled") || strings.Contains(txt, "never") {
			t.Errorf("the terminal showed\n%s\nwant the turn cancelled before it said never", txt)
		}
		testutil.Eventually(t, "c1 idle after the cancel", func() bool { return sessionStatus(t, st.url, "c1") == "idle" })
	})

	t.Run("a permission answered at the prompt", func(t *testing.T) {
		term := startTerminal(t, bin, env, "prompt", "-s", "p1", "--policy", "ask", "permission call_1\nsay after")
		term.waitFor("choice for ")
		term.waitFor("1. allow")
		term.typeIn("1\r")
		term.waitFor("permission: selected allow")
		if code := term.exit(); code != exitOK {
			t.Errorf("exit code %d, want 0; the terminal showed\n%s", code, term.text())
		}
		if !strings.Contains(term.text(), "after") {
			t.Errorf("the terminal showed\n%s\nwant the turn to go on after the answer", term.text())
		}
	})

	t.Run("Ctrl-C at the permission prompt cancels the turn", func(t *testing.T) {
		term := startTerminal(t, bin, env, "prompt", "-s", "p2", "--policy", "ask", "permission call_2\nsay after")
		term.waitFor("choice for ")
		term.typeIn("\x03")
		if code := term.exit(); code != exitCancelled {
			t.Errorf("exit code %d, want %d; the terminal showed\n%s", code, exitCancelled, term.text())
		}
		if txt := term.text(); !strings.Contains(txt, "prompt_cancelled") {
			t.Errorf("the terminal showed\n%s\nwant the request ended by the cancel", txt)
		}
		// The turn is not left waiting for an answer no one will give.
		testutil.Eventually(t, "p2 idle after the Ctrl-C", func() bool { return sessionStatus(t, st.url, "p2") == "idle" })
	})
}

// sessionStatus returns the session's status as the gateway answers it.
func sessionStatus(t *testing.T, url, sid string) string {
	t.Helper()
	code, b := do(t, http.MethodGet, url+"/v1/sessions/"+sid, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", sid, code, b)
	}
	m := regexp.MustCompile(`"status":"([a-z]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("GET %s = %s: no status", sid, b)
	}
	return string(m[1])
}
