package gatewaytest_test

import (
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/services/gateway/gatewaytest"
)

func TestMain(m *testing.M) { testutil.Main(m, nil) }

// The fake session service keeps the contract the real one keeps.
func TestFakeSessionContract(t *testing.T) {
	gatewaytest.SessionContract(t, func(t *testing.T) gatewaytest.SessionService {
		nc := natstest.Connect(t, natstest.Run(t))
		gatewaytest.Start(t, nc)
		return gatewaytest.SessionService{NC: nc, Agent: "demo"}
	})
}
