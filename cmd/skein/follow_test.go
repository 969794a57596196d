package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
)

// skein follow prints every session's durable events as they are stored;
// with --session, the session's history first.
func TestFollowCommand(t *testing.T) {
	ns := natstest.Run(t, natstest.WithListen())
	st := startStack(t, ns, t.TempDir())
	for _, sid := range []string{"f1", "f2"} {
		if code, b := do(t, http.MethodPut, st.url+"/v1/sessions/"+sid, `{"agent":"test"}`); code != http.StatusOK {
			t.Fatalf("PUT %s = %d %s", sid, code, b)
		}
	}
	if code, b := do(t, http.MethodPost, st.url+"/v1/sessions/f1/prompt", promptBody("say before")); code != http.StatusOK {
		t.Fatalf("prompt = %d %s", code, b)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var all, one testutil.Buffer
	done := make(chan int, 2)
	for _, c := range []struct {
		out  *testutil.Buffer
		args []string
	}{{&all, nil}, {&one, []string{"--session", "f1"}}} {
		args := append([]string{"follow", "--json", "--nats", ns.ClientURL()}, c.args...)
		go func() {
			done <- run(ctx, args, func(string) string { return "" }, strings.NewReader(""), c.out, &testutil.Buffer{})
		}()
	}
	// The history of f1 comes first on the session's follower: it is
	// subscribed once that is out.
	if err := pollFor(ctx, "f1's history", func() bool { return strings.Contains(one.String(), "before") }); err != nil {
		t.Fatal(err)
	}
	// The namespace's follower is subscribed when a prompt it sees arrives;
	// prompt until it has seen one.
	if err := pollFor(ctx, "the namespace follower", func() bool {
		if code, b := do(t, http.MethodPost, st.url+"/v1/sessions/f2/prompt", promptBody("say ping")); code != http.StatusOK {
			t.Fatalf("prompt = %d %s", code, b)
		}
		return strings.Contains(all.String(), `"sessionId":"f2"`)
	}); err != nil {
		t.Fatal(err)
	}
	if code, b := do(t, http.MethodPost, st.url+"/v1/sessions/f1/prompt", promptBody("say after")); code != http.StatusOK {
		t.Fatalf("prompt = %d %s", code, b)
	}
	if err := pollFor(ctx, "f1's new events on both", func() bool {
		return strings.Contains(all.String(), "after") && strings.Contains(one.String(), "after")
	}); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range 2 {
		if code := <-done; code != 0 {
			t.Errorf("follow interrupted exited %d, want 0", code)
		}
	}
	for name, out := range map[string]string{"all": all.String(), "one": one.String()} {
		seen := map[string]bool{}
		for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
			var ev struct {
				SessionID string `json:"sessionId"`
				Sequence  uint64 `json:"sequence"`
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Sequence == 0 {
				t.Errorf("%s printed %q, want an event's JSON", name, line)
			}
			key := fmt.Sprintf("%s/%d", ev.SessionID, ev.Sequence)
			if seen[key] {
				t.Errorf("%s printed %s #%d twice", name, ev.SessionID, ev.Sequence)
			}
			seen[key] = true
		}
	}
	if strings.Contains(one.String(), `"sessionId":"f2"`) {
		t.Error("the session's follower printed another session's events")
	}
}
