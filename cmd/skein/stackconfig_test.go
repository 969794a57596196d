package main

import (
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
)

// stackFlags returns a stack configuration as its flags leave it, args
// parsed.
func stackFlags(t *testing.T, args ...string) *stackConfig {
	t.Helper()
	var c stackConfig
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.registerFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c
}

// The stack's settings are checked all at once, each service's only when
// it is a target, and checking them changes nothing.
func TestStackConfigValidate(t *testing.T) {
	c := stackFlags(t, "--adapter-runner.data-dir", testutil.TempDir(t))
	if err := c.validate(allTargets); err != nil {
		t.Fatalf("the flags' defaults: %v", err)
	}
	c = stackFlags(t, "--log-level", "loud", "--replicas", "0", "--gateway.sse-buffer", "0",
		"--session.call-timeout", "-1s", "--adapter-runner.capacity", "-3", "--history.default-limit", "100000")
	before := *c
	err := c.validate(allTargets)
	if err == nil {
		t.Fatal("six invalid settings accepted")
	}
	for _, name := range []string{"--log-level", "--replicas", "gateway.sse-buffer", "session.call-timeout", "adapter-runner.capacity", "history.default-limit"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("validate() = %q, does not name %s", err, name)
		}
	}
	if c.Session.CallTimeout != -time.Second || c.Runner.Capacity != -3 || c.Session.AttachTimeout != before.Session.AttachTimeout {
		t.Errorf("validate changed the settings: call timeout %v, capacity %d", c.Session.CallTimeout, c.Runner.Capacity)
	}
	if err := c.validate([]string{TargetGateway}); err == nil || strings.Contains(err.Error(), "adapter-runner") {
		t.Errorf("validate(gateway) = %v, want the gateway's and the stack's errors only", err)
	}
}

// skein serve reports every invalid setting at once, before it connects
// to anything: here no NATS server is running.
func TestServeReportsEveryInvalidSetting(t *testing.T) {
	args := []string{"--target", "gateway,history", "--nats", "nats://127.0.0.1:1", "--gateway.rate-limit", "-1",
		"--gateway.sse-keepalive", "0s", "--history.default-limit", "-2"}
	err := runServe(t.Context(), args, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("skein serve started with four invalid settings")
	}
	for _, name := range []string{"gateway.rate-limit", "gateway.sse-keepalive", "history.default-limit", "gateway.tokens-file"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("runServe = %q, does not name %s", err, name)
		}
	}
}

// skein dev reports every invalid setting at once, before it makes its
// data directory or starts anything.
func TestDevReportsEveryInvalidSetting(t *testing.T) {
	start := testutil.TempDir(t)
	data := filepath.Join(start, "data")
	args := []string{"--data", data, "--pprof", "192.0.2.1:6060", "--nats-listen", "192.0.2.1:4222",
		"--session.call-timeout", "-1s", "--adapter-runner.capacity", "-3"}
	err := runDev(t.Context(), args, func(string) string { return "" }, start, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("skein dev started with four invalid settings")
	}
	for _, name := range []string{"--pprof", "--nats-listen", "session.call-timeout", "adapter-runner.capacity"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("runDev = %q, does not name %s", err, name)
		}
	}
	if _, err := os.Lstat(data); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data directory after a refused start: %v, want none", err)
	}
}
