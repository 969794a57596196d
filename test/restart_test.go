package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

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

	dev := mustStartDev(t, devOptions{data: data, agents: agents, natsListen: true, flags: []string{"--log-level", "warn"}})
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

	dev.kill()
	if err := pollFor(ctx, "the adapter to die with its runner", func() bool { return !processAlive(pid) }); err != nil {
		t.Fatal(err)
	}

	dev = mustStartDev(t, devOptions{data: data, agents: agents, natsListen: true, flags: []string{"--log-level", "warn"}})
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
