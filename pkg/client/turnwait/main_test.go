package turnwait_test

import (
	"testing"

	"skein.dev/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m, nil) }
