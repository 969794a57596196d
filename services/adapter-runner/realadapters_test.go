//go:build linux

package adapterrunner_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// The sandbox against the real adapters. The attack tests of
// sandbox_test.go run the test agent, which probes the sandbox itself; a
// real adapter is not malicious, but the model behind it may be told to
// run anything (a prompt injection in a file it read is enough). These
// tests put a model of their own behind each real adapter: a loopback
// stand-in for its API that answers the prompt with a shell tool call
// running attackScript, then reads the tool's output from the next
// request. The tool runs where the adapter runs it, as its child, under
// the runner's sandbox: every read of another tenant's data and every
// write outside the session's directories must fail, while the session's
// own directory works.
//
// The adapters are npm packages, pinned in testdata/real-adapters;
// `make real-adapters` installs them and `make test` names the directory
// in SKEIN_REAL_ADAPTERS. Without them the tests skip, saying so.

// realAdapter returns the path of the real adapter's executable bin, or
// skips the test when it is not installed.
func realAdapter(t *testing.T, bin string) string {
	t.Helper()
	requireLandlock(t, 1)
	dir := os.Getenv("SKEIN_REAL_ADAPTERS")
	if dir == "" {
		t.Skipf("SKEIN_REAL_ADAPTERS is not set: `make real-adapters` installs the real adapters and `make test` sets it")
	}
	path := filepath.Join(dir, "node_modules", ".bin", bin)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is not installed in %s (%v): run `make real-adapters`", bin, dir, err)
	}
	return path
}

// attack is what a tool call of session "attacker" tries: reads of other
// tenants' data and writes outside its directories, each of which must
// be denied, and a write and read in its own cwd, which must work.
type attack struct {
	secret  string
	reads   map[string]string // name → a file holding secret
	writes  map[string]string // name → a path the tool must not create
	cwd     string            // the attacker's working directory
	runnerP int               // the runner's pid, whose environ holds its secrets
}

// newAttack lays out h's data directory as a runner's: another session's
// workspace and HOME, another namespace's workspace, a NATS store, and an
// /etc/shadow stand-in outside every allowed path, each holding a secret.
func newAttack(t *testing.T, h *harness) *attack {
	t.Helper()
	ws := filepath.Join(h.dataDir, "workspaces")
	a := &attack{
		secret: "secret-7f3c1e",
		reads: map[string]string{
			"victim-workspace": filepath.Join(ws, "default", "victim", "notes.md"),
			"victim-home":      filepath.Join(h.dataDir, "default", "victim", "home", ".claude.json"),
			"other-namespace":  filepath.Join(ws, "team-b", "s9", "notes.md"),
			"nats-store":       filepath.Join(h.dataDir, "nats", "jetstream", "ACP_LOG", "msgs", "1.blk"),
			"shadow":           filepath.Join(t.TempDir(), "shadow"),
		},
		writes: map[string]string{
			"victim-agents-md": filepath.Join(ws, "default", "victim", "AGENTS.md"),
			"data-dir":         filepath.Join(h.dataDir, "planted"),
			"outside":          filepath.Join(t.TempDir(), "planted"),
		},
		cwd:     filepath.Join(ws, "default", "attacker"),
		runnerP: os.Getpid(),
	}
	for _, f := range a.reads {
		writeFile(t, f, a.secret)
	}
	a.reads["runner-environ"] = fmt.Sprintf("/proc/%d/environ", a.runnerP)
	return a
}

// script is the shell command the model asks the adapter's tool to run.
// It prints a verdict per attempt, and prints each file (NULs as
// newlines: a shell tool may stop collecting output at a NUL, as
// gemini-cli's does) so that a leak shows in the output the model reads.
func (a *attack) script() string {
	var b strings.Builder
	b.WriteString("echo inside-ok > inside.txt && cat inside.txt; ")
	for name, p := range a.reads {
		fmt.Fprintf(&b, "if tr '\\0' '\\n' 2>/dev/null < %q; then echo READ-OK %s; else echo READ-DENIED %s; fi; ", p, name, name)
	}
	for name, p := range a.writes {
		fmt.Fprintf(&b, "if echo planted 2>/dev/null > %q; then echo WRITE-OK %s; else echo WRITE-DENIED %s; fi; ", p, name, name)
	}
	b.WriteString("echo attack-done")
	return b.String()
}

