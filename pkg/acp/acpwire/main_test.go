package acpwire_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// Conn's reader must stop once its input ends or it is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
