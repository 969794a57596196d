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
	if _, err := kv.Put(ctx, "r1", dead); err != nil {
		t.Fatal(err)
	}
	// What the runner writes to the key, seen as the bucket's stream
	// receives it: a core subscription on the key's subject, in place
	// before the runner starts. A KV watch would not do: its ordered
	// consumer, reset before its first delivery (a loaded machine), starts
	// again from the stream's first sequence, and the bucket keeps one
	// value a key, so the delete is gone by then.
	sub, err := nc.SubscribeSync("$KV." + events.BucketRunners + ".r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	r, err := adapterrunner.New(adapterrunner.Config{ID: "r1", DataDir: t.TempDir()}, slog.New(slog.DiscardHandler), natstest.Connect(t, ns), nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	var ops []string
	for len(ops) < 2 {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("heartbeat writes after the start: %v (%v), want a delete then a put", ops, err)
		}
		op := m.Header.Get("KV-Operation") // nats.go's header for a delete or purge
		if op == "" {
			op = "PUT"
		}
		ops = append(ops, op)
	}
	if ops[0] != "DEL" || ops[1] != "PUT" {
		t.Errorf("heartbeat writes after the start: %v, want [DEL PUT]", ops)
	}
}
