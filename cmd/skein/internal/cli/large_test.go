package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/natstest"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// skein history, watch and events read back a session of large messages,
// three answers of one chunk and one of five (testutil.LargeScale: 4 MB
// and 20 MB on skein dev's max_payload of 8 MiB in make test-long): every
// durable event once, in order, and every byte of the answers.
func TestLargeMessages(t *testing.T) {
	maxPayload, chunk := testutil.LargeScale()
	e := newEnv(t, func(o *envOptions) {
		o.stack = append(o.stack, stacktest.WithServer(natstest.Run(t, natstest.WithMaxPayload(maxPayload))))
	})
	e.open("s1", "plain")
	var seqs []uint64
	big := fmt.Sprintf("big %d", chunk)
	for _, script := range []string{big, big, big, strings.Repeat(big+"\n", 5)} {
		seqs = append(seqs, e.Turn(events.SessionID("s1"), script)...)
	}
	answers := 3*chunk + 5*chunk
	// check reads printed lines of public JSON: every durable event of
	// the session once, in order, with all of the answers' text.
	check := func(what, out string) {
		t.Helper()
		var got []uint64
		text := 0
		for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
			var ev struct {
				Sequence   uint64 `json:"sequence"`
				Durability string `json:"durability"`
				Type       string `json:"type"`
				Content    struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("%s: line of %d bytes: %v", what, len(line), err)
			}
			if ev.Durability != "durable" || ev.Type == "session_state" {
				continue // a delta, or a state change (events --json)
			}
			got = append(got, ev.Sequence)
			if ev.Type == "agent_message_chunk" {
				text += len(ev.Content.Text)
			}
		}
		if len(got) != len(seqs) || text != answers {
			t.Fatalf("%s printed %d events %v (%d bytes of answers), want %d %v (%d)", what, len(got), got, text, len(seqs), seqs, answers)
		}
		for i := range got {
			if got[i] != seqs[i] {
				t.Fatalf("%s printed %v, want %v", what, got, seqs)
			}
		}
	}
	for _, limit := range []string{"7", "10000"} {
		r := e.run(t.Context(), "", "history", "-s", "s1", "--all", "--json", "--limit", limit)
		if r.err != nil {
			t.Fatalf("history --all --limit %s: %v\n%s", limit, r.err, r.stderr)
		}
		check("history --all --limit "+limit, r.stdout)
	}
	for _, cmd := range []string{"watch", "events"} {
		ctx, cancel := context.WithCancel(t.Context())
		var stdout, stderr testutil.Buffer
		done := make(chan error, 1)
		go func() {
			done <- execute(ctx, map[string]string{"SKEIN_URL": e.url}, "", &stdout, &stderr, cmd, "--json", "-s", "s1")
		}()
		// Megabytes of answers through the race detector: on a loaded
		// machine that takes longer than one wait's bound, so the wait is
		// for progress, and fails when the command prints nothing more for
		// eventProgress. The unit of progress is one event: at 4 MB, read,
		// decoded and printed escaped, under the race detector and beside
		// another test run, one took seconds.
		const eventProgress = 5 * time.Minute
		last := fmt.Sprintf(`"sequence":%d,`, seqs[len(seqs)-1])
		start := time.Now()
		for {
			// The length before the look: output that lands between the
			// two is progress the wait below sees at once.
			n := stdout.Len()
			if strings.Contains(stdout.String(), last) {
				break
			}
			if err := testutil.PollWithin(t.Context(), eventProgress, cmd+" printing more of the session", func() (bool, error) {
				return stdout.Len() > n, nil
			}); err != nil {
				t.Fatalf("%v after %d bytes of output; stderr:\n%s", err, n, stderr.String())
			}
			t.Logf("%s: %d bytes after %v", cmd, stdout.Len(), time.Since(start).Round(time.Millisecond))
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s interrupted = %v, want nil", cmd, err)
		}
		check(cmd, stdout.String())
	}
}
