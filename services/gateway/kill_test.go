package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// TestEventsSurviveGatewayKill kills a real gateway process (skein serve
// -target=gateway, SIGKILL) in the middle of an event stream while events
// keep being appended. The client resumes against a new gateway process
// with Last-Event-ID and, after deduplicating by (sessionId, sequence), has
// received every durable event of the log exactly once, in log order.
func TestEventsSurviveGatewayKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs skein processes")
	}
	bin := filepath.Join(t.TempDir(), "skein")
	if out, err := exec.Command("go", "build", "-o", bin, "skein.dev/cmd/skein").CombinedOutput(); err != nil {
		t.Fatalf("build skein: %v\n%s", err, out)
	}
	srv := natstest.Run(t, natstest.WithListen())
	backend := startStack(t, srv)
	backend.Open("s1", "demo")

	// The appender runs turns from before the first stream until after the
	// second has carried events: events land before, during and after the
	// kill. It reports the last sequence it appended.
	stop, appended := make(chan struct{}), make(chan uint64, 1)
	var count atomic.Int64
	go func() {
		tick := time.NewTicker(2 * time.Millisecond) // a steady rate, not a wait for a condition
		defer tick.Stop()
		var last uint64
		for i := 0; ; i++ {
			select {
			case <-stop:
				appended <- last
				return
			case <-tick.C:
			}
			seqs := backend.Say("s1", strconv.Itoa(i))
			last = seqs[len(seqs)-1]
			count.Add(1)
		}
	}()
	stopAppender := sync.OnceValue(func() uint64 {
		close(stop)
		return <-appended
	})
	defer stopAppender()

	type key struct {
		sid string
		seq uint64
	}
	var got []key // every durable event received, duplicates included
	lastID := ""
	take := func(ev sseEvent) {
		if ev.Event == "durable" {
			p := decodeEvent(t, ev.Data)
			got = append(got, key{p.SessionID, p.Sequence})
			lastID = ev.ID
		}
	}
	receive := func(s *sseStream) bool {
		select {
		case ev := <-s.ch:
			take(ev)
			return true
		case <-s.done:
			select {
			case ev := <-s.ch:
				take(ev)
				return true
			default:
				return false
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event in 10 s")
			return false
		}
	}

	a := startGatewayProcess(t, bin, srv.ClientURL())
	first := openSSE(t, a.url, "")
	for len(got) < 30 {
		if !receive(first) {
			t.Fatal("the first stream ended before the kill")
		}
	}
	a.kill()
	for receive(first) { // what was on its way still counts
	}
	killedAt := len(got)
	// Events stored while no gateway runs.
	dead := count.Load()
	testutil.Eventually(t, "appends while no gateway runs", func() bool { return count.Load() >= dead+10 })
	appendedDead := count.Load() - dead

	b := startGatewayProcess(t, bin, srv.ClientURL())
	second := openSSE(t, b.url, lastID)
	for len(got) < killedAt+30 {
		if !receive(second) {
			t.Fatal("the resumed stream ended")
		}
	}
	final := stopAppender()
	for got[len(got)-1].seq < final {
		if !receive(second) {
			t.Fatal("the resumed stream ended")
		}
	}

	recs, err := eventlog.Forward(t.Context(), backend.JetStream(), events.StreamLog, events.LogSubject(ns, "s1", events.LogEvents), 0, events.MaxHistoryLimit)
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	seen := map[key]bool{}
	var deduped []uint64
	for _, k := range got {
		if k.sid != "s1" {
			t.Fatalf("received an event of session %q", k.sid)
		}
		if !seen[k] {
			seen[k] = true
			deduped = append(deduped, k.seq)
		}
	}
	if len(deduped) != len(recs) {
		t.Fatalf("received %d distinct durable events (%d before dedupe), the log holds %d", len(deduped), len(got), len(recs))
	}
	for i, r := range recs {
		if deduped[i] != r.Sequence {
			t.Fatalf("durable event %d = %d, the log's is %d", i, deduped[i], r.Sequence)
		}
	}
	t.Logf("%d events: %d received before the kill, %d after, at least %d appended while no gateway ran; %d received twice",
		len(recs), killedAt, len(got)-killedAt, appendedDead, len(got)-len(deduped))
}

// gatewayProcess is a skein serve -target=gateway process.
type gatewayProcess struct {
	cmd *exec.Cmd
	url string
}

// startGatewayProcess starts a gateway process on a free loopback port,
// stopped (SIGKILL) when the test ends, and waits until it listens.
func startGatewayProcess(t *testing.T, bin, natsURL string) *gatewayProcess {
	t.Helper()
	cmd := exec.Command(bin, "serve", "-target=gateway", "-nats", natsURL, "-gateway.http-addr", "127.0.0.1:0", "-gateway.insecure-no-auth")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	p := &gatewayProcess{cmd: cmd}
	t.Cleanup(p.kill)
	// The gateway logs one JSON line with its address once it listens.
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "gateway listening" {
				addr <- line.Addr
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // until the process dies
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("the gateway process exited before it listened")
		}
		p.url = "http://" + a
	case <-time.After(20 * time.Second):
		t.Fatal("the gateway process did not listen in 20 s")
	}
	return p
}

// kill ends the process at once: no shutdown, no error event to clients.
func (p *gatewayProcess) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill() // it may have died already
	_ = p.cmd.Wait()         // killed: the error says so
}

// openSSE opens the event stream of s1 at url, resuming after lastID when
// it is set. It is closed when the test ends.
func openSSE(t *testing.T, url, lastID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sessions/s1/events", nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	tr := &http.Transport{}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET events: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		t.Fatalf("GET events = %d, want 200", resp.StatusCode)
	}
	s := &sseStream{t: t, header: resp.Header, ch: make(chan sseEvent, 4096), done: make(chan struct{}), resume: make(chan struct{})}
	close(s.resume)
	go s.read(ctx, resp.Body)
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-s.done
		tr.CloseIdleConnections()
	})
	return s
}
