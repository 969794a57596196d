package history_test

import (
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/history"
)

// The default page is RegisterFlags'; a Config built in code without one
// takes it, and Validate refuses a page larger than the largest without
// changing it.
func TestConfigDefaults(t *testing.T) {
	d := history.DefaultConfig()
	if err := d.Validate(); err != nil || d.DefaultLimit != events.DefaultHistoryLimit {
		t.Fatalf("DefaultConfig() = %+v, Validate() = %v; want page %d, valid", d, err, events.DefaultHistoryLimit)
	}
	if got := (history.Config{}).WithDefaults(); got.DefaultLimit != d.DefaultLimit {
		t.Errorf("Config{}.WithDefaults().DefaultLimit = %d, want %d", got.DefaultLimit, d.DefaultLimit)
	}
	c := history.Config{DefaultLimit: events.MaxHistoryLimit + 1}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "history.default-limit") || c.DefaultLimit != events.MaxHistoryLimit+1 {
		t.Errorf("Validate of page %d = %v, page after %d; want an error naming history.default-limit, the page unchanged", events.MaxHistoryLimit+1, err, c.DefaultLimit)
	}
}
