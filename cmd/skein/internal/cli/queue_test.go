package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/testutil"
)

// skein prompt --queue while a turn runs queues the prompt and returns at
// once with its place; skein queue lists it, skein queue rm withdraws it,
// and what stays runs as its own turn after the running one (issue 32 §1).
func TestPromptQueueCommands(t *testing.T) {
	e := newEnv(t)
	var out, errOut testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- execute(t.Context(), map[string]string{cli.EnvServer: e.url}, "", &out, &errOut, "prompt", "-s", "qq", "say first\npause qq\nsay first done")
	}()
	e.Paused("qq")
	ids := regexp.MustCompile(`queued as (q_[0-9A-Za-z]{22}), position (\d)`)
	var queued []string
	for i, text := range []string{"say second", "say third"} {
		r := e.run(t.Context(), "", "prompt", "--queue", "-s", "qq", text)
		if r.err != nil {
			t.Fatalf("prompt --queue %q: %v\n%s", text, r.err, r.stderr)
		}
		m := ids.FindStringSubmatch(r.stdout)
		if m == nil || m[2] != string(rune('1'+i)) {
			t.Fatalf("prompt --queue %q printed %q, want its ID and position %d", text, r.stdout, i+1)
		}
		queued = append(queued, m[1])
	}
	r := e.run(t.Context(), "", "queue", "-s", "qq")
	if r.err != nil || !strings.Contains(r.stdout, "1\t"+queued[0]) || !strings.Contains(r.stdout, "say third") {
		t.Fatalf("skein queue = %v, printed %q", r.err, r.stdout)
	}
	if r := e.run(t.Context(), "", "queue", "rm", "-s", "qq", queued[1]); r.err != nil {
		t.Fatalf("skein queue rm: %v\n%s", r.err, r.stderr)
	}
	if r := e.run(t.Context(), "", "queue", "rm", "-s", "qq", queued[1]); r.err == nil || !strings.Contains(r.stderr+r.err.Error(), "prompt_dequeued") {
		t.Errorf("skein queue rm of a withdrawn entry = %v, want prompt_dequeued", r.err)
	}
	e.Release("qq")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The queued turn ran after the first: its reply is in history.
	testutil.Eventually(t, "the queued turn ran", func() bool {
		h := e.run(t.Context(), "", "history", "-s", "qq")
		return h.err == nil && strings.Contains(h.stdout, "second") && !strings.Contains(h.stdout, "third")
	})
	if r := e.run(t.Context(), "", "queue", "-s", "qq"); r.err != nil || !strings.Contains(r.stdout, "nothing waits") {
		t.Errorf("skein queue after the turns = %v, printed %q", r.err, r.stdout)
	}
}
