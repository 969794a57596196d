package gateway_test

import (
	"strings"
	"testing"

	"skein.dev/services/gateway"
)

// TestACPConfig: the endpoint's flags have their defaults, and are checked
// with the others'.
func TestACPConfig(t *testing.T) {
	cfg := gateway.DefaultConfig()
	if cfg.ACPMaxConns != gateway.DefaultACPMaxConns || cfg.ACPIdleTimeout != gateway.DefaultACPIdleTimeout {
		t.Errorf("defaults %d %v, want %d %v", cfg.ACPMaxConns, cfg.ACPIdleTimeout, gateway.DefaultACPMaxConns, gateway.DefaultACPIdleTimeout)
	}
	cfg.ACPMaxConns, cfg.ACPIdleTimeout = 0, -1
	err := cfg.Validate()
	for _, flag := range []string{"gateway.acp-max-conns", "gateway.acp-idle-timeout"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("Validate = %v, want it to name %s", err, flag)
		}
	}
}
