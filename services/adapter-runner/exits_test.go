package adapterrunner_test

import (
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// Every adapter the runner reaps is counted once, by why it ended; the
// free slots follow the adapters hosted.
func TestExitCauses(t *testing.T) {
	h := start(t)
	exits := func(cause string) float64 {
		return testutil.Metric(t, h.reg, "acp_runner_adapter_exits_total", "cause", cause)
	}
	capacity := testutil.Metric(t, h.reg, "acp_runner_capacity")
	if free := testutil.Metric(t, h.reg, "acp_runner_free_slots"); capacity == 0 || free != capacity {
		t.Fatalf("idle runner: capacity %v, free slots %v; want them equal and not 0", capacity, free)
	}

	// failed: on its own, with a non-zero status.
	h.create(t, "s1", "p1", "test")
	if free := testutil.Metric(t, h.reg, "acp_runner_free_slots"); free != capacity-1 {
		t.Errorf("one adapter: free slots %v, want %v", free, capacity-1)
	}
	h.prompt(t, "s1", "p1", "t1", "crash 3")
	until[*events.AcpAgentExitedEvent](t, h)

	// exited: on its own, status 0.
	h.create(t, "s2", "p2", "test")
	h.prompt(t, "s2", "p2", "t1", "crash 0")
	until[*events.AcpAgentExitedEvent](t, h)

	// signal: killed by a signal the runner did not send.
	created := h.create(t, "s3", "p3", "test")
	if err := syscall.Kill(int(*created.Pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	until[*events.AcpAgentExitedEvent](t, h)

	// requested: stopped by the runner; the stop answers once it is reaped.
	h.create(t, "s4", "p4", "test")
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
		&events.AcpCloseSessionRequest{}, header("s4", "p4")); err != nil {
		t.Fatal(err)
	}

	for cause, want := range map[string]float64{"failed": 1, "exited": 1, "signal": 1, "requested": 1, "protocol_error": 0} {
		if got := exits(cause); got != want {
			t.Errorf("exits{cause=%s} = %v, want %v", cause, got, want)
		}
	}
	if got := testutil.Metric(t, h.reg, "acp_runner_unexpected_exits_total"); got != 3 {
		t.Errorf("unexpected exits = %v, want 3", got)
	}
}

// An adapter whose line was too long is counted as a protocol error, even
// though nothing reads it any more and the runner ends up stopping it.
func TestExitCauseProtocolError(t *testing.T) {
	h := startWith(t, adapterrunner.Config{MaxLineBytes: 4096})
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "big 10000")
	// The connection ends on the line; the runner then says the adapter
	// is not alive, though its process runs until stopped.
	testutil.Eventually(t, "the connection to end", func() bool {
		st, err := rpc.Call[events.AdapterStatus](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStatus),
			&events.AcpGetSessionStateRequest{SessionID: "s1"}, header("s1", "p1"))
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		return !st.Alive
	})
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
		&events.AcpCloseSessionRequest{}, header("s1", "p1")); err != nil {
		t.Fatal(err)
	}
	for cause, want := range map[string]float64{"protocol_error": 1, "requested": 0} {
		if got := testutil.Metric(t, h.reg, "acp_runner_adapter_exits_total", "cause", cause); got != want {
			t.Errorf("exits{cause=%s} = %v, want %v", cause, got, want)
		}
	}
}
