package eventlog_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: waits, subscriptions, connections and
// the embedded server.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
