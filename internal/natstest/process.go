package natstest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// RunProcess builds nats-server (from the module cache) and starts it as a
// process of its own with JetStream, file storage in tb.TempDir() and a
// loopback port chosen by the kernel, and returns its client URL. It is
// stopped when the test ends. Benchmarks that read this process's memory
// use it instead of Run, so that the server's memory is not counted. Any
// args are added to the server's command line (for instance "--profile",
// "6061" to profile it).
func RunProcess(tb testing.TB, args ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		tb.Fatalf("natstest: build nats-server: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(tb.Context()))
	cmd := exec.CommandContext(ctx, bin, append([]string{"-js", "-sd", filepath.Join(dir, "store"), "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", dir}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatalf("natstest: start nats-server: %v", err)
	}
	tb.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	// The server writes its ports file once it accepts clients.
	portsFile := filepath.Join(dir, fmt.Sprintf("nats-server_%d.ports", cmd.Process.Pid))
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ports struct {
			Nats []string `json:"nats"`
		}
		if data, err := os.ReadFile(portsFile); err == nil && json.Unmarshal(data, &ports) == nil && len(ports.Nats) > 0 {
			return ports.Nats[0]
		}
		if time.Now().After(deadline) {
			tb.Fatal("natstest: nats-server wrote no ports file in 20 s")
		}
		select {
		case <-time.After(time.Millisecond):
		case <-tb.Context().Done():
			tb.Fatal(tb.Context().Err())
		}
	}
}

// ConnectURL returns a connection to the server at url, closed when the
// test ends.
func ConnectURL(tb testing.TB, url string) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatalf("natstest: connect %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}
