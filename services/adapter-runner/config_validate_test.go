package adapterrunner_test

import (
	"flag"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/workspace"
	adapterrunner "skein.dev/services/adapter-runner"
)

// The defaults are RegisterFlags'; a Config built in code takes them for
// the fields it leaves zero, what follows from its data directory and
// adapter user, and no sandbox.
func TestConfigDefaults(t *testing.T) {
	d := adapterrunner.DefaultConfig()
	if dd := d.WithDefaults(); dd.Validate() != nil {
		err := dd.Validate()
		t.Fatalf("DefaultConfig().WithDefaults().Validate() = %v", err)
	}
	dir := t.TempDir()
	got := adapterrunner.Config{DataDir: dir, Capacity: 3, AdapterUID: 5000}.WithDefaults()
	if err := got.Validate(); err != nil {
		t.Fatalf("WithDefaults().Validate() = %v", err)
	}
	if got.Capacity != 3 || got.Heartbeat != d.Heartbeat || got.FileOps != d.FileOps || got.MemoryMaxBytes != d.MemoryMaxBytes || got.ID != d.ID {
		t.Errorf("WithDefaults: capacity %d, heartbeat %v, file ops %d, memory %d, id %q; want 3 and the defaults %v, %d, %d, %q",
			got.Capacity, got.Heartbeat, got.FileOps, got.MemoryMaxBytes, got.ID, d.Heartbeat, d.FileOps, d.MemoryMaxBytes, d.ID)
	}
	if want := (workspace.Roots{filepath.Join(dir, "workspaces")}); !reflect.DeepEqual(got.WorkspaceRoots, want) {
		t.Errorf("WithDefaults: workspace roots %v, want %v", got.WorkspaceRoots, want)
	}
	if got.AdapterGID != 5000 || got.Sandbox != adapterrunner.SandboxOff || d.Sandbox != adapterrunner.SandboxRequire {
		t.Errorf("adapter gid %d, sandbox %q (the flag's %q); want 5000, off (require)", got.AdapterGID, got.Sandbox, d.Sandbox)
	}
}

// Validate names every invalid field at once, and changes nothing.
func TestConfigValidateReportsAll(t *testing.T) {
	c := adapterrunner.Config{DataDir: t.TempDir()}.WithDefaults()
	c.ID = "a.b"
	c.Capacity = -1
	c.StopGrace = -time.Second
	c.Sandbox = "sometimes"
	c.AdapterUIDRange = -2
	before := c
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted five invalid fields")
	}
	for _, name := range []string{"adapter-runner.id", "adapter-runner.capacity", "adapter-runner.stop-grace", "adapter-runner.sandbox", "adapter-uid-range"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Validate() = %q, does not name %s", err, name)
		}
	}
	if !reflect.DeepEqual(c, before) {
		t.Errorf("Validate changed the config:\n got  %+v\n want %+v", c, before)
	}
	var zero adapterrunner.Config
	if err := zero.Validate(); err == nil || !strings.Contains(err.Error(), "adapter-runner.data-dir") {
		t.Errorf("Config{}.Validate() = %v, want an error naming adapter-runner.data-dir", err)
	}
}

// adapter-runner.label adds a label at each use, or several separated by
// commas; what it holds prints back as it parses. A label the flag could
// not give back is refused, by the flag and by Validate.
func TestLabelFlag(t *testing.T) {
	var c adapterrunner.Config
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-adapter-runner.label", "where=laptop", "-adapter-runner.label=gpu=a100, os=linux", "-adapter-runner.label", "where=desk"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"where": "desk", "gpu": "a100", "os": "linux"}
	if !reflect.DeepEqual(c.Labels, want) {
		t.Errorf("labels %v, want %v", c.Labels, want)
	}
	if got := fs.Lookup("adapter-runner.label").Value.String(); got != "gpu=a100,os=linux,where=desk" {
		t.Errorf("the flag prints %q, want gpu=a100,os=linux,where=desk", got)
	}
	for _, bad := range []string{"where", "=laptop", "two words=x", "k=\x01"} {
		if err := fs.Set("adapter-runner.label", bad); err == nil {
			t.Errorf("adapter-runner.label %q accepted", bad)
		}
	}
	c = adapterrunner.Config{DataDir: t.TempDir(), Labels: map[string]string{"a b": "c"}}.WithDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "adapter-runner.label") {
		t.Errorf("Validate() of a label key with a space = %v, want an error naming adapter-runner.label", err)
	}
}
