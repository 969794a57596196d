package cli_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

// TestExitCodes: each documented exit code, for the case it names.
func TestExitCodes(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo")
	noToken := map[string]string{cli.EnvServer: e.url, cli.EnvData: t.TempDir()}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		msg  string // the error names it
	}{
		{"success", noToken, []string{"history", "-s", "s1"}, cli.ExitOK, ""},
		{"an unknown flag", noToken, []string{"history", "--bogus"}, cli.ExitUsage, "bogus"},
		{"a missing argument", noToken, []string{"respond", "r1"}, cli.ExitUsage, "accepts 2 arg"},
		{"an empty prompt", noToken, []string{"prompt", " "}, cli.ExitUsage, "empty"},
		{"a flag the existing session ignores", noToken, []string{"prompt", "-s", "s1", "--agent", "plain", "hi"}, cli.ExitUsage, "--agent"},
		{"--cwd for an existing session", noToken, []string{"prompt", "-s", "s1", "--cwd", "/tmp", "hi"}, cli.ExitUsage, "--cwd"},
		{"no such session", noToken, []string{"history", "-s", "nobody"}, cli.ExitNotFound, "[gateway " + e.url + "]"},
		{"a failed turn", noToken, []string{"prompt", "-s", "s1", "error -32000 boom"}, cli.ExitTurnFailed, "adapter_error"},
		{"no gateway at host:port", noToken, []string{"agents", "--server", "127.0.0.1:1"}, cli.ExitUnavailable, "cannot reach the gateway at http://127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr testutil.Buffer
			err := execute(t.Context(), tt.env, "", &stdout, &stderr, tt.args...)
			if got := cli.ExitCode(err); got != tt.code {
				t.Fatalf("skein %s = %v (exit %d), want exit %d", strings.Join(tt.args, " "), err, got, tt.code)
			}
			if tt.msg != "" && !strings.Contains(err.Error()+stderr.String(), tt.msg) {
				t.Errorf("skein %s = %v, stderr %q; want it to say %q", strings.Join(tt.args, " "), err, stderr.String(), tt.msg)
			}
		})
	}
	// The refused flags sent nothing: s1 ran only the failed turn.
	if n := e.Calls(events.OpPrompt); n != 1 {
		t.Errorf("prompt calls = %d, want 1: a refused flag must not prompt", n)
	}

	// Unauthenticated: the error names the gateway and where the token
	// came from.
	a := newEnv(t, withTokens(gateway.Token{SHA256: gateway.HashToken("secret"), Principal: "alice", Namespaces: []string{"default"}, Role: gateway.RoleAdmin}))
	data := t.TempDir()
	var stdout, stderr testutil.Buffer
	err := execute(t.Context(), map[string]string{cli.EnvServer: a.url, cli.EnvData: data}, "", &stdout, &stderr, "agents")
	want := "[gateway " + a.url + ", token: no token (no --token, $SKEIN_TOKEN or " + filepath.Join(data, cli.DevTokenFile) + ")]"
	if cli.ExitCode(err) != cli.ExitUnauth || !strings.Contains(err.Error(), want) {
		t.Errorf("agents without a token = %v (exit %d), want exit %d naming %q", err, cli.ExitCode(err), cli.ExitUnauth, want)
	}
	err = execute(t.Context(), map[string]string{cli.EnvServer: a.url, cli.EnvToken: "wrong"}, "", &stdout, &stderr, "agents")
	if cli.ExitCode(err) != cli.ExitUnauth || !strings.Contains(err.Error(), "token: $SKEIN_TOKEN]") {
		t.Errorf("agents with a wrong token = %v, want exit %d naming $SKEIN_TOKEN", err, cli.ExitUnauth)
	}
}

// interrupted runs skein with args, presses Ctrl-C once its output
// holds ready, and returns what the command returned and printed, once
// session s1 is idle again. The first Ctrl-C must not end the command's
// context: the command ends by itself, with the turn.
func (e *env) interrupted(t *testing.T, ready string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	intr, ctx := cli.NewInterrupts(t.Context())
	var out, errOut testutil.Buffer
	done := make(chan error, 1)
	go func() { done <- execute(ctx, map[string]string{cli.EnvServer: e.url}, "", &out, &errOut, args...) }()
	testutil.Eventually(t, "skein to print "+ready, func() bool { return strings.Contains(out.String(), ready) })
	if !intr.Interrupt() {
		t.Fatalf("skein %s did not take the Ctrl-C", args[0])
	}
	err = <-done
	if ctx.Err() != nil {
		t.Error("the first Ctrl-C ended the command's context")
	}
	testutil.Eventually(t, "s1 idle after the cancel", func() bool {
		st := e.State("s1")
		return st != nil && st.Status == "idle"
	})
	return out.String(), errOut.String(), err
}

