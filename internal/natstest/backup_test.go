package natstest_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
)

// TestSnapshotRestore backs up a stream of several snapshot chunks, deletes
// it, and restores it: the stream has its configuration and every record
// back, at the same sequences.
func TestSnapshotRestore(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cfg := jetstream.StreamConfig{Name: "BACKED", Subjects: []string{"backed.>"}, Storage: jetstream.FileStorage, Description: "to restore"}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Random bytes do not compress: several of the server's 128 KiB
	// chunks, and several of RestoreStream's.
	const records = 300
	rnd := rand.NewChaCha8([32]byte{})
	payload := make([]byte, 1024)
	for i := range records {
		_, _ = rnd.Read(payload)
		if _, err := js.Publish(ctx, fmt.Sprintf("backed.s%d", i%10), payload); err != nil {
			t.Fatal(err)
		}
	}
	b, err := natstest.SnapshotStream(ctx, nc, "BACKED")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Data) == 0 {
		t.Fatal("an empty snapshot")
	}
	t.Logf("snapshot of %d bytes", len(b.Data))
	if err := js.DeleteStream(ctx, "BACKED"); err != nil {
		t.Fatal(err)
	}
	if err := natstest.RestoreStream(ctx, nc, b); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "BACKED")
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Config.Description != cfg.Description || info.State.Msgs != records || info.State.LastSeq != records {
		t.Errorf("restored stream: description %q, %d records, last %d; want %q, %d, %d", info.Config.Description, info.State.Msgs, info.State.LastSeq, cfg.Description, records, records)
	}
	m, err := s.GetMsg(ctx, records)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != fmt.Sprintf("backed.s%d", (records-1)%10) || string(m.Data) != string(payload) {
		t.Errorf("restored record %d: %s, %d bytes: not the one published", records, m.Subject, len(m.Data))
	}
	// A stream that exists cannot be restored over.
	if err := natstest.RestoreStream(ctx, nc, b); err == nil {
		t.Error("restore over an existing stream: no error")
	}
}
