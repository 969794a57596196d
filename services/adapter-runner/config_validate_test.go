package adapterrunner_test

import (
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
