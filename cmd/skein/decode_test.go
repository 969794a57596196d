package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
)

// decode runs `skein decode` on payload and returns its one line of output
// (without the newline). It fails the test unless decode exits 0 and
// prints exactly one line of valid JSON.
func decode(t testing.TB, payload []byte) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"decode"}, func(string) string { return "" }, bytes.NewReader(payload), &stdout, &stderr); code != 0 {
		t.Fatalf("decode exited %d: %s", code, stderr.String())
	}
	out := stdout.Bytes()
	line, ok := bytes.CutSuffix(out, []byte("\n"))
	if !ok || bytes.Contains(line, []byte("\n")) {
		t.Fatalf("decode printed %q, want one line", out)
	}
	if !json.Valid(line) {
		t.Fatalf("decode printed invalid JSON %q", line)
	}
	return line
}

// sameJSON reports whether a and b are equal as JSON values.
func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%q: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

func mustMarshal(t testing.TB, v events.Variant) []byte {
	t.Helper()
	b, err := events.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeRecords are real records of several kinds, with what decode must
// show of each: members whose values are compared as JSON.
func decodeRecords() []struct {
	v    events.Variant
	want map[string]string
} {
	reason := "adapter exited"
	key := "k1"
	// ACP JSON as an adapter may write it: spaced, over lines, with _meta.
	update := events.JSON("{\"sessionUpdate\": \"agent_message_chunk\",\n \"content\": {\"type\": \"text\", \"text\": \"hi\\n\"}, \"_meta\": {\"n\": 1.50}}")
	return []struct {
		v    events.Variant
		want map[string]string
	}{
		{&events.AcpDurableSessionUpdate{Update: update},
			map[string]string{"durability": `"durable"`, "type": `"agent_message_chunk"`, "content": `{"type":"text","text":"hi\n"}`, "_meta": `{"n":1.50}`}},
		{&events.AcpDurablePermissionResponse{RequestID: "perm_1", Response: events.JSON(`{"outcome":{"outcome":"cancelled"}}`), Status: events.PermissionTerminal, Reason: &reason},
			map[string]string{"type": `"permission_response"`, "requestId": `"perm_1"`, "reason": `"adapter exited"`, "outcome": `{"outcome":"cancelled"}`}},
		{&events.AcpEphemeralSessionUpdateEvent{SessionID: "s1", AfterSequence: 7, Update: update},
			map[string]string{"sessionId": `"s1"`, "afterSequence": `7`, "durability": `"ephemeral"`, "type": `"agent_message_chunk"`}},
		{&events.TurnFinished{TurnID: "t1", IdempotencyKey: &key, Outcome: events.OutcomeFailed, Error: &events.AcpErrorResponse{Code: "adapter_error", Message: "boom"}},
			map[string]string{"turnId": `"t1"`, "idempotencyKey": `"k1"`, "outcome": `"failed"`}},
		{&events.SessionOpened{Agent: "test", Cwd: "/w", Env: events.JSON(`{"A":"b"}`), PermissionPolicy: events.PolicyAsk},
			map[string]string{"agent": `"test"`, "env": `{"A":"b"}`, "permissionPolicy": `"ask"`}},
		{&events.TitleChanged{Title: "Hello", Source: "rename"},
			map[string]string{"title": `"Hello"`}},
		{&events.AdapterUpdates{Updates: []events.JSON{update, events.JSON(`{"sessionUpdate":"plan","entries":[]}`)}},
			map[string]string{"updates": `[` + string(update) + `,{"sessionUpdate":"plan","entries":[]}]`}},
		{&events.AcpAgentStderrEvent{SessionID: "s1", ProcessID: "p1", Chunk: []byte("warning: x\n")},
			map[string]string{"chunk": `"warning: x\n"`}},
		{&events.AcpPromptRequest{SessionID: new("s1"), Content: events.JSON(`[{"type":"text","text":"hi"}]`)},
			map[string]string{"sessionId": `"s1"`, "content": `[{"type":"text","text":"hi"}]`}},
		{&events.AcpHistoryPageResponse{Events: []events.AcpDurableHistoryEntry{{SessionID: "s1", Sequence: 3, Timestamp: "2026-01-01T00:00:00Z", EventNo: 1, Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{Update: update}}}}},
			map[string]string{"events": `[{"sessionId":"s1","sequence":3,"eventNo":1,"timestamp":"2026-01-01T00:00:00Z","durability":"durable","type":"agent_message_chunk","content":{"type":"text","text":"hi\n"},"_meta":{"n":1.50}}]`}},
		{&events.SessionMeta{Namespace: "default", Info: events.AcpDurableSessionInfo{SessionID: "s1"}, AgentInfo: events.JSON(`{"name":"test"}`)},
			map[string]string{"namespace": `"default"`, "agentInfo": `{"name":"test"}`}},
	}
}

