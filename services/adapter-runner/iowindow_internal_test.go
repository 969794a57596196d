package adapterrunner

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A record is given up only on a refusal that would repeat; whatever an
// election, a node's restart or a reconnection causes is retried.
func TestRefusedForGood(t *testing.T) {
	api := func(code, errCode int) error {
		return &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode), Description: "x"}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"larger than max_payload", nats.ErrMaxPayload, true},
		{"connection closed", fmt.Errorf("publish: %w", nats.ErrConnectionClosed), true},
		{"larger than the stream's max message size", api(400, int(jetstream.JSErrCodeStreamMessageExceedsMaximum)), true},
		{"no responders", jetstream.ErrNoStreamResponse, false},
		{"no acknowledgement in time", jetstream.ErrAsyncPublishTimeout, false},
		{"lost in a reconnection", nats.ErrDisconnected, false},
		{"too many publishes pending", jetstream.ErrTooManyStalledMsgs, false},
		{"stream not found during an election", api(404, int(jetstream.JSErrCodeStreamNotFound)), false},
		{"same message ID still being stored", api(409, 10158), false},
		{"temporarily unavailable", api(503, 10008), false},
	} {
		if got := refusedForGood(tc.err); got != tc.want {
			t.Errorf("refusedForGood(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
