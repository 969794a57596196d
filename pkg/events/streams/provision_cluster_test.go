package streams_test

import (
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
)

// TestProvisionConcurrentR3 starts what a fresh cluster's services do at
// once: four of them provisioning the R3 streams and buckets concurrently,
// each through another node, and then opening them at once. A stream one
// of them created is not usable by the others until its Raft group has a
// leader; Provision returns only once every stream answers, so each can
// open every stream and bucket right after it.
func TestProvisionConcurrentR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three-node clusters; skipped in -short")
	}
	for range 2 {
		nodes := natstest.RunCluster(t, 3)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				js, err := jetstream.New(natstest.Connect(t, nodes[i%len(nodes)]))
				if err != nil {
					t.Error(err)
					return
				}
				if err := streams.Provision(t.Context(), js, streams.Options{Replicas: 3}, i == 0); err != nil {
					t.Errorf("service %d: provision: %v", i, err)
					return
				}
				for _, s := range []string{events.StreamLog, events.StreamIO} {
					if _, err := js.Stream(t.Context(), s); err != nil {
						t.Errorf("service %d: stream %s: %v", i, s, err)
					}
				}
				for _, b := range []string{events.BucketSessions, events.BucketOwners, events.BucketRunners} {
					if _, err := js.KeyValue(t.Context(), b); err != nil {
						t.Errorf("service %d: bucket %s: %v", i, b, err)
					}
				}
			})
		}
		wg.Wait()
	}
}