// TestCtrlCCancelsTheTurn: the first Ctrl-C of a prompt cancels its turn,
// which the command waits for and reports (exit code 3); the session is
// left idle.
func TestCtrlCCancelsTheTurn(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo")
	stdout, stderr, err := e.interrupted(t, "started", "prompt", "-s", "s1", "say started\nsleep 1h\nsay never")
	if cli.ExitCode(err) != cli.ExitCancelled || !strings.Contains(stderr, "cancelling the turn") ||
		!strings.HasSuffix(stderr, "stop reason: cancelled\n") || strings.Contains(stdout, "never") {
		t.Errorf("prompt = %v (exit %d), printed %q, stderr %q; want exit 3 and the cancel reported", err, cli.ExitCode(err), stdout, stderr)
	}
}

// TestCtrlCAtAnInputRequest: Ctrl-C while the turn waits for an answer
// to the agent's input request cancels the turn; it is not left waiting.
func TestCtrlCAtAnInputRequest(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo")
	stdout, stderr, err := e.interrupted(t, "[input] ", "prompt", "-s", "s1", `elicit {"type":"object","properties":{"name":{"type":"string"}}}`)
	if cli.ExitCode(err) != cli.ExitCancelled {
		t.Errorf("prompt = %v (exit %d), printed %q, stderr %q; want exit 3", err, cli.ExitCode(err), stdout, stderr)
	}
}

// TestAttach: attach shows a running turn from its prompt on, then live,
// and ends with it.
func TestAttach(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo")
	if r := e.run(t.Context(), "", "attach", "-s", "s1"); r.err != nil || r.stderr != "session s1 has no running turn (it is idle)\n" {
		t.Errorf("attach to an idle session = %v, stderr %q", r.err, r.stderr)
	}
	script := "say first\ntool c1 Read\npause p1\nsay second"
	prompt := make(chan result, 1)
	go func() { prompt <- e.run(t.Context(), "", "prompt", "-s", "s1", script) }()
	e.Paused("p1")
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(t.Context(), map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr, "attach", "-s", "s1")
	}()
	past := "> say first\n> tool c1 Read\n> pause p1\n> say second\nfirst\n[tool] Read: pending\n[tool] Read: completed\n"
	testutil.Eventually(t, "the turn so far", func() bool { return stdout.String() == past })
	e.Release("p1")
	if err := <-done; err != nil || stdout.String() != past+"second\n" {
		t.Errorf("attach = %v, printed %q, stderr %q; want %q", err, stdout.String(), stderr.String(), past+"second\n")
	}
	if r := <-prompt; r.err != nil || r.stdout != "first\n[tool] Read: pending\n[tool] Read: completed\nsecond\n" {
		t.Errorf("prompt = %v, printed %q", r.err, r.stdout)
	}
}

// restartable is a gateway in front of an env's services that a test
// stops and starts again on the same address, as a deployment restarts
// its gateway.
type restartable struct {
	e    *env
	addr string
	stop func()
}

func startGateway(t *testing.T, e *env, addr string) *restartable {
	t.Helper()
	cfg := gateway.DefaultConfig()
	cfg.Addr = addr
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	gw, err := gateway.New(cfg, lg, natstest.Connect(t, e.Server()), nil)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- gw.Run(ctx) }()
	select {
	case <-gw.Ready():
	case err := <-ran:
		cancel()
		t.Fatalf("gateway: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("gateway: %v", err)
		}
	}
	t.Cleanup(stop)
	return &restartable{e: e, addr: gw.Addr(), stop: stop}
}

