package cli_test

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// askingTurn is a test agent script that asks n permission requests one
// after the other, each about call_1 with the options allow and deny, and
// says each outcome in a message of its own. A request that ends
// unanswered ends the turn.
func askingTurn(n int) string {
	lines := make([]string, 0, 2*n)
	for range n {
		lines = append(lines, "message", "permission call_1 allow_once=allow,reject_once=deny")
	}
	return strings.Join(lines, "\n")
}

// promptUntilCancelled runs skein prompt on s1 with a turn that stands at
// the pause point name until it is cancelled, and returns once the turn
// stands there; the prompt's result arrives on the channel.
func promptUntilCancelled(t *testing.T, e *env, name string) <-chan result {
	t.Helper()
	prompt := make(chan result, 1)
	go func() { prompt <- e.run(t.Context(), "", "prompt", "-s", "s1", "pause "+name) }()
	e.Paused(name)
	return prompt
}

// tty is standard input that looks like a terminal.
type tty struct{ io.Reader }

func (tty) Stat() (os.FileInfo, error) { return ttyInfo{}, nil }

type ttyInfo struct{}

func (ttyInfo) Name() string       { return "tty" }
func (ttyInfo) Size() int64        { return 0 }
func (ttyInfo) Mode() os.FileMode  { return os.ModeDevice | os.ModeCharDevice | 0o620 }
func (ttyInfo) ModTime() time.Time { return time.Time{} }
func (ttyInfo) IsDir() bool        { return false }
func (ttyInfo) Sys() any           { return nil }

func TestCancel(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "cancel", "-s", "nobody").err, "session_not_found")
	wantCode(t, e.run(t.Context(), "", "cancel", "-s", "bad.id").err, "invalid_session_id")

	e.open("s1", "demo")
	if r := e.run(t.Context(), "", "cancel", "-s", "s1"); r.err != nil || r.stdout != "no_active_prompt\n" {
		t.Errorf("cancel without a turn = %v, printed %q, want no_active_prompt", r.err, r.stdout)
	}
	req, _ := e.LastRequest(events.OpCancelPrompt).(*events.AcpCancelPromptRequest)
	if req == nil || req.SessionID == nil || *req.SessionID != "s1" {
		t.Errorf("cancel request = %+v, want session s1", req)
	}

	prompt := promptUntilCancelled(t, e, "p1")
	if r := e.run(t.Context(), "", "cancel", "-s", "s1"); r.err != nil || r.stdout != "cancelled\n" {
		t.Errorf("cancel = %v, printed %q, want cancelled", r.err, r.stdout)
	}
	if r := <-prompt; cli.ExitCode(r.err) != cli.ExitCancelled || r.stderr != "stop reason: cancelled\n" {
		t.Errorf("cancelled prompt = %v, stderr %q, want exit code 3 and the stop reason cancelled", r.err, r.stderr)
	}

	if r := e.run(t.Context(), "", "cancel", "extra"); r.err == nil {
		t.Error("cancel with an argument succeeded")
	}
}

// TestCancelPrintsTheOutcome: the outcome of a turn that ended before the
// cancel reached it is printed as it is. That is a race the real services
// lose only by chance, so a stand-in for the session service answers.
func TestCancelPrintsTheOutcome(t *testing.T) {
	e := newEnv(t, withoutBackend)
	e.answerWith(events.OpCancelPrompt, &events.AcpCancelPromptResponse{Status: events.OutcomeCompleted})
	if r := e.run(t.Context(), "", "cancel", "-s", "s1"); r.err != nil || r.stdout != "completed\n" {
		t.Errorf("cancel = %v, printed %q, want completed", r.err, r.stdout)
	}
}

