package adapterrunner_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// A runner that hosts only the sessions placed on it (an edge runner) says
// so in its heartbeat, with its labels, and serves no namespace's request
// API: listing folders is for the cluster's runners, whose workspaces the
// namespaces share.
func TestPlacedOnlyRunner(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	ctx := t.Context()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, js, streams.Options{}, false); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"where": "laptop"}
	r, err := adapterrunner.New(adapterrunner.Config{ID: "edge", DataDir: t.TempDir(), PlacedOnly: true, Labels: labels},
		slog.New(slog.DiscardHandler), natstest.Connect(t, ns), nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	kv, err := js.KeyValue(ctx, events.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "edge")
	if err != nil {
		t.Fatal(err)
	}
	info, err := events.Decode[events.RunnerInfo](e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if !info.PlacedOnly || !maps.Equal(info.Labels, labels) {
		t.Errorf("heartbeat: placed only %v, labels %v; want true, %v", info.PlacedOnly, info.Labels, labels)
	}
	_, err = nc.Request(events.APISubject("default", events.OpListDirectories), nil, 5*time.Second)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("list_directories with only a placed-only runner: %v, want no responders", err)
	}
}
