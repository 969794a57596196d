package gatewaytest_test

import (
	"testing"

	"go.uber.org/goleak"

	"skein.dev/internal/natstest"
	"skein.dev/services/gateway/gatewaytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fake session service keeps the contract the real one keeps.
func TestFakeSessionContract(t *testing.T) {
	gatewaytest.SessionContract(t, func(t *testing.T) gatewaytest.SessionService {
		nc := natstest.Connect(t, natstest.Run(t))
		gatewaytest.Start(t, nc)
		return gatewaytest.SessionService{NC: nc, Agent: "demo"}
	})
}
