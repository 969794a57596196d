package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/testagent"
)

// TestReplicasStaleOwner runs two session service processes. Requests that
// reach the replica not owning the session are forwarded to the owner. Then
// the owner is paused (SIGSTOP) mid-turn: its lease expires, the other
// replica takes the session over (appending the OwnerChanged fence) and
// completes the turn. When the stale owner resumes, it steps down: nothing
// after the fence is its, and the log passes the audit.
func TestReplicasStaleOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped in -short")
	}
	ps := startProcessStack(t)
	ctx := t.Context()
	nc := natstest.Connect(t, ps.ns)
	js := ps.js()
	ttl := []string{"-session.owner-ttl", "2s"}

	// A alone opens the session, so it owns it; then B joins.
	logA := watchLines(t)
	a := ps.startSession(logA, ttl...)
	if err := pollHTTP(t, http.MethodPut, ps.base+"s1", `{"agent":"test"}`); err != nil {
		t.Fatal(err)
	}
	owners, err := js.KeyValue(ctx, events.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := owners.Get(ctx, "default.s1")
	if err != nil {
		t.Fatalf("lease of s1: %v", err)
	}
	idA := string(lease.Value())
	ps.startSession(io.Discard, ttl...)
	ids := sessionReplicas(t, nc, 2)

	// Requests land on either replica; each one B gets is forwarded to A.
	const cancels = 30
	for range cancels {
		if code, body := do(t, http.MethodPost, ps.base+"s1/cancel", ""); code != http.StatusOK {
			t.Fatalf("cancel = %d %s", code, body)
		}
	}
	if code, body := postPrompt(ctx, ps.base+"s1/prompt", "", "say hello"); code != http.StatusOK {
		t.Fatalf("prompt = %d %s", code, body)
	}
	var idB string
	for _, id := range ids {
		if id != idA {
			idB = id
		}
	}
	statsA, statsB := endpointStats(t, nc, idA), endpointStats(t, nc, idB)
	op := string(events.OpCancelPrompt)
	if statsB[op] == 0 || statsB[op+"-owned"] != 0 || statsA[op+"-owned"] != statsB[op] || statsA[op]+statsB[op] != cancels {
		t.Errorf("cancel requests: A served %d and %d forwarded, B got %d and had %d forwarded; want B's all forwarded to A",
			statsA[op], statsA[op+"-owned"], statsB[op], statsB[op+"-owned"])
	}
	if lease, err := owners.Get(ctx, "default.s1"); err != nil || string(lease.Value()) != idA {
		t.Fatalf("after forwarding, lease of s1 = %v, %v; want still A's", lease, err)
	}

	// A keyed turn pauses mid-way; A is paused with it.
	script := "chunks 3 before\npause s1\nsay after the takeover"
	type answer struct {
		code int
		body []byte
	}
	inFlight := make(chan answer, 1)
	go func() {
		code, body := postPrompt(ctx, ps.base+"s1/prompt", "key-1", script)
		inFlight <- answer{code, body}
	}()
	if err := testagent.WaitPaused(ctx, ps.control, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(a.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(a.Process.Pid, syscall.SIGCONT) })

	// B takes the session over once A's lease expires, and the turn
	// completes there.
	err = pollFor(ctx, "B to take the lease", func() bool {
		e, err := owners.Get(ctx, "default.s1")
		return err == nil && string(e.Value()) == idB
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := testagent.Release(ctx, ps.control, "s1"); err != nil {
		t.Fatal(err)
	}
	err = pollFor(ctx, "the turn to finish", func() bool {
		log, err := eventlogtest.Read(ctx, js, "default", "s1")
		return err == nil && len(log.Turns) == 2 && log.Turns[1].Finish != nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The prompt in flight since before A paused waits on the log, not on
	// A: it returns the turn B completed.
	if a := <-inFlight; a.code != http.StatusOK || !strings.Contains(string(a.body), "after the takeover") {
		t.Errorf("the prompt in flight across the takeover = %d %s, want the turn completed", a.code, a.body)
	}

	// A resumes: its renewal or its next append fails, and it steps down.
	if err := syscall.Kill(a.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line, err := logA.waitFor(ctx, "stepping down", "forgetting the session")
	if err != nil {
		t.Fatalf("the stale owner did not step down: %v", err)
	}
	t.Logf("the stale owner: %s", line)

	code, body := postPrompt(ctx, ps.base+"s1/prompt", "key-1", script)
	var res struct {
		StopReason string          `json:"stopReason"`
		Message    json.RawMessage `json:"message"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil || res.StopReason != "end_turn" || !strings.Contains(string(res.Message), "after the takeover") {
		t.Errorf("keyed retry = %d %s, want the turn completed", code, body)
	}
	if code, body := postPrompt(ctx, ps.base+"s1/prompt", "", "say once more"); code != http.StatusOK {
		t.Errorf("prompt after the takeover = %d %s", code, body)
	}

	log := eventlogtest.Audit(t, js, "default", "s1")
	if got := log.Outcomes(); len(got) != 3 || got[1] != "completed" {
		t.Errorf("outcomes %v, want three turns, the taken-over one completed", got)
	}
	fence := -1
	for i, r := range log.Records {
		if v, err := events.Unmarshal(r.Data); err == nil {
			if oc, ok := v.(*events.OwnerChanged); ok && oc.Owner == idB {
				fence = i
			}
		}
	}
	if fence < 0 {
		t.Fatalf("no OwnerChanged record of B in the log")
	}
	for _, r := range log.Records[fence+1:] {
		if strings.Contains(r.Header.Get(nats.MsgIdHdr), "."+idA+".") {
			t.Errorf("record %d (%s) was written by the stale owner after the fence", r.Sequence, r.Header.Get(events.HeaderRecord))
		}
	}
}

// sessionReplicas returns the instance IDs of the n session service
// replicas, once n answer a nats micro ping.
func sessionReplicas(t *testing.T, nc *nats.Conn, n int) []string {
	t.Helper()
	var ids []string
	err := pollFor(t.Context(), fmt.Sprint(n, " session replicas"), func() bool {
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			return false
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.PublishRequest("$SRV.PING."+events.APIServiceSession, inbox, nil); err != nil {
			return false
		}
		ids = ids[:0]
		for len(ids) < n {
			m, err := sub.NextMsg(time.Second)
			if err != nil {
				return false
			}
			var ping struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(m.Data, &ping) == nil {
				ids = append(ids, ping.ID)
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// endpointStats returns one replica's request count by endpoint name.
func endpointStats(t *testing.T, nc *nats.Conn, id string) map[string]int {
	t.Helper()
	m, err := nc.Request("$SRV.STATS."+events.APIServiceSession+"."+id, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("stats of %s: %v", id, err)
	}
	var stats struct {
		Endpoints []struct {
			Name     string `json:"name"`
			Requests int    `json:"num_requests"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatalf("stats of %s: %v", id, err)
	}
	out := map[string]int{}
	for _, e := range stats.Endpoints {
		out[e.Name] = e.Requests
	}
	return out
}

// pollFor is testutil.Poll for a condition that cannot fail.
func pollFor(ctx context.Context, what string, cond func() bool) error {
	return testutil.Poll(ctx, what, func() (bool, error) { return cond(), nil })
}

// lineWatch is a process's stderr, line by line, for a test to wait on.
type lineWatch struct {
	io.Writer
	lines chan string
}

func watchLines(t *testing.T) *lineWatch {
	pr, pw := io.Pipe()
	w := &lineWatch{Writer: pw, lines: make(chan string, 1024)}
	t.Cleanup(func() { _ = pw.Close() })
	go func() {
		s := bufio.NewScanner(pr)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			select {
			case w.lines <- s.Text():
			default: // nobody waits: drop
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return w
}

// waitFor returns the first line that contains any of subs.
func (w *lineWatch) waitFor(ctx context.Context, subs ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case line := <-w.lines:
			for _, s := range subs {
				if strings.Contains(line, s) {
					return line, nil
				}
			}
		}
	}
}

// TestSoakRollingSessionReplicas is a fault soak (make test-long): two
// session service processes share 50 sessions; each round puts every
// session mid-turn, then one replica goes, by SIGKILL or, every third
// round, by SIGTERM (a deploy), and a new process takes its place. Every
// turn of every round completes, and every log passes the audit.
func TestSoakRollingSessionReplicas(t *testing.T) {
	if !testutil.Long() {
		t.Skip("a soak run: make test-long (SKEIN_LONG=1)")
	}
	const sessions, rounds = 50, 6
	ps := startProcessStack(t)
	ctx := t.Context()
	// Every session runs a turn at once: more than the namespace's default
	// share of the runner, which is not what this soak is about.
	ttl := []string{"-session.owner-ttl", "1s", "-session.max-adapters-per-namespace", "0", "-session.max-adapters-per-principal", "0"}
	replicas := []*exec.Cmd{ps.startSession(io.Discard, ttl...), ps.startSession(io.Discard, ttl...)}
	sid := func(i int) string { return fmt.Sprint("soak", i) }
	for i := range sessions {
		if err := pollHTTP(t, http.MethodPut, ps.base+sid(i), `{"agent":"test"}`); err != nil {
			t.Fatal(err)
		}
	}
	for round := range rounds {
		pause := func(i int) string { return fmt.Sprintf("%s-r%d", sid(i), round) }
		script := func(i int) string {
			return fmt.Sprintf("chunks 3 r%d\npause %s\nsay done %d.%d", round, pause(i), round, i)
		}
		key := func(i int) string { return fmt.Sprintf("r%d-%d", round, i) }
		bodies := make([][]byte, sessions)
		codes := make([]int, sessions)
		var wg sync.WaitGroup
		for i := range sessions {
			wg.Go(func() { codes[i], bodies[i] = postPrompt(ctx, ps.base+sid(i)+"/prompt", key(i), script(i)) })
		}
		for i := range sessions {
			if err := testagent.WaitPaused(ctx, ps.control, pause(i)); err != nil {
				t.Fatal(err)
			}
		}
		victim, sig := round%2, syscall.SIGKILL
		if round%3 == 2 {
			sig = syscall.SIGTERM
		}
		if err := replicas[victim].Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		_ = replicas[victim].Wait()
		replicas[victim] = ps.startSession(io.Discard, ttl...)
		for i := range sessions {
			if err := testagent.Release(ctx, ps.control, pause(i)); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait() // the prompts in flight across the replica's end return, none cancelled
		for i := range sessions {
			want := fmt.Sprintf("done %d.%d", round, i)
			if codes[i] != http.StatusOK || !strings.Contains(string(bodies[i]), want) {
				t.Errorf("round %d (%v), %s: the prompt in flight = %d %s, want the turn completed", round, sig, sid(i), codes[i], bodies[i])
			}
			if body, ok := awaitKeyed(ctx, ps.base+sid(i)+"/prompt", key(i), script(i), fmt.Sprintf("done %d.%d", round, i)); !ok {
				t.Errorf("round %d (%v), %s: keyed retry = %s, want the turn completed", round, sig, sid(i), body)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	js := ps.js()
	for i := range sessions {
		log := eventlogtest.Audit(t, js, "default", events.SessionID(sid(i)))
		if got := log.Outcomes(); len(got) != rounds || slices.ContainsFunc(got, func(o string) bool { return o != "completed" }) {
			t.Errorf("%s: outcomes %v, want %d completed turns", sid(i), got, rounds)
		}
	}
}
