package streams_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
)

// TestAwaitServingAfterRestore restores ACP_LOG and the ACP_SESSIONS
// bucket from backups on a three-node cluster, as the runbook does, and
// guards what nats-server 2.15.3 does then: right after the restore, a
// consumer may be placed on a follower still copying the stream from the
// leader (its catch-up), and is made on a store that lacks the records;
// the catch-up does not wake it, so it delivers nothing until another
// record is written. The test logs how many consumers made at once after
// the restore were placed so (most runs: some). Then, once AwaitServing
// returns, every consumer is made on a replica holding every record
// (NumPending at creation counts them all), reads from the first, and
// every listing of the bucket lists every key.
func TestAwaitServingAfterRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster; skipped in -short")
	}
	nodes := natstest.RunCluster(t, 3)
	nc := natstest.ConnectURL(t, natstest.ClusterURL(nodes))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	o := streams.Options{Replicas: 3}
	if err := streams.Provision(ctx, js, o, true); err != nil {
		t.Fatal(err)
	}
	// Enough records that a follower's catch-up takes seconds: without
	// the wait, the checks after it fail in every run (3 of 3).
	const records, keys = 20000, 100
	payload := make([]byte, 1024)
	for i := range records {
		if _, err := js.PublishAsync(fmt.Sprintf("acp.log.default.s%d.ctl", i%keys), payload); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 || i == records-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	kv, err := js.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if _, err := kv.Put(ctx, fmt.Sprintf("default.s%d", i), payload); err != nil {
			t.Fatal(err)
		}
	}

	kvStream := "KV_" + events.BucketSessions
	for _, name := range []string{kvStream, events.StreamLog} {
		b, err := natstest.SnapshotStream(ctx, nc, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
		if err := natstest.RestoreStream(ctx, nc, b); err != nil {
			t.Fatal(err)
		}
		str, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: snapshot of %d bytes, state %s; restored: %d records, last %d", name, len(b.Data), b.State, str.CachedInfo().State.Msgs, str.CachedInfo().State.LastSeq)
	}

	lacking := 0
	for range 6 {
		if ci := createConsumer(t, js); ci.NumPending < records {
			lacking++
			t.Logf("before the wait: a consumer on %s made with %d of %d records pending", ci.Cluster.Leader, ci.NumPending, records)
		}
	}
	t.Logf("before the wait: %d of 6 consumers made on a replica lacking records (nats-server 2.15.3 catch-up after a restore)", lacking)

	if err := streams.AwaitServing(ctx, js, o, func(stream, status string) { t.Logf("%s: %s", stream, status) }); err != nil {
		t.Fatal(err)
	}

	placed := map[string]int{}
	for range 20 {
		ci := createConsumer(t, js)
		placed[ci.Cluster.Leader]++
		if ci.NumPending != records {
			t.Errorf("after the wait: a consumer on %s made with %d records pending, want %d", ci.Cluster.Leader, ci.NumPending, records)
		}
	}
	t.Logf("after the wait: consumers placed %v", placed)
	for i := range 10 {
		// An ephemeral consumer on any replica, as `nats sub --stream
		// --all` makes: it reads the first record. A consumer that is
		// never woken reads nothing however long it waits; ten seconds
		// bound the test, not the read.
		c, err := js.CreateConsumer(ctx, events.StreamLog, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var first uint64
		var batch jetstream.MessageBatch
		for attempt := 0; ; attempt++ {
			// A consumer just made may not run yet on the replica it was
			// placed on: its first pull then finds no responders, which
			// is not the stall this test guards against. Pull again.
			if batch, err = c.Fetch(1, jetstream.FetchMaxWait(10*time.Second)); err != nil {
				t.Fatal(err)
			}
			for m := range batch.Messages() {
				if md, err := m.Metadata(); err == nil {
					first = md.Sequence.Stream
				}
			}
			if first != 0 || !errors.Is(batch.Error(), nats.ErrNoResponders) || attempt == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond) // the consumer's start on its replica: nothing to wait on but a pull
		}
		if first != 1 {
			t.Errorf("after the wait: consumer %d on %s read record %d (%v), want record 1", i, c.CachedInfo().Cluster.Leader, first, batch.Error())
		}
		if err := js.DeleteConsumer(ctx, events.StreamLog, c.CachedInfo().Name); err != nil {
			t.Fatal(err)
		}
		listed, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for range listed.Keys() {
			n++
		}
		if n != keys {
			t.Errorf("after the wait: listing %d of %s lists %d keys, want %d", i, events.BucketSessions, n, keys)
		}
	}
}

// createConsumer makes an ephemeral consumer of ACP_LOG from its first
// record, as `nats sub --stream --all` does, and returns its info as of its
// creation.
func createConsumer(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testutil.PollTimeout)
	defer cancel()
	c, err := js.CreateConsumer(ctx, events.StreamLog, jetstream.ConsumerConfig{
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	ci := c.CachedInfo()
	if err := js.DeleteConsumer(ctx, events.StreamLog, ci.Name); err != nil {
		t.Fatal(err)
	}
	if ci.Cluster == nil {
		t.Fatal("a consumer of an R3 stream without cluster information")
	}
	return ci
}
