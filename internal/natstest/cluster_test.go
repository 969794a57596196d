package natstest_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
)

// TestRunCluster creates an R3 stream at once, with no retry, through a
// connection to all three nodes, and publishes to it: the stream has a
// leader and two replicas, and holds the message.
func TestRunCluster(t *testing.T) {
	nodes := natstest.RunCluster(t, 3)
	if len(nodes) != 3 {
		t.Fatalf("RunCluster(3) = %d servers, want 3", len(nodes))
	}
	js, err := jetstream.New(natstest.ConnectURL(t, natstest.ClusterURL(nodes)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Storage: jetstream.FileStorage, Replicas: 3})
	if err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	ack, err := js.Publish(ctx, "r3.a", []byte("hello"))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ack.Sequence != 1 {
		t.Errorf("publish: sequence %d, want 1", ack.Sequence)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages, want 1", info.State.Msgs)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
		t.Errorf("stream cluster = %+v, want a leader and 2 replicas", info.Cluster)
	}
	// Each node answers for the stream: a client of any one reads it.
	for _, ns := range nodes {
		js, err := jetstream.New(natstest.Connect(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, "R3")
		if err != nil {
			t.Fatalf("%s: stream: %v", ns.Name(), err)
		}
		msg, err := s.GetLastMsgForSubject(ctx, "r3.a")
		if err != nil {
			t.Fatalf("%s: last message: %v", ns.Name(), err)
		}
		if string(msg.Data) != "hello" {
			t.Errorf("%s: last message = %q, want hello", ns.Name(), msg.Data)
		}
	}
}
