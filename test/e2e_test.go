package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events/eventlog/eventlogtest"
)

func do(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	return doAs(t, method, url, "", body)
}

// doAs sends one API request, with token as its bearer token unless it is
// empty, and returns the answer's status and body.
func doAs(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	code, b, _ := doHeader(t, method, url, token, body)
	return code, b
}

// doHeader is doAs, with the answer's headers.
func doHeader(t *testing.T, method, url, token, body string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

// sseEvent is one event of the gateway's event stream, decoded just enough
// to check ordering.
type sseEvent struct {
	kind string // durable | ephemeral
	id   string
	data map[string]any
}

// followEvents reads the event stream into a channel until ctx ends.
func followEvents(ctx context.Context, t *testing.T, url string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d", url, resp.StatusCode)
	}
	out := make(chan sseEvent, 4096)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.kind != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data)
			}
		}
	}()
	return out
}

type historyPage struct {
	Events        []map[string]any `json:"events"`
	HasMoreBefore bool             `json:"hasMoreBefore"`
	HasMoreAfter  bool             `json:"hasMoreAfter"`
}

// TestEndToEnd drives a prompt through the gateway, the session service, an
// adapter-runner and a real test-agent process, and reads it back live and
// as history, across a restart of all four services.
func TestEndToEnd(t *testing.T) {
	ns := natstest.Run(t)
	dataDir := testutil.TempDir(t)
	st := startStack(t, ns, dataDir)
	base := st.url + "/v1/sessions/e2e"

	if code, body := do(t, http.MethodPut, base, `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("PUT session = %d %s", code, body)
	}
	streamCtx, stopStream := context.WithCancel(t.Context())
	defer stopStream()
	stream := followEvents(streamCtx, t, base+"/events?after=0")

	script := "chunks 50\ntool call_1 Read the file\ntool call_2 Edit the file\nsay done"
	prompt, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": script}}})
	code, body := do(t, http.MethodPost, base+"/prompt", string(prompt))
	if code != http.StatusOK {
		t.Fatalf("POST prompt = %d %s", code, body)
	}
	var result struct {
		SessionID  string          `json:"sessionId"`
		StopReason string          `json:"stopReason"`
		Message    json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(body, &result); err != nil {
		t.Fatal(err)
	}
	if result.SessionID != "e2e" || result.StopReason != "end_turn" || !bytes.Contains(result.Message, []byte("done")) {
		t.Errorf("prompt result = %s, want session e2e, end_turn and the last message", body)
	}

	code, body = do(t, http.MethodGet, base+"/history?after=0&limit=1000", "")
	if code != http.StatusOK {
		t.Fatalf("GET history = %d %s", code, body)
	}
	var page historyPage
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, page)

	// The live stream saw every durable event of history, in order, and the
	// 50 deltas, each after the durable event it follows.
	wantDurable := len(page.Events)
	var durable []string
	var deltas []string
	lastSeq := float64(0)
	timeout := time.After(30 * time.Second)
	for len(durable) < wantDurable {
		select {
		case ev, ok := <-stream:
			if !ok {
				t.Fatalf("event stream ended after %d durable events, want %d", len(durable), wantDurable)
			}
			switch ev.kind {
			case "durable":
				seq := ev.data["sequence"].(float64)
				if seq <= lastSeq {
					t.Fatalf("durable event %v after %v: not in order", seq, lastSeq)
				}
				lastSeq = seq
				durable = append(durable, ev.id)
			case "ephemeral":
				if after := ev.data["afterSequence"].(float64); after != lastSeq {
					t.Errorf("delta with afterSequence %v arrived after durable %v", after, lastSeq)
				}
				if content, ok := ev.data["content"].(map[string]any); ok {
					deltas = append(deltas, content["text"].(string))
				}
			}
		case <-timeout:
			t.Fatalf("saw %d of %d durable events", len(durable), wantDurable)
		}
	}
	stopStream()
	for i, e := range page.Events {
		if want := fmt.Sprint(e["sequence"]); durable[i] != want {
			t.Errorf("stream event %d has id %s, history has %s", i, durable[i], want)
		}
	}
	if len(deltas) < 50 {
		t.Errorf("stream saw %d message deltas, want at least 50", len(deltas))
	}
	if got, want := strings.Join(deltas[:50], ""), chunkText(50); got != want {
		t.Errorf("deltas joined = %q, want %q", got, want)
	}

	// Stop the four services (not NATS), start them again: history is the
	// same, byte for byte.
	st.stop()
	st = startStack(t, ns, dataDir)
	code, again := do(t, http.MethodGet, st.url+"/v1/sessions/e2e/history?after=0&limit=1000", "")
	if code != http.StatusOK {
		t.Fatalf("GET history after restart = %d %s", code, again)
	}
	if !bytes.Equal(body, again) {
		t.Errorf("history after restart differs:\nbefore: %s\nafter:  %s", body, again)
	}
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	if log := eventlogtest.Audit(t, js, "default", "e2e"); len(log.Turns) != 1 || log.Turns[0].Finish == nil || log.Turns[0].Finish.Outcome != "completed" {
		t.Errorf("the log holds turns %v, want one completed", log.Outcomes())
	}
}

func chunkText(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "chunk %d ", i)
	}
	return b.String()
}

// checkHistory checks the durable record of the turn: sequences increase,
// event numbers are contiguous from 1, the user message comes first, the 50
// chunks are one coalesced message, and both tool calls are there.
func checkHistory(t *testing.T, page historyPage) {
	t.Helper()
	if page.HasMoreAfter {
		t.Errorf("history page says there is more after it")
	}
	var types []string
	prev := 0.0
	for i, e := range page.Events {
		seq, eventNo := e["sequence"].(float64), e["eventNo"].(float64)
		if seq <= prev {
			t.Errorf("event %d: sequence %v after %v", i, seq, prev)
		}
		if eventNo != float64(i+1) {
			t.Errorf("event %d: eventNo %v, want %d", i, eventNo, i+1)
		}
		if e["durability"] != "durable" || e["sessionId"] != "e2e" {
			t.Errorf("event %d: %v", i, e)
		}
		prev = seq
		types = append(types, e["type"].(string))
	}
	if len(types) == 0 || types[0] != "user_message_chunk" {
		t.Fatalf("history types = %v, want the user message first", types)
	}
	var message string
	tools := map[string]bool{}
	for _, e := range page.Events {
		switch e["type"] {
		case "agent_message_chunk":
			if message == "" {
				message = e["content"].(map[string]any)["text"].(string)
			}
		case "tool_call":
			tools[e["toolCallId"].(string)] = true
		}
	}
	if message != chunkText(50) {
		t.Errorf("first durable agent message = %q, want the 50 chunks coalesced", message)
	}
	if !tools["call_1"] || !tools["call_2"] {
		t.Errorf("tool calls in history = %v, want call_1 and call_2", tools)
	}
}