// durableSeqs returns the sequences of the durable events among JSON
// lines, state events left out.
func durableSeqs(t *testing.T, out string) []string {
	t.Helper()
	var seqs []string
	for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		var ev struct {
			Sequence   uint64 `json:"sequence"`
			Durability string `json:"durability"`
			Type       string `json:"type"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if ev.Durability == "durable" && ev.Type != "session_state" {
			seqs = append(seqs, strconv.FormatUint(ev.Sequence, 10))
		}
	}
	return seqs
}

// TestFollowersSurviveAGatewayRestart: events and watch go on across a
// restart of the gateway, resuming from their cursor: every durable event
// once, in order.
func TestFollowersSurviveAGatewayRestart(t *testing.T) {
	for _, args := range [][]string{{"events", "--json"}, {"watch", "--json", "--timeout", "1s"}} {
		t.Run(args[0], func(t *testing.T) {
			e := newEnv(t)
			e.open("s1", "demo")
			gw := startGateway(t, e, "127.0.0.1:0")
			url := "http://" + gw.addr
			ctx, cancel := context.WithCancel(t.Context())
			var stdout, stderr testutil.Buffer
			done := make(chan error, 1)
			go func() {
				done <- execute(ctx, map[string]string{cli.EnvServer: url}, "", &stdout, &stderr, append(args, "-s", "s1")...)
			}()
			e.Turn("s1", "say one")
			testutil.Eventually(t, "the first turn", func() bool { return strings.Contains(stdout.String(), `"text":"one"`) })
			// The gateway stops; the follower says it lost it, and goes on
			// once another gateway serves the address.
			gw.stop()
			testutil.Eventually(t, "the outage reported", func() bool { return strings.Contains(stderr.String(), "skein: ") })
			startGateway(t, e, gw.addr)
			e.Turn("s1", "say two")
			testutil.Eventually(t, "the turn after the restart", func() bool { return strings.Contains(stdout.String(), `"text":"two"`) })
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s = %v after interrupt, want nil", args[0], err)
			}
			want := e.EventsFrom("s1", 1)
			var wantSeqs []string
			for _, s := range want {
				wantSeqs = append(wantSeqs, strconv.FormatUint(s, 10))
			}
			if got := durableSeqs(t, stdout.String()); strings.Join(got, ",") != strings.Join(wantSeqs, ",") {
				t.Errorf("%s printed durable events %v, want %v once each", args[0], got, wantSeqs)
			}
			// Nor is a state event printed twice: the new stream resumes
			// after the cursor, and the client dedupes by sequence.
			seen := map[string]bool{}
			for line := range strings.SplitSeq(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
				var ev struct {
					Sequence uint64 `json:"sequence"`
					Type     string `json:"type"`
					Change   string `json:"change"`
				}
				if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "session_state" {
					key := ev.Change + "@" + strconv.FormatUint(ev.Sequence, 10)
					if seen[key] {
						t.Errorf("state event %s printed twice", key)
					}
					seen[key] = true
				}
			}
			if !strings.Contains(stderr.String(), "reconnected to "+url) {
				t.Errorf("%s said nothing of the reconnect: stderr %q", args[0], stderr.String())
			}
		})
	}
}

// TestCompletion: session IDs, agents and runners are completed from the
// gateway.
func TestCompletion(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo")
	e.open("s2", "demo")
	env := map[string]string{cli.EnvServer: e.url}
	complete := func(args ...string) string {
		var stdout, stderr testutil.Buffer
		if err := execute(t.Context(), env, "", &stdout, &stderr, append([]string{"__complete"}, args...)...); err != nil {
			t.Fatalf("__complete %v: %v", args, err)
		}
		return stdout.String() + stderr.String() // executeWith sends cobra's own output to stderr
	}
	testutil.Eventually(t, "both sessions completed", func() bool {
		out := complete("history", "-s", "")
		return strings.Contains(out, "s1\tidle\n") && strings.Contains(out, "s2\tidle\n") && strings.Contains(out, "\n:4\n")
	})
	if out := complete("prompt", "-s", "s2", "--agent", "d"); !strings.Contains(out, "demo\tinstalled\n") || strings.Contains(out, "other") {
		t.Errorf("completion of --agent d = %q, want demo alone", out)
	}
	if out := complete("open", "--runner", ""); !strings.HasPrefix(out, "r1\n") && !strings.HasPrefix(out, "r1\t") {
		t.Errorf("completion of --runner = %q, want r1", out)
	}
}

// TestVersions: skein version names the binary's, skein info the gateway's.
func TestVersions(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo")
	if r := e.run(t.Context(), "", "version"); r.err != nil || !regexp.MustCompile(`^skein \S+\n$`).MatchString(r.stdout) {
		t.Errorf("version = %v, printed %q", r.err, r.stdout)
	}
	r := e.run(t.Context(), "", "info", "-s", "s1")
	if r.err != nil || !regexp.MustCompile(`^server: `+regexp.QuoteMeta(e.url)+` \S+\nagentInfo: `).MatchString(r.stdout) || strings.Contains(r.stdout, "reports no version") {
		t.Errorf("info = %v, printed %q; want the gateway's URL and version first", r.err, r.stdout)
	}
}

// TestNewSessionWorksInTheShellsDirectory: prompt and open give a new
// session the shell's directory when the workspace holds it, and nothing
// (the server's default) when it does not; an existing session keeps its
// own.
func TestNewSessionWorksInTheShellsDirectory(t *testing.T) {
	e := newEnv(t)
	openedIn := func() string {
		t.Helper()
		req, _ := e.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
		if req == nil {
			t.Fatal("no open request")
		}
		if req.Cwd == nil {
			return ""
		}
		return *req.Cwd
	}
	same := func(a, b string) bool {
		ra, errA := filepath.EvalSymlinks(a)
		rb, errB := filepath.EvalSymlinks(b)
		return errA == nil && errB == nil && ra == rb
	}
	project := e.WorkDir("project")
	t.Chdir(project)
	if r := e.run(t.Context(), "", "prompt", "-s", "here", "hi"); r.err != nil {
		t.Fatalf("prompt: %v %s", r.err, r.stderr)
	}
	if cwd := openedIn(); !same(cwd, project) {
		t.Errorf("prompt opened in %q, want the shell's %s", cwd, project)
	}
	if r := e.run(t.Context(), "", "open", "-s", "there"); r.err != nil {
		t.Fatalf("open: %v %s", r.err, r.stderr)
	}
	if cwd := openedIn(); !same(cwd, project) {
		t.Errorf("open opened in %q, want the shell's %s", cwd, project)
	}
	// Reopened from another directory, an existing session keeps its own.
	t.Chdir(e.WorkDir("elsewhere"))
	if r := e.run(t.Context(), "", "open", "-s", "there"); r.err != nil {
		t.Fatalf("reopen: %v %s", r.err, r.stderr)
	}
	if cwd := openedIn(); !same(cwd, project) {
		t.Errorf("reopen sent cwd %q, want the session's own %s", cwd, project)
	}
	// Outside the workspace, the server's default.
	t.Chdir(t.TempDir())
	if r := e.run(t.Context(), "", "prompt", "-s", "away", "hi"); r.err != nil {
		t.Fatalf("prompt outside the workspace: %v %s", r.err, r.stderr)
	}
	if cwd := openedIn(); cwd != "" {
		t.Errorf("prompt outside the workspace sent cwd %q, want none", cwd)
	}
}

// TestEventsHuman: skein events renders the turns a session runs, and
// when each begins and ends, as a second viewer sees them.
func TestEventsHuman(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo")
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(ctx, map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr, "events", "-s", "s1")
	}()
	if r := e.run(t.Context(), "", "prompt", "-s", "s1", "say hi"); r.err != nil {
		t.Fatalf("prompt: %v", r.err)
	}
	want := regexp.MustCompile(`^— turn (\S+) started\n> say hi\nhi\n— turn (\S+) ended: end_turn\n$`)
	testutil.Eventually(t, "the turn from start to end", func() bool { return want.MatchString(stdout.String()) })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("events = %v after interrupt", err)
	}
	if m := want.FindStringSubmatch(stdout.String()); m == nil || m[1] != m[2] {
		t.Errorf("events printed %q, want one turn started and ended", stdout.String())
	}
}

// TestCtrlCInAttach: Ctrl-C in attach cancels the turn it shows, which
// both attach and the prompt that started it report as cancelled.
func TestCtrlCInAttach(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo")
	prompt := make(chan result, 1)
	go func() { prompt <- e.run(t.Context(), "", "prompt", "-s", "s1", "say \"waiting\\n\"\npause p1") }()
	e.Paused("p1")
	intr, ctx := cli.NewInterrupts(t.Context())
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(ctx, map[string]string{cli.EnvServer: e.url}, "", &stdout, &stderr, "attach", "-s", "s1")
	}()
	// The message in progress is not in history yet; the prompt is.
	testutil.Eventually(t, "the turn so far", func() bool { return strings.Contains(stdout.String(), "> pause p1\n") })
	if !intr.Interrupt() {
		t.Fatal("attach did not take the Ctrl-C")
	}
	if err := <-done; cli.ExitCode(err) != cli.ExitCancelled || !strings.HasSuffix(stderr.String(), "stop reason: cancelled\n") {
		t.Errorf("attach = %v (exit %d), stderr %q; want exit 3 and the cancel reported", err, cli.ExitCode(err), stderr.String())
	}
	if r := <-prompt; cli.ExitCode(r.err) != cli.ExitCancelled {
		t.Errorf("the prompt = %v, want its turn cancelled", r.err)
	}
}
