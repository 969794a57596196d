package history

import (
	"context"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// ReadPage reads one history page as the gateway does.
func ReadPage(ctx context.Context, nc *nats.Conn, ns events.Namespace, req *events.AcpReadHistoryRequest) (*events.AcpHistoryPageResponse, error) {
	return rpc.CallChunked[events.AcpHistoryPageResponse](ctx, nc, events.APISubject(ns, events.OpReadHistory), req, nil)
}
