package gateway_test

import (
	"encoding/json"
	"net/http"
	"os"
	"syscall"
	"testing"

	"skein.dev/internal/testutil"
)

// A process that holds nearly all the descriptors it may open (as a
// runner did once FIFO downloads had leaked thousands) is unready: a
// load balancer must send new clients elsewhere before accept fails. It
// is ready again once they are closed.
func TestSecurityReadyzNearDescriptorLimit(t *testing.T) {
	e := newEnv(t, withoutBackend)
	if r := e.do(http.MethodGet, "/readyz", ""); r.status != http.StatusOK {
		t.Fatalf("readyz = %d %s", r.status, r.body)
	}
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	open := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	// The limit leaves room for the probe's connection and a little more;
	// descriptors opened here fill the process to past 90% of it.
	limit := uint64(open() + 200)
	lowered := saved
	lowered.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved) })
	var held []*os.File
	t.Cleanup(func() {
		for _, f := range held {
			f.Close()
		}
	})
	for uint64(open())*100 < limit*92 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, f)
	}
	r := e.do(http.MethodGet, "/readyz", "")
	var body struct{ Status, Reason string }
	_ = json.Unmarshal(r.body, &body)
	t.Logf("with %d of %d descriptors open: readyz = %d %s", open(), limit, r.status, r.body)
	if r.status != http.StatusServiceUnavailable || body.Reason != "descriptors" {
		t.Errorf("readyz near the descriptor limit = %d %s, want 503 for descriptors", r.status, r.body)
	}
	if got := testutil.Metric(t, e.reg, "acp_gateway_unready_total", "reason", "descriptors"); got < 1 {
		t.Errorf("acp_gateway_unready_total{reason=descriptors} = %v", got)
	}
	for _, f := range held {
		f.Close()
	}
	held = nil
	if r := e.do(http.MethodGet, "/readyz", ""); r.status != http.StatusOK {
		t.Errorf("readyz once the descriptors are closed = %d %s", r.status, r.body)
	}
}
