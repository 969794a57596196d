package test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/client"
	"skein.dev/pkg/events"
)

// The Go client reads back a session of large messages, three answers of
// one chunk and one of five (testutil.LargeScale: 4 MB and 20 MB on skein
// dev's max_payload of 8 MiB in make test-long): history both ways at its
// largest page size, and a subscription from the start.
func TestGoClientLargeMessages(t *testing.T) {
	maxPayload, chunk := testutil.LargeScale()
	ns := natstest.Run(t, natstest.WithMaxPayload(maxPayload))
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
	big := fmt.Sprintf("big %d", chunk)
	for _, script := range []string{big, big, big, strings.Repeat(big+"\n", 5)} {
		if _, err := cl.PromptText(ctx, "big", script); err != nil {
			t.Fatal(err)
		}
	}
	answers := 8 * chunk
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
