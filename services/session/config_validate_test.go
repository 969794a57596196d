package session_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/workspace"
	"skein.dev/services/session"
)

// The defaults are RegisterFlags'; a Config built in code takes them for
// the fields it leaves zero, and keeps the zeros that mean something.
func TestConfigDefaults(t *testing.T) {
	d := session.DefaultConfig()
	if err := d.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	got := session.Config{CallTimeout: 3 * time.Second}.WithDefaults()
	if err := got.Validate(); err != nil {
		t.Fatalf("Config{}.WithDefaults().Validate() = %v", err)
	}
	if got.CallTimeout != 3*time.Second || got.AttachTimeout != d.AttachTimeout || got.OwnerTTL != d.OwnerTTL || got.GroupCommitMin != d.GroupCommitMin {
		t.Errorf("WithDefaults: call %v, attach %v, owner TTL %v, group commit %d; want 3s and the defaults %v, %v, %d",
			got.CallTimeout, got.AttachTimeout, got.OwnerTTL, got.GroupCommitMin, d.AttachTimeout, d.OwnerTTL, d.GroupCommitMin)
	}
	if got.IdleTimeout != 0 || got.MaxAdapterAge != 0 || got.MaxRecordBytes != 0 || got.MaxAdaptersPerNamespace != (session.Quota{}) {
		t.Errorf("WithDefaults gave a meaning of its own to a zero: idle %v, age %v, record %d, quota %v",
			got.IdleTimeout, got.MaxAdapterAge, got.MaxRecordBytes, got.MaxAdaptersPerNamespace)
	}
}

// Validate names every invalid field at once, and changes nothing.
func TestConfigValidateReportsAll(t *testing.T) {
	c := session.DefaultConfig()
	c.AttachTimeout = -time.Second
	c.MaxPendingPermissions = 0
	c.IdleTimeout = -time.Minute
	c.OwnerTTL = 10 * time.Millisecond
	c.WorkspaceRoots = workspace.Roots{"relative"}
	before := c
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted five invalid fields")
	}
	for _, name := range []string{"session.attach-timeout", "session.max-pending-permissions", "session.idle-timeout", "session.owner-ttl", "session.workspace-roots"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Validate() = %q, does not name %s", err, name)
		}
	}
	if !reflect.DeepEqual(c, before) {
		t.Errorf("Validate changed the config:\n got  %+v\n want %+v", c, before)
	}
}