// skein decode prints each record as one line of JSON that names its
// variant, with its fields by their wire names and its ACP JSON embedded.
func TestDecode(t *testing.T) {
	for _, rec := range decodeRecords() {
		t.Run(rec.v.VariantName(), func(t *testing.T) {
			line := decode(t, mustMarshal(t, rec.v))
			var got map[string]json.RawMessage
			if err := json.Unmarshal(line, &got); err != nil {
				t.Fatal(err)
			}
			if string(got["record"]) != `"`+rec.v.VariantName()+`"` {
				t.Errorf("record = %s, want %q in %s", got["record"], rec.v.VariantName(), line)
			}
			for k, want := range rec.want {
				if g, ok := got[k]; !ok || !sameJSON(t, g, []byte(want)) {
					t.Errorf("%s = %s, want %s in %s", k, g, want, line)
				}
			}
		})
	}
	// Number spellings and key order of ACP JSON survive: only whitespace
	// goes.
	line := decode(t, mustMarshal(t, &events.AdapterUpdate{Update: events.JSON(`{"z": 1.50, "a": [1e3]}`)}))
	if want := `{"record":"AdapterUpdate","update":{"z":1.50,"a":[1e3]}}`; string(line) != want {
		t.Errorf("decode = %s, want %s", line, want)
	}
}

// A payload that is not a Skein record prints {"error", "bytes"} and exits
// 0, so that a nats sub --translate session keeps going.
func TestDecodeNotARecord(t *testing.T) {
	unknown := mustMarshal(t, &events.TurnFinished{TurnID: "t"})
	unknown = bytes.Replace(unknown, []byte("TurnFinished"), []byte("TurnFinishex"), 1)
	for name, payload := range map[string][]byte{
		"empty":   nil,
		"garbage": []byte("\xff\x00garbage"),
		"json":    []byte(`{"v":1,"type":"TurnFinished","body":{}}`),
		"unknown": unknown,
	} {
		t.Run(name, func(t *testing.T) {
			var got struct {
				Error string `json:"error"`
				Bytes *int   `json:"bytes"`
			}
			line := decode(t, payload)
			if err := json.Unmarshal(line, &got); err != nil || got.Error == "" || got.Bytes == nil || *got.Bytes != len(payload) {
				t.Errorf("decode = %s, want an error and \"bytes\":%d", line, len(payload))
			}
		})
	}
}

// FuzzDecode: whatever the payload, decode prints one line of valid JSON
// and exits 0.
func FuzzDecode(f *testing.F) {
	for _, rec := range decodeRecords() {
		f.Add(mustMarshal(f, rec.v))
	}
	f.Add(mustMarshal(f, &events.AdapterUpdate{Update: events.JSON(`not json`)}))
	f.Add(mustMarshal(f, &events.AcpDurableSessionUpdate{Update: events.JSON(`[1]`)}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		decode(t, payload)
	})
}

// Real records off a running stack: every record republished on
// acp.tail.default.> for a session's open and first turn decodes, and the
// turn's records are there by name.
func TestDecodeTail(t *testing.T) {
	ns := natstest.Run(t, natstest.WithListen())
	st := startStack(t, ns, t.TempDir())
	nc := natstest.Connect(t, ns)
	var (
		mu   sync.Mutex
		msgs []*nats.Msg
	)
	sub, err := nc.Subscribe("acp.tail.default.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		msgs = append(msgs, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	openAndPrompt(t, st.url, "dec")
	if err := pollFor(t.Context(), "the turn's TurnFinished on the tail", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(msgs, func(m *nats.Msg) bool { return m.Header.Get(events.HeaderRecord) == "TurnFinished" })
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, m := range msgs {
		line := decode(t, m.Data)
		var got struct {
			Record string `json:"record"`
			Type   string `json:"type"`
		}
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatal(err)
		}
		if want := m.Header.Get(events.HeaderRecord); got.Record != want {
			t.Errorf("%s: record %q, want %q (Acp-Record): %s", m.Subject, got.Record, want, line)
		}
		seen[got.Record+" "+got.Type] = true
		if got.Type == "user_message_chunk" && !strings.Contains(string(line), `"text":"say hello"`) {
			t.Errorf("user message %s does not hold the prompt", line)
		}
	}
	for _, want := range []string{"SessionOpened ", "AcpDurableSessionUpdate user_message_chunk", "AcpDurableSessionUpdate agent_message_chunk", "TurnFinished "} {
		if !seen[want] {
			t.Errorf("no %q decoded among %v", want, seen)
		}
	}
}

func openAndPrompt(t *testing.T, base, sid string) {
	t.Helper()
	if code, b := do(t, http.MethodPut, base+"/v1/sessions/"+sid, `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("PUT %s = %d %s", sid, code, b)
	}
	if code, b := do(t, http.MethodPost, base+"/v1/sessions/"+sid+"/prompt", promptBody("say hello")); code != http.StatusOK {
		t.Fatalf("prompt = %d %s", code, b)
	}
}
