package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/testagent"
)

// TestKillDevMidTurn is what a user does by accident: `kill -9` of
// `skein dev` while a turn runs, then start it again. No adapter process
// outlives the stack (the agent here ignores stdin EOF, as claude-code-acp
// and codex-acp do), and the restarted stack resolves the open turn within
// 20 s with no request sent to the session: it reads the log at start-up.
func TestKillDevMidTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	exe := skeinBin(t)
	data, control := testutil.TempDir(t), t.TempDir()
	agents := filepath.Join(t.TempDir(), "agents.json")
	registry, _ := json.Marshal(map[string]any{"agents": []map[string]any{{
		"id": "stubborn", "command": exe, "args": []string{testAgentCommand, "--exit-on-eof=false"},
		"env": map[string]string{testagent.EnvControlDir: control},
		// The test agent's pause points live outside its session.
		"sandbox": map[string]any{"write": []string{control}},
	}}})
	if err := os.WriteFile(agents, registry, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	dev := startDev(t, exe, data, agents)
	if err := pollHTTP(t, http.MethodPut, dev.base+"s1", `{"agent":"stubborn"}`); err != nil {
		t.Fatal(err)
	}
	// The prompt's HTTP request dies with the process: nobody retries it.
	promptCtx, cancelPrompt := context.WithCancel(ctx)
	defer cancelPrompt()
	go postPrompt(promptCtx, dev.base+"s1/prompt", "", "chunks 2 working\npause p1\nsay done")
	if err := testagent.WaitPaused(ctx, control, "p1"); err != nil {
		t.Fatal(err)
	}
	js := dev.js(t)
	attached, err := lastRecord[events.AdapterAttached](ctx, js, "s1")
	if err != nil || attached == nil || attached.Pid == nil {
		t.Fatalf("the adapter's pid: %+v, %v", attached, err)
	}
	pid := int(*attached.Pid)

	dev.kill(t)
	if err := pollFor(ctx, "the adapter to die with its runner", func() bool { return !processAlive(pid) }); err != nil {
		t.Fatal(err)
	}

	dev = startDev(t, exe, data, agents)
	js = dev.js(t)
	var finished *events.TurnFinished
	if err := pollFor(ctx, "the open turn to be resolved", func() bool {
		finished, _ = lastRecord[events.TurnFinished](ctx, js, "s1")
		return finished != nil
	}); err != nil {
		t.Fatal(err)
	}
	if finished.Outcome != events.OutcomeFailed || finished.Error == nil ||
		(finished.Error.Code != string(events.CodePromptDeliveryUncertain) && finished.Error.Code != string(events.CodeAdapterExited)) {
		t.Errorf("the turn left open = %+v, want failed prompt_delivery_uncertain or adapter_exited", finished)
	}
	t.Logf("the turn left open by the kill: %s %s", finished.Outcome, finished.Error.Code)
	eventlogtest.Audit(t, js, "default", "s1")
	cancelPrompt()
}

// devProcess is `skein dev` running as a process of the test binary, with
// its NATS server listening on loopback so the test reads the log directly.
type devProcess struct {
	cmd     *exec.Cmd
	base    string // http://…/v1/sessions/
	natsURL string
	out     *testutil.Buffer
}

func startDev(t *testing.T, exe, data, agents string) *devProcess {
	t.Helper()
	// Port 0 for both: skein dev picks free ports and prints them (a port
	// the test picked could be taken by another process before skein binds).
	out := &testutil.Buffer{}
	cmd := exec.Command(exe, "dev", "--data", data, "--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--agents", agents, "--log-level", "warn",
		"--gateway.insecure-no-auth") // the test's requests carry no token: TestDevToken covers it
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("skein dev output:\n%s", out)
		}
	})
	var httpURL, natsURL string
	if err := pollFor(t.Context(), "skein dev's welcome", func() bool {
		httpURL, natsURL = welcomeURL(out.String(), "HTTP"), welcomeURL(out.String(), "NATS")
		return httpURL != "" && natsURL != ""
	}); err != nil {
		t.Fatal(err)
	}
	// The test reads the log as skein dev's admin: its NATS takes no
	// client without a user.
	return &devProcess{cmd: cmd, base: httpURL + "/v1/sessions/", natsURL: devUserURL(t, data, devAdminUser), out: out}
}

// welcomeURL returns the URL skein dev's welcome prints after label
// ("HTTP", "NATS"), or "".
func welcomeURL(out, label string) string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == label {
			return f[1]
		}
	}
	return ""
}

func (d *devProcess) kill(t *testing.T) {
	if err := d.cmd.Process.Kill(); err != nil { // SIGKILL: nothing is cleaned up
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
}

func (d *devProcess) js(t *testing.T) jetstream.JetStream {
	t.Helper()
	var nc *nats.Conn
	err := pollFor(t.Context(), "skein dev's NATS server", func() bool {
		var err error
		nc, err = nats.Connect(d.natsURL)
		return err == nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// lastRecord returns the newest control record of type T in session sid's
// log, or nil.
func lastRecord[T any, PT interface {
	*T
	events.Variant
}](ctx context.Context, js jetstream.JetStream, sid events.SessionID) (PT, error) {
	last, err := eventlog.Last(ctx, js, events.StreamLog, events.LogFilter("default", sid))
	if err != nil || last == nil {
		return nil, err
	}
	recs, err := eventlog.Backward(ctx, js, events.StreamLog, events.LogSubject("default", sid, events.LogControl), last.Sequence+1, 100)
	if err != nil {
		return nil, err
	}
	for _, r := range slices.Backward(recs) {
		if v, err := events.Decode[T, PT](r.Data); err == nil {
			return v, nil
		}
	}
	return nil, nil
}

// processAlive reports whether pid runs: it exists and is not a zombie
// (one whose parent died is reaped by init, or by nobody in a container).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(string(rest)), "Z")
}