func TestUnload(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "unload", "-s", "nobody").err, "session_not_found")
	wantCode(t, e.run(t.Context(), "", "unload", "-s", "bad.id").err, "invalid_session_id")

	e.open("s1", "demo")
	// Idempotent: an unloaded session unloads again.
	for range 2 {
		if r := e.run(t.Context(), "", "unload", "-s", "s1"); r.err != nil || r.stdout != "unloaded\n" {
			t.Errorf("unload = %v, printed %q, want unloaded", r.err, r.stdout)
		}
	}
	req, _ := e.LastRequest(events.OpUnloadSession).(*events.AcpUnloadSessionRequest)
	if req == nil || req.SessionID == nil || *req.SessionID != "s1" {
		t.Errorf("unload request = %+v, want session s1", req)
	}
	if !e.Unloaded("s1") {
		t.Error("s1 is not unloaded")
	}

	// A running turn is cancelled; its prompt returns stop reason cancelled.
	prompt := promptUntilCancelled(t, e, "p1")
	if r := e.run(t.Context(), "", "unload", "-s", "s1"); r.err != nil || r.stdout != "unloaded\n" {
		t.Errorf("unload = %v, printed %q, want unloaded", r.err, r.stdout)
	}
	if r := <-prompt; cli.ExitCode(r.err) != cli.ExitCancelled || r.stderr != "stop reason: cancelled\n" {
		t.Errorf("prompt of an unloaded session = %v, stderr %q, want exit code 3 and the stop reason cancelled", r.err, r.stderr)
	}

	if r := e.run(t.Context(), "", "unload", "extra"); r.err == nil {
		t.Error("unload with an argument succeeded")
	}
}

// TestUnloadAndDeleteReportUnavailable: the session service answers
// unavailable only in a fault (its owner moving), so a stand-in gives it.
func TestUnloadAndDeleteReportUnavailable(t *testing.T) {
	e := newEnv(t, withoutBackend)
	e.answerWith(events.OpUnloadSession, events.Errorf(events.CodeUnavailable, "owner moving"))
	e.answerWith(events.OpDeleteSession, events.Errorf(events.CodeUnavailable, "owner moving"))
	wantCode(t, e.run(t.Context(), "", "unload", "-s", "s1").err, "unavailable")
	wantCode(t, e.run(t.Context(), "", "delete", "-s", "s1").err, "unavailable")
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	wantCode(t, e.run(t.Context(), "", "delete", "-s", "bad.id").err, "invalid_session_id")

	e.open("s1", "demo")
	// Idempotent: a deleted session, or one that never was, deletes again.
	for _, sid := range []string{"s1", "s1", "nobody"} {
		if r := e.run(t.Context(), "", "delete", "-s", sid); r.err != nil || r.stdout != "deleted\n" {
			t.Errorf("delete -s %s = %v, printed %q, want deleted", sid, r.err, r.stdout)
		}
	}
	req, _ := e.LastRequest(events.OpDeleteSession).(*events.AcpDeleteSessionRequest)
	if req == nil || req.SessionID == nil || *req.SessionID != "nobody" {
		t.Errorf("delete request = %+v, want session nobody", req)
	}
	if e.Exists("s1") {
		t.Error("s1 still exists")
	}
	wantCode(t, e.run(t.Context(), "", "history", "-s", "s1").err, "session_not_found")

	// A running turn is cancelled, then the session goes: its prompt reads
	// the cancellation if it reads the log before the deletion purged it,
	// and otherwise finds no history to catch up from.
	e.open("s1", "demo")
	prompt := promptUntilCancelled(t, e, "p2")
	if r := e.run(t.Context(), "", "delete", "-s", "s1"); r.err != nil || r.stdout != "deleted\n" {
		t.Errorf("delete = %v, printed %q, want deleted", r.err, r.stdout)
	}
	if r := <-prompt; cli.ExitCode(r.err) != cli.ExitCancelled {
		wantCode(t, r.err, "session_not_found")
	} else if !strings.Contains(r.stdout+r.stderr, "cancelled") {
		t.Errorf("the deleted session's prompt returned %q %q, want its turn cancelled or session_not_found", r.stdout, r.stderr)
	}

	if r := e.run(t.Context(), "", "delete", "extra"); r.err == nil {
		t.Error("delete with an argument succeeded")
	}
}

