package adapterrunner_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// setupCall is one session/new, session/load or session/resume an agent
// read, its params exactly as written.
type setupCall struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// setups returns the setup calls in the stdin copy file whose cwd is cwd,
// in order.
func setups(t *testing.T, file, cwd string) []setupCall {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []setupCall
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c setupCall
		var p struct{ Cwd string }
		if json.Unmarshal(sc.Bytes(), &c) != nil || !strings.HasPrefix(c.Method, "session/") || json.Unmarshal(c.Params, &p) != nil || p.Cwd != cwd {
			continue
		}
		switch c.Method {
		case "session/new", "session/load", "session/resume":
			out = append(out, c)
		}
	}
	return out
}

// waitSetups polls file until its setup calls for cwd number at least n
// and the last is method, and returns them.
func waitSetups(t *testing.T, file, cwd string, n int, method string) []setupCall {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		got := setups(t, file, cwd)
		if len(got) >= n && got[len(got)-1].Method == method {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup calls with cwd %s = %+v; want %d or more, the last %s", cwd, got, n, method)
		}
		<-tick.C
	}
}

// says prompts "instructions" and returns what the agent answered.
func (h *harness) says(t *testing.T, sid, processID string) string {
	t.Helper()
	h.prompt(t, sid, processID, "turn-"+processID, "instructions")
	_, before := until[*events.AdapterPromptResult](t, h)
	return strings.Join(updateTexts(before), "")
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A session's instructions (the OS instructions unless it skips them, then
// its additional ones, a blank line between) reach the agent as
// _meta.systemPrompt.append of session/new, and again of every method a
// restore sends, whichever tier it ends on. The rest of the params are
// what they are without instructions, byte for byte.
func TestInstructions(t *testing.T) {
	dir := t.TempDir()
	osFile := filepath.Join(dir, "os-instructions.txt")
	if err := os.WriteFile(osFile, []byte("\n  Operator rules.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	// Each agent's stdin is copied to a file, so the test sees the params
	// exactly as the runner wrote them.
	teed := func(id string, args ...string) adapterrunner.Agent {
		return adapterrunner.Agent{ID: id, Command: "/bin/sh",
			Args: append([]string{"-c", `tee -a "$STDIN_COPY" | exec "$0" "$@"`, testAgent}, args...),
			Env:  map[string]string{"STDIN_COPY": filepath.Join(dir, id+".jsonl")}}
	}
	h := startWith(t, adapterrunner.Config{OSInstructionsFile: osFile},
		teed("resumer", "--resume", "--state-dir", state),
		teed("loader", "--load-session", "--state-dir", state),
		teed("forgetful", "--load-session"))

	brief := "be brief"
	settings := []struct {
		name       string
		skip       bool
		additional *string
		want       string
	}{
		{"os and additional", false, &brief, "Operator rules.\n\nbe brief"},
		{"os only", false, nil, "Operator rules."},
		{"skip os", true, &brief, "be brief"},
		{"none", true, nil, ""},
	}
	for _, tier := range []struct{ agent, tier, method string }{
		{"resumer", events.TierResume, "session/resume"},
		{"loader", events.TierLoad, "session/load"},
		{"forgetful", events.TierFallback, "session/new"},
	} {
		for i, st := range settings {
			t.Run(tier.agent+"/"+st.name, func(t *testing.T) {
				sid := fmt.Sprintf("%s-%d", tier.agent, i)
				copyFile := filepath.Join(dir, tier.agent+".jsonl")
				cwd := filepath.Join(h.dataDir, "workspaces", "default", sid) // the default cwd: <root>/<ns>/<sid>
				meta := ""
				if st.want != "" {
					meta = `,"_meta":{"systemPrompt":{"append":` + quote(st.want) + `}}`
				}
				wantAnswer := "instructions: " + st.want
				if st.want == "" {
					wantAnswer = "instructions: (none)"
				}

				created, err := rpc.Call[events.AcpSessionCreatedResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate),
					&events.AcpCreateSessionRequest{AgentType: tier.agent, ProtocolVersion: 1, McpServers: events.JSON("[]"),
						SkipOsInstructions: st.skip, AdditionalInstructions: st.additional}, header(sid, "p1"))
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				calls := waitSetups(t, copyFile, cwd, 1, "session/new")
				if want := `{"cwd":` + quote(cwd) + `,"mcpServers":[]` + meta + `}`; string(calls[0].Params) != want {
					t.Errorf("session/new params = %s, want %s", calls[0].Params, want)
				}
				if got := h.says(t, sid, "p1"); got != wantAnswer {
					t.Errorf("after create the agent says %q, want %q", got, wantAnswer)
				}
				if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
					&events.AcpCloseSessionRequest{}, header(sid, "p1")); err != nil {
					t.Fatal(err)
				}

				ready, err := rpc.Call[events.AdapterReady](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerRestore),
					&events.RestoreRequest{
						Resume:             events.AcpResumeSessionRequest{SessionID: created.SessionID, AgentType: tier.agent, McpServers: events.JSON("[]")},
						SkipOsInstructions: st.skip, AdditionalInstructions: st.additional,
					}, header(sid, "p2"))
				if err != nil {
					t.Fatalf("restore: %v", err)
				}
				if ready.Tier != tier.tier {
					t.Errorf("restore tier = %s, want %s", ready.Tier, tier.tier)
				}
				// Every method the ladder tried carried the instructions.
				calls = waitSetups(t, copyFile, cwd, 2, tier.method)
				for _, c := range calls[1:] {
					want := `{"sessionId":` + quote(created.SessionID) + `,"cwd":` + quote(cwd) + `,"mcpServers":[]` + meta + `}`
					if c.Method == "session/new" {
						want = `{"cwd":` + quote(cwd) + `,"mcpServers":[]` + meta + `}`
					}
					if string(c.Params) != want {
						t.Errorf("%s params = %s, want %s", c.Method, c.Params, want)
					}
				}
				if got := h.says(t, sid, "p2"); got != wantAnswer {
					t.Errorf("after a %s restore the agent says %q, want %q", ready.Tier, got, wantAnswer)
				}
			})
		}
	}
}

