package notify_test

import (
	"testing"

	"skein.dev/internal/stacktest"
)

// TestMain lets the test binary be the test agent of its stacks.
func TestMain(m *testing.M) { stacktest.Main(m, nil) }