func TestRespond(t *testing.T) {
	e := newEnv(t)
	// The session is always named: without -s it is main, explicitly.
	wantCode(t, e.run(t.Context(), "", "respond", "perm_1", "allow").err, "session_not_found")
	req, _ := e.LastRequest(events.OpRespondPermission).(*events.AcpRespondPermissionRequest)
	if req == nil || req.SessionID != "main" || req.RequestID != "perm_1" || req.OptionID != "allow" {
		t.Errorf("respond request = %+v, want session main, perm_1, allow", req)
	}

	e.open("s1", "demo", "--permission-policy", "ask")
	id, _, _, prompt := promptUntilAsked(t, e, strings.NewReader(""), "-s", "s1", askingTurn(1))

	r := e.run(t.Context(), "", "respond", "-s", "s1", id, "always")
	wantCode(t, r.err, "invalid_permission_option")
	if !strings.Contains(r.err.Error(), `"allow"`) || !strings.Contains(r.err.Error(), `"deny"`) {
		t.Errorf("err = %v, want it to list the valid options", r.err)
	}
	if r := e.run(t.Context(), "", "respond", "-s", "s1", id, "deny"); r.err != nil || r.stdout != "accepted\n" {
		t.Errorf("respond = %v, printed %q, want accepted", r.err, r.stdout)
	}
	if r := e.run(t.Context(), "", "respond", "-s", "s1", id, "allow"); r.err != nil || r.stdout != "not pending: already_resolved\n" {
		t.Errorf("late respond = %v, printed %q, want not pending: already_resolved and no error", r.err, r.stdout)
	}
	if r := e.run(t.Context(), "", "respond", "-s", "s1", "perm_nobody", "allow"); r.err != nil || r.stdout != "not pending: unknown_request\n" {
		t.Errorf("respond to an unknown request = %v, printed %q", r.err, r.stdout)
	}

	p := <-prompt
	want := "[permission] Tool call_1 (request " + id + ")\n" +
		"  1. allow: Allow once (allow_once)\n" +
		"  2. deny: Reject (reject_once)\n" +
		"  answer: skein respond " + id + " <optionId> -s s1\n" +
		"[permission] request " + id + ": accepted (deny)\n" +
		"permission: selected deny\n"
	if p.err != nil || p.stdout != want {
		t.Errorf("prompt = %v, printed\n%s\nwant\n%s", p.err, p.stdout, want)
	}

	wantCode(t, e.run(t.Context(), "", "respond", "-s", "s1", "perm 1", "allow").err, "invalid_request")
	if r := e.run(t.Context(), "", "respond", "-s", "s1", "perm_1"); r.err == nil {
		t.Error("respond without an option ID succeeded")
	}
}

// TestPromptAsksOnTheTerminal: with a terminal for input, prompt asks for
// each choice, by number or option ID, until one is valid.
func TestPromptAsksOnTheTerminal(t *testing.T) {
	e := newEnv(t)
	var stdout, stderr testutil.Buffer
	stdin := tty{strings.NewReader("9\nnope\n\n 2 \nallow\n")}
	err := executeWith(t.Context(), map[string]string{cli.EnvServer: e.url}, stdin, &stdout, &stderr, "prompt", "--policy", "ask", askingTurn(2))
	if err != nil {
		t.Fatalf("prompt: %v\nstderr: %s", err, stderr.String())
	}
	if out := stdout.String(); !strings.HasSuffix(out, "permission: selected allow\n") || !strings.Contains(out, "permission: selected deny\n[permission]") {
		t.Errorf("prompt printed\n%s\nwant the turn to end with deny then allow accepted", stdout.String())
	}
	for _, want := range []string{`"9" is not one of the options`, `"nope" is not one of the options`, "choice for perm_", "[1-2 or option ID]: "} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr = %q, want it to contain %q", stderr.String(), want)
		}
	}
	if n := e.Calls(events.OpRespondPermission); n != 2 {
		t.Errorf("respond_permission calls = %d, want 2 (invalid choices never reach the gateway)", n)
	}
	// The session was new: it was opened with the policy.
	open, _ := e.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
	if open == nil || open.PermissionPolicy == nil || *open.PermissionPolicy != events.PolicyAsk {
		t.Errorf("open request = %+v, want permissionPolicy ask", open)
	}
}

var requestIDRE = regexp.MustCompile(`skein respond (\S+) <optionId>`)

