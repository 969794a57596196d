package gateway

import (
	"context"
	"strconv"

	"skein.dev/internal/storewatch"
	"skein.dev/pkg/events"
)

// A full store, as /readyz tells it. When JetStream's store is at its
// limit, no prompt, open or answer can be recorded anywhere in the
// deployment: the session service answers them storage_full (507), and
// ends the turns that cannot store their output. /readyz says so, as
// status storage_full, while the gateway's storewatch.Watch holds the
// store full: the account's usage is at its store limit, or, for an
// account without one, the gateway relayed a storage_full answer in the
// last storewatch.RefusalFor.
// The series for an alert before it comes to that are the history
// service's: acp_jetstream_store_bytes and acp_jetstream_store_limit_bytes
// (natsmetrics.Streams).

// unreadyStorageFull is /readyz's reason while the store refuses writes.
const unreadyStorageFull = "storage_full"

// storageFullBody is /readyz's answer while the store refuses writes,
// when full says it does.
func (g *Gateway) storageFullBody(ctx context.Context) ([]byte, bool) {
	u, full := g.store.Full(ctx, storewatch.Headroom)
	if !full {
		return nil, false
	}
	b := []byte(`{"status":"storage_full","message":"JetStream's store refuses writes: free space (delete sessions) or raise its limit"`)
	if u.Limit > 0 {
		b = append(b, `,"storeBytes":`...)
		b = strconv.AppendUint(b, u.Bytes, 10)
		b = append(b, `,"storeLimit":`...)
		b = strconv.AppendInt(b, u.Limit, 10)
	}
	return append(b, '}'), true
}

// noteStorageFull notes err when it is a storage_full answer.
func (g *Gateway) noteStorageFull(err error) {
	if events.AsError(err).Code == events.CodeStorageFull {
		g.store.Refused()
	}
}
