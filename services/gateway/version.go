package gateway

import (
	"encoding/json"
	"sync"

	"skein.dev/internal/buildinfo"
)

// healthzBody is the answer of GET /healthz: the gateway is up, and the
// version of its binary (buildinfo.Version), which skein info shows. The
// probe is the one route a client may call without a token, and a version
// says nothing a deployment hides: the services announce it over NATS
// (nats micro) already.
var healthzBody = sync.OnceValue(func() []byte {
	b, err := json.Marshal(struct {
		Status  string `json:"status"`
		Version string `json:"version"`
	}{"ok", buildinfo.Version()})
	if err != nil {
		panic(err) // two strings always encode
	}
	return b
})
