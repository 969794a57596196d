package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// skein watch prints the durable events as they are stored and the state
// when it changes, by long polling; --once prints one answer.
func TestWatch(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "plain")
	r := e.run(t.Context(), "", "watch", "-s", "s1", "--once", "--timeout", "100ms")
	if r.err != nil || r.stdout != "" || r.stderr != "state: idle\n" {
		t.Fatalf("watch --once of an idle session = %v, printed %q, stderr %q", r.err, r.stdout, r.stderr)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(ctx, map[string]string{"SKEIN_URL": e.url}, "", &stdout, &stderr, "watch", "--json", "-s", "s1", "--timeout", "30s")
	}()
	if r := e.run(t.Context(), "", "prompt", "-s", "s1", "say hi"); r.err != nil {
		t.Fatalf("prompt: %v", r.err)
	}
	// The turn stores its user message and the reply.
	testutil.Eventually(t, "the turn's events", func() bool { return strings.Count(stdout.String(), "\n") == 2 })
	testutil.Eventually(t, "the state after the turn", func() bool { return strings.HasSuffix(stderr.String(), "state: idle\n") })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch interrupted = %v, want nil", err)
	}
	var prev uint64
	for line := range strings.SplitSeq(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
		var ev struct {
			Sequence   uint64 `json:"sequence"`
			Durability string `json:"durability"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Durability != "durable" || ev.Sequence <= prev {
			t.Errorf("line %s: want durable events in sequence order", line)
		}
		prev = ev.Sequence
	}

	wantCode(t, e.run(t.Context(), "", "watch", "-s", "nobody", "--once").err, string(events.CodeSessionNotFound))
	wantCode(t, e.run(t.Context(), "", "watch", "-s", "s1", "--once", "--timeout", "1m").err, string(events.CodeInvalidRequest))
}
