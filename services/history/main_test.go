package history_test

import (
	"testing"

	"skein.dev/internal/testutil"
)

// Every test stops what it started: the service, its connections and the
// embedded server.
func TestMain(m *testing.M) { testutil.Main(m, nil) }
