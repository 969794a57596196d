package gateway_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
)

// rawEphemeral reads an SSE stream's raw bytes and sends each ephemeral
// event's frame, as written, on the returned channel.
func rawEphemeral(t *testing.T, e *env, path string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET %s = %v, %v", path, resp, err)
	}
	frames := make(chan string, 64)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		br := bufio.NewReader(resp.Body)
		var frame strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			frame.WriteString(line)
			if line != "\n" {
				continue
			}
			if f := frame.String(); strings.HasPrefix(f, "event: ephemeral\n") {
				select {
				case frames <- f:
				case <-ctx.Done():
					return
				}
			}
			frame.Reset()
		}
	}()
	return frames
}

// publishLive publishes v on the session's live subject as the session
// service does.
func publishLive(t *testing.T, e *env, sid events.SessionID, v events.Variant, after uint64) {
	t.Helper()
	data, err := events.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(events.LiveSubject(ns, sid))
	msg.Data = data
	msg.Header.Set(events.HeaderRecord, v.VariantName())
	msg.Header.Set(events.HeaderAfterSequence, strconv.FormatUint(after, 10))
	if err := e.nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
}

// A burst's deltas in one EphemeralUpdates reach a viewer as the same SSE
// frames, byte for byte, as the same deltas published one by one, in
// order; a delta without a public form is left out alone.
func TestBurstDeltasAreTheSameFrames(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	e.backend.Say("s1", "zero")
	// After the turn's end, the last record the stream sends (its state
	// event): a delta after an earlier one would be stale.
	s1 := e.backend.Last("s1")
	frames := rawEphemeral(t, e, "/v1/sessions/s1/events")
	updates := []events.JSON{
		events.JSON(TextChunk("agent_message_chunk", "Hel")),
		events.JSON(`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"a\r\nb"},"messageId":"m","_meta":{"k":[1,2]}}`),
		events.JSON(`{"content":{"type":"text","text":"no type"}}`), // no public form
		events.JSON(TextChunk("agent_message_chunk", "lo \u00e9")),
	}
	public := []events.JSON{updates[0], updates[1], updates[3]}
	next := func() string {
		t.Helper()
		select {
		case f := <-frames:
			return f
		case <-time.After(10 * time.Second):
			t.Fatal("no ephemeral frame in 10 s")
		}
		return ""
	}
	var alone []string
	for _, u := range updates {
		publishLive(t, e, "s1", &events.AcpEphemeralSessionUpdateEvent{SessionID: "s1", AfterSequence: s1, Update: u}, s1)
	}
	for range public {
		alone = append(alone, next())
	}
	publishLive(t, e, "s1", &events.EphemeralUpdates{SessionID: "s1", AfterSequence: s1, Updates: updates}, s1)
	for i := range public {
		if got := next(); got != alone[i] {
			t.Errorf("delta %d of the burst:\n got %q\nwant %q", i, got, alone[i])
		}
	}
	if !strings.Contains(alone[1], `data: {"sessionId":"s1","afterSequence":`+strconv.FormatUint(s1, 10)+`,"durability":"ephemeral","type":"agent_thought_chunk","content":{"type":"text","text":"a\r\nb"},"messageId":"m","_meta":{"k":[1,2]}}`+"\n") {
		t.Errorf("frame %q is not the public form of its delta", alone[1])
	}
}
