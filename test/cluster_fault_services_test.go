package test

import (
	"testing"

	"skein.dev/pkg/events"
)

// TestClusterFaultServices kills each service process in turn with SIGKILL
// mid-turn, with two replicas of the gateway and of the session service,
// and restarts it. No prompt a client waits on is lost: it returns its
// turn's outcome, or an error it retries with its idempotency key against
// the other gateway. Killing the adapter-runner kills the adapters: the
// turns in flight fail adapter_exited, and once it is back new prompts
// work.
func TestClusterFaultServices(t *testing.T) {
	r := startFaultRig(t, rigOptions{})
	for _, name := range []string{"gateway-1", "session-1", "adapter-runner-1", "history-1", "gateway-2", "session-2"} {
		p := r.c.Service(name)
		f := fault{
			name:    name,
			inject:  func() string { _ = p.Kill(); return "" },
			restore: func() { r.restart(p) },
			want:    []string{"completed"},
		}
		switch name {
		case "gateway-1":
			f.gw = 1
		case "adapter-runner-1":
			// A supervisor restarts it at once.
			f.early = true
			f.want = []string{string(events.CodeAdapterExited)}
		}
		r.run(f)
	}
}
