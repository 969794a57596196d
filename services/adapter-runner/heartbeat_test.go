package adapterrunner_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
	adapterrunner "skein.dev/services/adapter-runner"
)

// A runner that starts deletes the heartbeat a runner of its ID left when
// it died, before its own: to the session services that is the exit of
// every adapter the dead one hosted (they died with it), whose turns would
// otherwise wait forever, since a heartbeat replaced by another is neither
// deleted nor expired.
func TestStartClearsADeadRunnersHeartbeat(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := streams.Provision(ctx, js, streams.Options{}, false); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := events.Marshal(&events.RunnerInfo{ID: "r1", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "r1", dead)
	if err != nil {
		t.Fatal(err)
	}
	// From the revision after the dead heartbeat, by sequence: an
	// updates-only watch starts from whatever is new when its consumer is
	// made, and again when a loaded machine makes the ordered consumer
	// reset before its first delivery, and so could miss the delete.
	w, err := kv.Watch(ctx, "r1", jetstream.IncludeHistory(), jetstream.ResumeFromRevision(rev+1))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()

	r, err := adapterrunner.New(adapterrunner.Config{ID: "r1", DataDir: t.TempDir()}, slog.New(slog.DiscardHandler), natstest.Connect(t, ns), nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	var ops []jetstream.KeyValueOp
	for len(ops) < 2 {
		select {
		case e := <-w.Updates():
			if e != nil {
				ops = append(ops, e.Operation())
			}
		case err := <-done:
			t.Fatalf("runner stopped: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("heartbeat updates after the start: %v, want a delete then a put", ops)
		}
	}
	if ops[0] != jetstream.KeyValueDelete || ops[1] != jetstream.KeyValuePut {
		t.Errorf("heartbeat updates after the start: %v, want a delete then a put", ops)
	}
}