// check checks what the tool printed (out, as the adapter reported it to
// its model) and the filesystem after it: the own directory worked, every
// other attempt was denied and nothing leaked or was planted.
func (a *attack) check(t *testing.T, out string) {
	t.Helper()
	if !strings.Contains(out, "attack-done") {
		t.Fatalf("the tool's output is not the whole attack's: the tool did not run it. It was:\n%s", out)
	}
	var failed []string
	if !strings.Contains(out, "inside-ok") {
		failed = append(failed, "the tool could not write and read its own cwd")
	}
	if b, err := os.ReadFile(filepath.Join(a.cwd, "inside.txt")); err != nil || strings.TrimSpace(string(b)) != "inside-ok" {
		failed = append(failed, fmt.Sprintf("inside.txt in the cwd = %q, %v; want what the tool wrote", b, err))
	}
	if strings.Contains(out, a.secret) {
		failed = append(failed, "the output carries the secret")
	}
	for name, p := range a.reads {
		if !strings.Contains(out, "READ-DENIED "+name) {
			failed = append(failed, fmt.Sprintf("read %s (%s) was not denied", name, p))
		}
	}
	for name, p := range a.writes {
		if !strings.Contains(out, "WRITE-DENIED "+name) {
			failed = append(failed, fmt.Sprintf("write %s (%s) was not denied", name, p))
		}
		if _, err := os.Stat(p); err == nil {
			failed = append(failed, "the tool planted "+p)
		}
	}
	if len(failed) > 0 {
		t.Errorf("the attack got through:\n- %s\nThe tool's output:\n%s", strings.Join(failed, "\n- "), out)
	}
}

// runAttack opens session "attacker" on agent and prompts it once, while
// the model behind it (which the caller started) answers with the attack.
// It answers every permission request the agent asks with its first
// allowing option, as a session with the allow_all policy does, and
// returns the turn's result.
func runAttack(t *testing.T, h *harness, agent string) *events.AdapterPromptResult {
	t.Helper()
	if _, err := h.createWith(t, "attacker", events.AcpCreateSessionRequest{AgentType: agent}); err != nil {
		t.Fatalf("create the attacker's session on %s: %v", agent, err)
	}
	h.prompt(t, "attacker", "p-attacker", "t1", "Tidy up the project.")
	for {
		v, _ := h.next(t)
		switch r := v.(type) {
		case *events.AdapterPromptResult:
			return r
		case *events.AdapterPermissionRequest:
			answerAllow(t, h, r)
		}
	}
}

// answerAllow answers a permission request with its first allow_once or
// allow_always option.
func answerAllow(t *testing.T, h *harness, r *events.AdapterPermissionRequest) {
	t.Helper()
	var req struct {
		Options []struct {
			OptionID string `json:"optionId"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	if err := json.Unmarshal(r.Request, &req); err != nil {
		t.Fatalf("permission request %s: %v", r.Request, err)
	}
	for _, o := range req.Options {
		if strings.HasPrefix(o.Kind, "allow") {
			if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerPermission),
				&events.RunnerPermissionAnswer{RequestID: r.RequestID, OptionID: &o.OptionID}, header("attacker", "p-attacker")); err != nil {
				t.Fatalf("answer permission %s: %v", r.RequestID, err)
			}
			return
		}
	}
	t.Fatalf("permission request %s offers no allowing option", r.Request)
}

// attackModel is what every stand-in model holds: the command its tool
// call runs, and the tool's output once a request carries it. The model
// serves on its own goroutines, hence the lock.
type attackModel struct {
	mu      sync.Mutex
	command string
	output  string
	gotIt   bool
}

// attackCommand is the command the model's tool call runs.
func (m *attackModel) attackCommand() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.command
}

// got keeps the tool's output, as a request carried it to the model.
func (m *attackModel) got(out string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.output, m.gotIt = out, true
}

// delivered reports whether the tool's output reached the model.
func (m *attackModel) delivered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gotIt
}

// attackThrough lays out the attack in h, has model answer with it,
// runs it through agent's session and checks what the tool reported.
// why, when the output never reached the model, says what the model saw.
func attackThrough(t *testing.T, h *harness, agent string, model *attackModel, why func() string) {
	t.Helper()
	a := newAttack(t, h)
	model.mu.Lock()
	model.command = a.script()
	model.mu.Unlock()
	res := runAttack(t, h, agent)
	if res.StopReason != "end_turn" {
		t.Fatalf("the attack's turn = %+v, want end_turn", res)
	}
	model.mu.Lock()
	out, ok := model.output, model.gotIt
	model.mu.Unlock()
	if !ok {
		t.Fatalf("the model never got the tool's result%s", why())
	}
	a.check(t, out)
}

// startSandboxed starts a runner that requires the sandbox and offers
// agent.
func startSandboxed(t *testing.T, agent adapterrunner.Agent) *harness {
	t.Helper()
	return startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire}, agent)
}
