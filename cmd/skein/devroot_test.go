package main

import (
	"strings"
	"testing"

	adapterrunner "skein.dev/services/adapter-runner"
)

// skein dev run as root says so at start, and what it means for its
// agents: under the sandbox, another user with no capability, and the
// user's own directory unchanged; with the sandbox off, root. Run as
// another user it says nothing of it.
func TestSecurityDevSaysItRunsAsRoot(t *testing.T) {
	for _, c := range []struct {
		name string
		mode adapterrunner.SandboxMode
		euid int
		want []string
	}{
		{"root, sandbox", adapterrunner.SandboxWarn, 0, []string{"skein dev runs as root", "uid 65534 gid 65534", "no capability", "seccomp", "/home/p may write there only what uid 65534"}},
		{"root, sandbox off", adapterrunner.SandboxOff, 0, []string{"skein dev runs as ROOT", "agents run as\nroot too, with every capability"}},
		{"not root", adapterrunner.SandboxWarn, 1000, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			printRoot(&b, &adapterrunner.Config{Sandbox: c.mode, AdapterUID: adapterrunner.DefaultAdapterUID}, "/home/p", c.euid)
			got := strings.Join(strings.Fields(b.String()), " ")
			for _, w := range c.want {
				if !strings.Contains(got, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("the notice lacks %q:\n%s", w, b.String())
				}
			}
			if c.want == nil && b.Len() != 0 {
				t.Errorf("notice %q, want none", b.String())
			}
		})
	}
}
