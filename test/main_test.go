// Package test holds Skein's black-box tests: end to end through the
// gateway's HTTP API and the skein command, skein dev and skein serve as
// processes, three-node clusters and their faults, the soak, the capacity
// sweep and the benchmarks, the console in a browser, and the runbook and
// ops examples checked against what the services do.
//
// They drive Skein from outside. A stack in-process is the four services
// as skein runs them, on an embedded NATS server (stacktest.AsSkein); a
// process is the skein binary, built once for the run (skeinBin), which is
// also the test agent ("skein testagent"). This test binary is the test
// agent of the in-process stacks (stacktest.Main).
package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"skein.dev/internal/stacktest"
	"skein.dev/pkg/events"
	"skein.dev/services/gateway"
)

func TestMain(m *testing.M) {
	stacktest.Main(m, func(dir string) error {
		scratch = dir
		return nil
	})
}

// scratch is the run's scratch directory, where skeinBin builds skein.
var scratch string

// testAgentCommand is the argument that makes skein (and this test binary)
// the test agent.
const testAgentCommand = stacktest.AgentArg

// What docs/CLI.md promises the commands use: the variables they read,
// the file skein dev keeps its token in, and the exit codes.
const (
	envServer      = "SKEIN_URL"
	envData        = "SKEIN_DATA"
	devTokenFile   = "dev-token"
	exitOK         = 0
	exitCancelled  = 3
	devUsersDir    = "nats-users" // skein dev's NATS users' URLs, one file each
	devAdminUser   = "skein-ops"  // skein dev's NATS user with every right
	targetRunner   = "adapter-runner"
	buildSkeinTime = 10 * time.Minute
)

var (
	skeinOnce sync.Once
	skeinPath string
	skeinErr  error
)

// skeinBin returns the skein binary, built on first use from the
// workspace, with the race detector when this test binary has it.
func skeinBin(tb testing.TB) string {
	tb.Helper()
	skeinOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildSkeinTime)
		defer cancel()
		bin := filepath.Join(scratch, "skein")
		args := []string{"build", "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		// The go command that runs the tests is on the PATH.
		out, err := exec.CommandContext(ctx, "go", append(args, "skein.dev/cmd/skein")...).CombinedOutput()
		if err != nil {
			skeinErr = fmt.Errorf("go build skein: %v\n%s", err, out)
			return
		}
		skeinPath = bin
	})
	if skeinErr != nil {
		tb.Fatal(skeinErr)
	}
	return skeinPath
}

// stackConfig is the four services' configuration, as skein's flags hold
// it.
type stackConfig = stacktest.Config

// testStack is the four services in-process on one embedded NATS, as
// skein runs them.
type testStack struct {
	*stacktest.Stack
	url  string
	stop func()
}

func startStack(t *testing.T, ns *server.Server, dataDir string) *testStack {
	return startStackTB(t, ns, dataDir)
}

// startStackTB starts the stack; edits change its configuration first.
func startStackTB(t testing.TB, ns *server.Server, dataDir string, edits ...func(*stackConfig)) *testStack {
	t.Helper()
	st := stacktest.Start(t, stacktest.WithServer(ns), stacktest.AsSkein(dataDir, edits...))
	return &testStack{Stack: st, url: st.URL(), stop: st.Stop}
}

// devUserURL returns the URL, credentials included, by which user reaches
// the NATS server of the skein dev whose data directory is data.
func devUserURL(t *testing.T, data, user string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, devUsersDir, user+".url"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// devTokens is the gateway's one token as skein dev gives it: the
// principal "dev", an admin of the default namespace.
func devTokens(token string) []gateway.Token {
	return []gateway.Token{{
		SHA256:     gateway.HashToken(token),
		Principal:  "dev",
		Namespaces: []string{string(events.DefaultNamespace)},
		Role:       gateway.RoleAdmin,
	}}
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%q: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// runSkein runs the skein command line args to its end, with env, a HOME
// of its own and none of the SKEIN_ and NATS_ variables of the test's own
// environment, and returns its exit code and what it printed.
func runSkein(t testing.TB, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), skeinBin(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SKEIN_") && !strings.HasPrefix(kv, "NATS_") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+t.TempDir())
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, exited := errors.AsType[*exec.ExitError](err); err != nil && !exited {
		t.Fatalf("skein %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}
