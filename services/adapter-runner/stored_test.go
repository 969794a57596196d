package adapterrunner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// A prompt's answer is stored even when ACP_IO cannot take it at first (a
// stream without a leader during an election answers nobody): the runner
// retries until it is stored, since no later record would tell the owner
// it was lost, and the turn would wait for it forever. Here the stream is
// deleted while the turn runs and created again once the runner has tried.
func TestPromptResultIsStoredOnceTheStreamIsBack(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	stream, err := js.Stream(ctx, events.StreamIO)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	if err := js.DeleteStream(ctx, events.StreamIO); err != nil {
		t.Fatal(err)
	}
	h.prompt(t, "s1", "p1", "turn-1", "say lost\nstop end_turn")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(h.logs.String(), "runner record not stored yet; retrying") {
		if time.Now().After(deadline) {
			t.Fatalf("the runner never retried the answer; its log:\n%s", h.logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polls the runner's log
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(cctx, cfg); err != nil {
		t.Fatal(err)
	}
	res, _ := until[*events.AdapterPromptResult](t, h)
	if res.StopReason != "end_turn" {
		t.Errorf("the answer stored = %+v, want end_turn", res)
	}
}
