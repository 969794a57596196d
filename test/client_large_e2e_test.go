package test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/client"
	"skein.dev/pkg/events"
)

// The Go client reads back a session of large messages, three answers of
// 4 MB and one of 20 MB on skein dev's max_payload of 8 MiB: history both
// ways at its largest page size, and a subscription from the start.
func TestGoClientLargeMessages(t *testing.T) {
	ns := natstest.Run(t, natstest.WithMaxPayload(8<<20))
	startStack(t, ns, t.TempDir())
	cl, err := client.New(natstest.Connect(t, ns), client.WithPageSize(events.MaxHistoryLimit))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := cl.Open(ctx, "big", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{"big 4000000", "big 4000000", "big 4000000", strings.Repeat("big 4000000\n", 5)} {
		if _, err := cl.PromptText(ctx, "big", script); err != nil {
			t.Fatal(err)
		}
	}
	const answers = 3*4_000_000 + 20_000_000
	read := func(evs func(yield func(*events.AcpDurableHistoryEntry, error) bool), n int) ([]uint64, int) {
		var seqs []uint64
		text := 0
		for e, err := range evs {
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, e.Sequence)
			if u, ok := e.Event.V.(*events.AcpDurableSessionUpdate); ok && strings.Contains(string(u.Update), `"agent_message_chunk"`) {
				text += len(u.Update)
			}
			if len(seqs) == n {
				break
			}
		}
		return seqs, text
	}
	forward, text := read(cl.History(ctx, "big", 0), -1)
	if text < answers {
		t.Fatalf("history holds %d bytes of answers, want %d", text, answers)
	}
	backward, _ := read(cl.HistoryBackward(ctx, "big", 0), -1)
	slices.Reverse(backward)
	if !slices.Equal(backward, forward) {
		t.Errorf("history backward = %v, want %v", backward, forward)
	}
	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	if sub, _ := read(cl.Subscribe(subCtx, "big", 0), len(forward)); !slices.Equal(sub, forward) {
		t.Errorf("subscription from the start = %v, want %v", sub, forward)
	}
}
