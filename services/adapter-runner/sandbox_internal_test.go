//go:build linux

package adapterrunner

import (
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// Where the kernel cannot confine an adapter (no Landlock, or too old an
// ABI to deny the network), adapter-runner.sandbox decides: require
// refuses the adapter agent_unavailable; warn starts it unconfined by
// Landlock (or with network), through the launcher all the same, and says
// so in the log; off never confines. Every
// machine that runs the tests has Landlock, so the kernel's answer is
// given here by hand.
func TestSecuritySandboxWithoutLandlock(t *testing.T) {
	noNet := sandboxPolicy{Read: []string{"/usr"}, NoNetwork: true}
	for _, c := range []struct {
		name     string
		mode     SandboxMode
		abi      int
		policy   sandboxPolicy
		refused  bool
		launcher bool   // started through the launcher: no privilege, seccomp, Landlock if the kernel has it
		warning  string // in the log
	}{
		{"require, no Landlock", SandboxRequire, 0, sandboxPolicy{}, true, false, ""},
		{"warn, no Landlock", SandboxWarn, 0, sandboxPolicy{}, false, true, "UNCONFINED"},
		{"off, no Landlock", SandboxOff, 0, sandboxPolicy{}, false, false, ""},
		{"off, Landlock", SandboxOff, 7, sandboxPolicy{}, false, false, ""},
		{"require, Landlock", SandboxRequire, 7, sandboxPolicy{}, false, true, ""},
		{"require, no network below ABI 4", SandboxRequire, 3, noNet, true, false, ""},
		{"warn, no network below ABI 4", SandboxWarn, 3, noNet, false, true, "WITH network"},
		{"require, no network at ABI 4", SandboxRequire, 4, noNet, false, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &testutil.Buffer{}
			s := &sandbox{mode: c.mode, abi: c.abi, lg: slog.New(slog.NewTextHandler(logs, nil))}
			cmd, err := s.command("agent-x", "/usr/bin/true", []string{"-v"}, c.policy)
			if c.refused {
				if e := events.AsError(err); e == nil || e.Code != events.CodeAgentUnavailable || !strings.Contains(e.Message, "agent-x") {
					t.Fatalf("command = %v, want agent_unavailable naming the agent", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if confined := cmd.Args[0] == launcherName; confined != c.launcher {
				t.Errorf("started as %q: confined %v, want %v", cmd.Args, confined, c.launcher)
			}
			if c.warning != "" && !strings.Contains(logs.String(), c.warning) {
				t.Errorf("log %q does not say %q", logs.String(), c.warning)
			}
			if c.warning == "" && logs.String() != "" {
				t.Errorf("log %q, want nothing", logs.String())
			}
			if skip := strings.Contains(strings.Join(cmd.Args, " "), `"noLandlock":true`); c.launcher && skip != (c.abi == 0) {
				t.Errorf("started as %q: the launcher skips Landlock %v, want %v", cmd.Args, skip, c.abi == 0)
			}
			if c.launcher && c.mode == SandboxWarn && strings.Contains(strings.Join(cmd.Args, " "), `"noNetwork":true`) {
				t.Errorf("warn below ABI 4 still asks the launcher to deny the network: %q", cmd.Args)
			}
		})
	}
}

// Where the kernel has no Landlock and the mode lets the adapter start
// without it, the launcher still drops every privilege (and, under a
// runner run as root, becomes the adapters' user) and installs the
// seccomp filter: the adapter is the launcher's, run here on
// /proc/self/status.
func TestSecurityLauncherWithoutLandlockDropsPrivileges(t *testing.T) {
	p := sandboxPolicy{NoLandlock: true}
	if os.Geteuid() == 0 {
		p.UID, p.GID = DefaultAdapterUID, DefaultAdapterUID
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := launcherCommand(string(b), "/bin/cat", []string{"/proc/self/status"})
	cmd.Stderr = t.Output()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	status := map[string]string{}
	for line := range strings.SplitSeq(string(out), "\n") {
		k, v, _ := strings.Cut(line, ":")
		status[k] = strings.Join(strings.Fields(v), " ")
	}
	for k, want := range map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if os.Geteuid() != 0 && k == "CapBnd" {
			continue // dropped only by a launcher that may (CAP_SETPCAP)
		}
		if status[k] != want {
			t.Errorf("%s = %q, want %q", k, status[k], want)
		}
	}
	if uid := strings.Fields(status["Uid"]); os.Geteuid() == 0 && (len(uid) == 0 || uid[0] == "0") {
		t.Errorf("Uid = %q, want the adapters' user", status["Uid"])
	}
}