// promptUntilAsked starts `skein prompt args...` with stdin and returns the
// request ID it shows once it shows one, with its output and its result.
func promptUntilAsked(t *testing.T, e *env, stdin io.Reader, args ...string) (string, *testutil.Buffer, *testutil.Buffer, <-chan result) {
	t.Helper()
	var stdout, stderr testutil.Buffer
	done := make(chan result, 1)
	go func() {
		err := executeWith(t.Context(), map[string]string{cli.EnvServer: e.url}, stdin, &stdout, &stderr, append([]string{"prompt"}, args...)...)
		done <- result{stdout: stdout.String(), stderr: stderr.String(), err: err}
	}()
	var id string
	testutil.Eventually(t, "the permission request", func() bool {
		if m := requestIDRE.FindStringSubmatch(stdout.String()); m != nil {
			id = m[1]
		}
		return id != ""
	})
	return id, &stdout, &stderr, done
}

// TestPromptNotInteractive: with --interactive=false, a terminal is never
// read; the request is answered with skein respond.
func TestPromptNotInteractive(t *testing.T) {
	e := newEnv(t)
	id, _, _, done := promptUntilAsked(t, e, tty{strings.NewReader("1\n")}, "--interactive=false", "--policy", "ask", askingTurn(1))
	if r := e.run(t.Context(), "", "respond", id, "deny"); r.err != nil || r.stdout != "accepted\n" {
		t.Fatalf("respond = %v, printed %q", r.err, r.stdout)
	}
	r := <-done
	if r.err != nil || !strings.HasSuffix(r.stdout, "permission: selected deny\n") {
		t.Errorf("prompt = %v, printed\n%s\nwant deny accepted", r.err, r.stdout)
	}
	if n := e.Calls(events.OpRespondPermission); n != 1 {
		t.Errorf("respond_permission calls = %d, want 1: the prompt must not have answered", n)
	}
}

// TestPromptEndOfInput: when the terminal's input ends, prompt stops
// asking and says how to answer instead.
func TestPromptEndOfInput(t *testing.T) {
	e := newEnv(t)
	id, _, stderr, done := promptUntilAsked(t, e, tty{strings.NewReader("")}, "--policy", "ask", askingTurn(1))
	testutil.Eventually(t, "the end of input", func() bool { return strings.Contains(stderr.String(), "end of input") })
	if r := e.run(t.Context(), "", "respond", id, "allow"); r.err != nil || r.stdout != "accepted\n" {
		t.Fatalf("respond = %v, printed %q", r.err, r.stdout)
	}
	if r := <-done; r.err != nil || !strings.HasSuffix(r.stdout, "permission: selected allow\n") {
		t.Errorf("prompt = %v, printed\n%s\nwant allow accepted", r.err, r.stdout)
	}
}

// TestCancelWhileWaitingForPermission: a cancel ends the pending request,
// and the prompt shows why and ends with stop reason cancelled.
func TestCancelWhileWaitingForPermission(t *testing.T) {
	e := newEnv(t)
	id, _, _, done := promptUntilAsked(t, e, strings.NewReader(""), "--policy", "ask", askingTurn(1))
	if r := e.run(t.Context(), "", "cancel"); r.err != nil || r.stdout != "cancelled\n" {
		t.Fatalf("cancel = %v, printed %q", r.err, r.stdout)
	}
	r := <-done
	if cli.ExitCode(r.err) != cli.ExitCancelled || !strings.Contains(r.stdout, "[permission] request "+id+": terminal (prompt_cancelled)\n") || r.stderr != "stop reason: cancelled\n" {
		t.Errorf("prompt = %v, printed\n%s\nstderr %q, want the request ended by the cancel and stop reason cancelled", r.err, r.stdout, r.stderr)
	}
	if r := e.run(t.Context(), "", "respond", id, "allow"); r.err != nil || r.stdout != "not pending: prompt_cancelled\n" {
		t.Errorf("respond after the cancel = %v, printed %q", r.err, r.stdout)
	}
}

func TestPromptRejectsABadPolicy(t *testing.T) {
	e := newEnv(t)
	if r := e.run(t.Context(), "", "prompt", "--policy", "yolo", "hi"); r.err == nil || !strings.Contains(r.err.Error(), "--policy") {
		t.Errorf("prompt --policy yolo = %v, want a --policy error", r.err)
	}
	if n := e.Calls(events.OpOpenSession) + e.Calls(events.OpGetSession); n != 0 {
		t.Errorf("a bad --policy reached the gateway: %d calls", n)
	}
}
