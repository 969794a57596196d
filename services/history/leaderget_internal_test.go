package history

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events/streams"
)

// TestLeaderEntry: the leader read sees what a KV get sees: the newest put,
// and nothing for a key never written, deleted or purged.
func TestLeaderEntry(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{}, true); err != nil {
		t.Fatal(err)
	}
	const bucket = "ACP_SESSIONS"
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) []byte {
		t.Helper()
		v, err := leaderEntry(t.Context(), js, bucket, key)
		if err != nil {
			t.Fatalf("leaderEntry(%s): %v", key, err)
		}
		return v
	}
	if v := get("default.never"); v != nil {
		t.Errorf("a key never written = %q, want none", v)
	}
	for _, v := range []string{"one", "two"} {
		if _, err := kv.Put(t.Context(), "default.s1", []byte(v)); err != nil {
			t.Fatal(err)
		}
		if got := get("default.s1"); string(got) != v {
			t.Errorf("after put %q the leader reads %q", v, got)
		}
	}
	if err := kv.Delete(t.Context(), "default.s1"); err != nil {
		t.Fatal(err)
	}
	if v := get("default.s1"); v != nil {
		t.Errorf("a deleted key = %q, want none", v)
	}
	if _, err := kv.Put(t.Context(), "default.s2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(t.Context(), "default.s2"); err != nil {
		t.Fatal(err)
	}
	if v := get("default.s2"); v != nil {
		t.Errorf("a purged key = %q, want none", v)
	}
}
