package main

import (
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/services/gateway/gatewaytest"
)

// The real session service passes the contract its clients rely on, the
// same suite the gateway tests' stand-in passes (gatewaytest), so that a
// gateway test against the stand-in says something about the real stack.
func TestSessionContractRealStack(t *testing.T) {
	gatewaytest.SessionContract(t, func(t *testing.T) gatewaytest.SessionService {
		ns := natstest.Run(t)
		startStack(t, ns, t.TempDir())
		return gatewaytest.SessionService{NC: natstest.Connect(t, ns), Agent: "demo"}
	})
}