// RunnerRestore takes a RestoreRequest and nothing else: a bare
// AcpResumeSessionRequest, which carries no instruction settings, is
// refused like any other request.
func TestRestoreTakesOnlyRestoreRequest(t *testing.T) {
	h := startWith(t, adapterrunner.Config{},
		adapterrunner.Agent{ID: "resumer", Command: testAgent, Args: []string{"--resume", "--state-dir", t.TempDir()}})
	for _, req := range []events.Variant{
		&events.AcpResumeSessionRequest{SessionID: "acp-1", AgentType: "resumer", McpServers: events.JSON("[]")},
		&events.AcpCloseSessionRequest{SessionID: "x"},
	} {
		_, err := rpc.Call[events.AdapterReady](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerRestore), req, header("s1", "p1"))
		if events.AsError(err) == nil || events.AsError(err).Code != events.CodeInvalidPayload {
			t.Errorf("restore with %s = %v, want %s", req.VariantName(), err, events.CodeInvalidPayload)
		}
	}
}

// A missing OS instructions file is a configuration error.
func TestOSInstructionsFileMissing(t *testing.T) {
	_, err := adapterrunner.New(adapterrunner.Config{DataDir: t.TempDir(), OSInstructionsFile: filepath.Join(t.TempDir(), "nope")},
		slog.New(slog.DiscardHandler), nil, prometheus.NewRegistry())
	if err == nil || !strings.Contains(err.Error(), "adapter-runner.os-instructions-file") {
		t.Errorf("New with a missing OS instructions file = %v, want an error naming the flag", err)
	}
}
