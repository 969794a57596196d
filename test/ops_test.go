package test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// natsCLIVersion is the nats CLI the operations docs are checked against.
const natsCLIVersion = "v0.5.0"

// TestOperateWithNatsCLI checks what docs/ARCHITECTURE.md and the README
// tell operators to run with the nats CLI against a running Skein: the
// owner of a session is a KV lookup naming a session replica that
// `nats micro ls` lists, `nats micro stats` counts the forwarded requests
// apart, and the log is a plain stream whose records name their variant.
func TestOperateWithNatsCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the nats CLI and starts processes; skipped in -short")
	}
	natsCLI := buildNatsCLI(t)
	ps := startProcessStack(t)
	ps.startSession(io.Discard)
	if err := pollHTTP(t, http.MethodPut, ps.base+"ops", `{"agent":"test"}`); err != nil {
		t.Fatal(err)
	}
	if code, body := postPrompt(t.Context(), ps.base+"ops/prompt", "", "say hello"); code != http.StatusOK {
		t.Fatalf("prompt = %d %s", code, body)
	}
	nats := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), natsCLI, append([]string{"--server", ps.ns.ClientURL()}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	owner := strings.TrimSpace(nats("kv", "get", "ACP_OWNERS", "default.ops", "--raw"))
	var replicas []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(nats("micro", "ls", "skein-session", "--json")), &replicas); err != nil {
		t.Fatalf("nats micro ls --json: %v", err)
	}
	if owner == "" || !slices.ContainsFunc(replicas, func(r struct {
		ID string `json:"id"`
	}) bool {
		return r.ID == owner
	}) {
		t.Errorf("owner of default.ops %q is not among the replicas nats micro ls lists: %+v", owner, replicas)
	}
	if out := nats("micro", "stats", "skein-session"); !strings.Contains(out, "prompt") {
		t.Errorf("nats micro stats skein-session does not show the prompt endpoint:\n%s", out)
	}
	// Every record names its variant in a header, so the log reads without
	// decoding: the newest control record of the session ended its turn.
	if out := nats("stream", "get", "ACP_LOG", "--last-for", "acp.log.default.ops.ctl"); !strings.Contains(out, "Acp-Record: TurnFinished") {
		t.Errorf("nats stream get of the session's newest control record does not name TurnFinished:\n%s", out)
	}
}

// buildNatsCLI installs the nats CLI at natsCLIVersion from the Go module
// proxy, outside the workspace, into a directory kept for the test, and
// returns its path. Without the proxy (offline) the test is skipped.
func buildNatsCLI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "go", "install", "github.com/nats-io/natscli/nats@"+natsCLIVersion)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("cannot build the nats CLI %s (is the Go module proxy reachable?): %v\n%s", natsCLIVersion, err, out)
	}
	return filepath.Join(dir, "nats")
}
