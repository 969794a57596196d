package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// TestServeTestAgents: a runner of skein serve offers the built-in test
// agent, as "test" and "demo", only when --adapter-runner.test-agents asks
// for it. Without it and without a registry file, its heartbeat names no
// agent at all: a production deployment offers no scripted fake.
func TestServeTestAgents(t *testing.T) {
	ns := natstest.Run(t, natstest.WithListen())
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"default", nil, nil},
		{"test-agents", []string{"--adapter-runner.test-agents"}, []string{"demo", "test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "serve-" + tc.name
			args := append([]string{"serve", "--target=adapter-runner", "--nats", ns.ClientURL(), "--log-level=warn",
				"--adapter-runner.id=" + id, "--adapter-runner.data-dir=" + t.TempDir()}, tc.flags...)
			ctx, cancel := context.WithCancel(t.Context())
			var out testutil.Buffer
			done := make(chan int, 1)
			go func() { done <- run(ctx, args, func(string) string { return "" }, strings.NewReader(""), &out, &out) }()
			t.Cleanup(func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("skein serve = %d:\n%s", code, out.String())
				}
			})

			var info *events.RunnerInfo
			if err := testutil.Poll(ctx, id+"'s heartbeat", func() (bool, error) {
				kv, err := js.KeyValue(ctx, events.BucketRunners)
				if errors.Is(err, jetstream.ErrBucketNotFound) {
					return false, nil // the runner has not provisioned yet
				}
				if err != nil {
					return false, err
				}
				e, err := kv.Get(ctx, id)
				if errors.Is(err, jetstream.ErrKeyNotFound) {
					return false, nil
				}
				if err != nil {
					return false, err
				}
				info, err = events.Decode[events.RunnerInfo](e.Value())
				return err == nil, err
			}); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			var got []string
			for _, a := range info.Agents {
				got = append(got, a.ID)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("runner %s offers %q, want %q", id, got, tc.want)
			}
		})
	}
}
