package eventjson_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/public")

// publicCase renders one event as public JSON. Golden output lives in
// testdata/public/<name>.json.
type publicCase struct {
	name  string
	event any // *events.AcpDurableHistoryEntry or *events.AcpEphemeralSessionUpdateEvent
}

func durableUpdate(seq, eventNo uint64, update events.JSON) *events.AcpDurableHistoryEntry {
	return &events.AcpDurableHistoryEntry{
		SessionID: "main",
		Sequence:  seq,
		EventNo:   eventNo,
		Timestamp: "2026-11-30T07:32:37.845Z",
		Event:     events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{Update: update}},
	}
}

func durableEvent(seq, eventNo uint64, ev events.AcpDurableEvent) *events.AcpDurableHistoryEntry {
	e := durableUpdate(seq, eventNo, nil)
	e.Event.V = ev
	return e
}

// publicCases builds the golden cases: real ACP payloads from the
// transcripts in testdata/transcripts, then edge cases.
func publicCases(t testing.TB) []publicCase {
	t.Helper()
	claude := readTranscript(t, "run-claude-agent-acp-mock-perm-allow.log")
	gosdk := readTranscript(t, "run-gosdk-probe.log")
	codex := readTranscript(t, "run-codex-acp-mock-tool-reject.log")
	cancel := readTranscript(t, "run-example-cancel-perm.log")

	claudeAsk := claude.request(t, "session/request_permission", 0)
	codexAsk := codex.request(t, "session/request_permission", 0)
	cancelAsk := cancel.request(t, "session/request_permission", 0)

	return []publicCase{
		// _meta comes before sessionUpdate in claude-agent-acp's output.
		{"claude-tool-call", durableUpdate(41, 7, claude.update(t, "tool_call", 0))},
		// A session update keeps its own "status".
		{"claude-tool-call-update-completed", durableUpdate(57, 9, claude.update(t, "tool_call_update", 2))},
		// The params' private ACP sessionId collides with the envelope and is dropped.
		{"claude-permission-request", durableEvent(44, 8, &events.AcpDurablePermissionRequest{
			RequestID: "perm-01JD3K", Request: events.JSON(claudeAsk.Params),
		})},
		{"claude-permission-response", durableEvent(49, 9, &events.AcpDurablePermissionResponse{
			RequestID: "perm-01JD3K", Response: claude.result(t, claudeAsk.ID), Status: "accepted",
		})},
		{"claude-agent-message-chunk", &events.AcpEphemeralSessionUpdateEvent{
			SessionID: "main", AfterSequence: 57, Update: claude.update(t, "agent_message_chunk", 0),
		}},
		{"codex-permission-request", durableEvent(12, 4, &events.AcpDurablePermissionRequest{
			RequestID: "perm-01JD3M", Request: events.JSON(codexAsk.Params),
		})},
		{"codex-permission-response", durableEvent(13, 5, &events.AcpDurablePermissionResponse{
			RequestID: "perm-01JD3M", Response: codex.result(t, codexAsk.ID), Status: "accepted",
		})},
		{"example-permission-response-cancelled", durableEvent(20, 6, &events.AcpDurablePermissionResponse{
			RequestID: "perm-01JD3P", Response: cancel.result(t, cancelAsk.ID), Status: "cancelled", Reason: new("prompt_cancelled"),
		})},
		// Updates and fields no SDK knows survive untouched.
		{"gosdk-future-fields", durableUpdate(3, 2, gosdk.update(t, "agent_message_chunk", 0))},
		{"gosdk-notice", durableUpdate(4, 3, gosdk.update(t, "notice", 0))},
		{"gosdk-unknown-variant", durableUpdate(5, 4, gosdk.update(t, "totally_unknown_variant", 0))},
		{"gosdk-usage-update", durableUpdate(6, 5, gosdk.update(t, "usage_update", 0))},

		// Edge cases.
		{"collisions", durableUpdate(9, 1, events.JSON(`{"sessionId":"native","sequence":0,"eventNo":0,"timestamp":"x",`+
			`"durability":"x","session\u0049d":"escaped","sessionUpdate":"plan","type":"x","entries":[],`+
			`"status":"kept","requestId":"kept","reason":"kept","afterSequence":1,"sessionUpdate":"again"}`))},
		{"duplicate-keys", durableUpdate(10, 2, events.JSON(`{"sessionUpdate":"plan","a":1,"b":2,"a":3,"\u0062":4}`))},
		{"whitespace", durableUpdate(11, 3, events.JSON(" \n{ \"entries\" : [ 1 ,\n 2 ] ,\t\"sessionUpdate\" :\"plan\" , \"e\":{ } }\n"))},
		{"escaped-type", durableUpdate(12, 4, events.JSON(`{"sessionUpdate":"tool\u005fcall","toolCallId":"t"}`))},
		{"no-event-no", durableUpdate(13, 0, events.JSON(`{"sessionUpdate":"plan","entries":[]}`))},
		{"escaped-envelope-strings", &events.AcpDurableHistoryEntry{
			SessionID: "main", Sequence: 18446744073709551615, EventNo: 1,
			Timestamp: "tab\there \"quoted\" \u2028 é",
			Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurablePermissionResponse{
				RequestID: `id\with"quotes`, Response: events.JSON(`{}`), Status: "late", Reason: new("line\nbreak \x01 \xff"),
			}},
		}},
		{"permission-request-collisions", durableEvent(14, 5, &events.AcpDurablePermissionRequest{
			RequestID: "r", Request: events.JSON(`{"requestId":"native","type":"x","status":"kept","options":[]}`),
		})},
		{"permission-response-collisions", durableEvent(15, 6, &events.AcpDurablePermissionResponse{
			RequestID: "r", Status: "accepted", Response: events.JSON(`{"status":"native","reason":"native","outcome":{"outcome":"cancelled"}}`),
		})},
		{"ephemeral-collisions", &events.AcpEphemeralSessionUpdateEvent{
			SessionID: "s-2", AfterSequence: 0,
			Update: events.JSON(`{"afterSequence":5,"sequence":7,"durability":"durable","sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hm"}}`),
		}},
	}
}

func renderPublic(ev any) ([]byte, error) {
	switch e := ev.(type) {
	case *events.AcpDurableHistoryEntry:
		return eventjson.Durable(e)
	case *events.AcpEphemeralSessionUpdateEvent:
		return eventjson.Ephemeral(e)
	}
	panic("renderPublic: unexpected event type")
}

func TestPublicJSONGolden(t *testing.T) {
	for _, tc := range publicCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got, err := renderPublic(tc.event)
			if err != nil {
				t.Fatalf("render %s = %v", tc.name, err)
			}
			checkPublicContract(t, tc.event, got)
			compareGolden(t, filepath.Join("testdata", "public", tc.name+".json"), append(got, '\n'))
		})
	}
}

// TestPublicGoldenFilesUsed fails on a golden file that no case writes, so
// that renamed cases do not leave stale files behind.
func TestPublicGoldenFilesUsed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "public", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tc := range publicCases(t) {
		names[tc.name+".json"] = true
	}
	for _, f := range files {
		if !names[filepath.Base(f)] {
			t.Errorf("golden file %s has no case in publicCases", f)
		}
	}
}

func TestPublicJSONErrors(t *testing.T) {
	tests := []struct {
		name  string
		event any
	}{
		{"nil durable entry", (*events.AcpDurableHistoryEntry)(nil)},
		{"nil ephemeral event", (*events.AcpEphemeralSessionUpdateEvent)(nil)},
		{"no event", &events.AcpDurableHistoryEntry{SessionID: "main", Sequence: 1}},
		{"typed nil event", durableEvent(1, 1, (*events.AcpDurableSessionUpdate)(nil))},
		{"nil update", durableUpdate(1, 1, nil)},
		{"empty update", durableUpdate(1, 1, events.JSON{})},
		{"array", durableUpdate(1, 1, events.JSON(`[{"sessionUpdate":"plan"}]`))},
		{"string", durableUpdate(1, 1, events.JSON(`"plan"`))},
		{"null", durableUpdate(1, 1, events.JSON(`null`))},
		{"invalid JSON", durableUpdate(1, 1, events.JSON(`{"sessionUpdate":"plan","a":}`))},
		{"trailing data", durableUpdate(1, 1, events.JSON(`{"sessionUpdate":"plan"} {}`))},
		{"unterminated", durableUpdate(1, 1, events.JSON(`{"sessionUpdate":"plan"`))},
		{"no sessionUpdate", durableUpdate(1, 1, events.JSON(`{"content":{}}`))},
		{"nested sessionUpdate only", durableUpdate(1, 1, events.JSON(`{"x":{"sessionUpdate":"plan"}}`))},
		{"numeric sessionUpdate", durableUpdate(1, 1, events.JSON(`{"sessionUpdate":1}`))},
		{"null sessionUpdate", durableUpdate(1, 1, events.JSON(`{"sessionUpdate":null}`))},
		{"empty sessionUpdate", durableUpdate(1, 1, events.JSON(`{"sessionUpdate":""}`))},
		{"permission request not an object", durableEvent(1, 1, &events.AcpDurablePermissionRequest{RequestID: "r", Request: events.JSON(`[]`)})},
		{"permission request missing", durableEvent(1, 1, &events.AcpDurablePermissionRequest{RequestID: "r"})},
		{"permission response not an object", durableEvent(1, 1, &events.AcpDurablePermissionResponse{RequestID: "r", Response: events.JSON(`"x"`)})},
		{"ephemeral not an object", &events.AcpEphemeralSessionUpdateEvent{Update: events.JSON(`1`)}},
		{"ephemeral without type", &events.AcpEphemeralSessionUpdateEvent{Update: events.JSON(`{}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := renderPublic(tt.event)
			if err == nil {
				t.Fatalf("render = %s, nil; want an error", got)
			}
			checkInvalidPayload(t, "render", err)
		})
	}
}

func TestPublicJSONType(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr bool
	}{
		{"first key", `{"sessionUpdate":"agent_message_chunk","content":{}}`, "agent_message_chunk", false},
		{"later key", `{"_meta":{"sessionUpdate":"no"},"toolCallId":"t","sessionUpdate":"tool_call"}`, "tool_call", false},
		{"escaped value", `{"sessionUpdate":"tool\u005fcall"}`, "tool_call", false},
		{"escaped key", `{"session\u0055pdate":"plan"}`, "plan", false},
		{"duplicate: first wins", `{"sessionUpdate":"plan","sessionUpdate":"other"}`, "plan", false},
		{"whitespace", " {\n \"sessionUpdate\" : \"plan\" } ", "plan", false},
		{"missing", `{"update":"plan"}`, "", true},
		{"not a string", `{"sessionUpdate":["plan"]}`, "", true},
		{"empty", `{"sessionUpdate":""}`, "", true},
		{"not an object", `["sessionUpdate","plan"]`, "", true},
		{"invalid", `{"sessionUpdate":"plan",}`, "", true},
		{"nil", ``, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := eventjson.Type(events.JSON(tt.in))
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("Type(%s) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
			if err != nil {
				checkInvalidPayload(t, "Type", err)
			}
		})
	}
}

// TestPublicJSONManyKeys crosses the point where duplicate detection moves
// from a list to a map.
func TestPublicJSONManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"sessionUpdate":"plan"`)
	for i := range 100 {
		b.WriteString(`,"k` + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + `":` + strings.Repeat("1", 1+i%3))
	}
	b.WriteString(`,"ka":"dup","kz":"dup"}`)
	e := durableUpdate(1, 1, events.JSON(b.String()))
	got, err := eventjson.Durable(e)
	if err != nil {
		t.Fatal(err)
	}
	checkPublicContract(t, e, got)
	if bytes.Contains(got, []byte(`"dup"`)) {
		t.Errorf("Durable kept a repeated key: %s", got)
	}
}

// checkPublicContract checks out against the documented contract with an
// independent reading of the input (encoding/json's Decoder): the envelope
// first, in order, with the right values; then every native member that is
// not reserved and not a repeat, in order, with its value byte for byte.
func checkPublicContract(t testing.TB, ev any, out []byte) {
	t.Helper()
	var (
		envelope []member
		native   events.JSON
		reserved []string
		isUpdate bool
	)
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	num := func(n uint64) string { b, _ := json.Marshal(n); return string(b) }
	switch e := ev.(type) {
	case *events.AcpEphemeralSessionUpdateEvent:
		native, isUpdate = e.Update, true
		envelope = []member{{"sessionId", str(e.SessionID)}, {"afterSequence", num(e.AfterSequence)}, {"durability", `"ephemeral"`}}
		reserved = []string{"sessionId", "afterSequence", "durability", "type"}
	case *events.AcpDurableHistoryEntry:
		envelope = []member{{"sessionId", str(e.SessionID)}, {"sequence", num(e.Sequence)}}
		if e.EventNo != 0 {
			envelope = append(envelope, member{"eventNo", num(e.EventNo)})
		}
		envelope = append(envelope, member{"timestamp", str(e.Timestamp)}, member{"durability", `"durable"`})
		reserved = []string{"sessionId", "sequence", "eventNo", "timestamp", "durability", "type"}
		switch v := e.Event.V.(type) {
		case *events.AcpDurableSessionUpdate:
			native, isUpdate = v.Update, true
		case *events.AcpDurablePermissionRequest:
			native = v.Request
			envelope = append(envelope, member{"type", `"permission_request"`}, member{"requestId", str(v.RequestID)})
			reserved = append(reserved, "requestId")
		case *events.AcpDurablePermissionResponse:
			native = v.Response
			envelope = append(envelope, member{"type", `"permission_response"`}, member{"requestId", str(v.RequestID)}, member{"status", str(v.Status)})
			if v.Reason != nil {
				envelope = append(envelope, member{"reason", str(*v.Reason)})
			}
			reserved = append(reserved, "requestId", "status", "reason")
		default:
			t.Fatalf("checkPublicContract: unexpected event %T", v)
		}
	default:
		t.Fatalf("checkPublicContract: unexpected %T", ev)
	}
	in, err := readMembers(native)
	if err != nil {
		t.Fatalf("input is not a JSON object: %v", err)
	}
	var want []member
	seen := map[string]bool{}
	for _, r := range reserved {
		seen[r] = true
	}
	if isUpdate {
		seen["sessionUpdate"] = true
		typ := ""
		for _, m := range in {
			if m.Key == "sessionUpdate" {
				typ = m.Raw
				break
			}
		}
		// type goes after durability.
		envelope = append(envelope, member{"type", typ})
	}
	for _, m := range in {
		if !seen[m.Key] {
			want = append(want, m)
			seen[m.Key] = true
		}
	}

	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON: %s", out)
	}
	got, err := readMembers(out)
	if err != nil {
		t.Fatalf("output is not a JSON object: %v\n%s", err, out)
	}
	if len(got) < len(envelope) {
		t.Fatalf("output has %d members, want at least the %d of the envelope:\n%s", len(got), len(envelope), out)
	}
	// Envelope values are compared as JSON values: their escaping is ours.
	for i := range envelope {
		envelope[i].Raw = canonicalJSON(t, envelope[i].Raw)
		got[i].Raw = canonicalJSON(t, got[i].Raw)
	}
	if diff := cmp.Diff(envelope, got[:len(envelope)]); diff != "" {
		t.Errorf("envelope mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, got[len(envelope):], cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("native members mismatch (-want +got):\n%s", diff)
	}
}

// member is one key and its raw value, as encoding/json reads them.
type member struct {
	Key string
	Raw string
}

// readMembers returns the members of the JSON object data in order, with
// each value's bytes exactly as they appear in data.
func readMembers(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errNotObject
	}
	var ms []member
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		ms = append(ms, member{k.(string), string(raw)})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	return ms, nil
}

var errNotObject = &events.Error{Code: events.CodeInvalidPayload, Message: "not one JSON object"}

func canonicalJSON(t testing.TB, raw string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("canonicalJSON(%s) = %v", raw, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func compareGolden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run go test -update if the change is intended)\ngot:  %s\nwant: %s", path, got, want)
	}
}

// Transcripts: testdata/transcripts holds copies of ACP stdio captures
// (shared/acp/transcripts). Each line is an optional timestamp, a direction
// (A->C: agent to client, C->A: client to agent) and one JSON-RPC message,
// cut short when it was very long.

type transcript []rpcMessage

type rpcMessage struct {
	Dir    string
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
}

func readTranscript(t testing.TB, name string) transcript {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "transcripts", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tr transcript
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimLeft(sc.Text(), " 0123456789")
		dir, msg, ok := strings.Cut(line, " ")
		if !ok || dir != "A->C" && dir != "C->A" || !strings.HasPrefix(msg, "{") {
			continue // stderr, notes, remarshal lines
		}
		if !json.Valid([]byte(msg)) {
			continue // the capture cuts very long lines short
		}
		m := rpcMessage{Dir: dir}
		if err := json.Unmarshal([]byte(msg), &m); err != nil {
			t.Fatalf("%s: %v: %s", name, err, msg)
		}
		tr = append(tr, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tr
}

// update returns the raw update of the nth session/update whose
// sessionUpdate is typ.
func (tr transcript) update(t testing.TB, typ string, nth int) events.JSON {
	t.Helper()
	for _, m := range tr {
		if m.Method != "session/update" {
			continue
		}
		var p struct {
			Update json.RawMessage `json:"update"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			t.Fatal(err)
		}
		if got, _ := eventjson.Type(events.JSON(p.Update)); got == typ {
			if nth == 0 {
				return events.JSON(p.Update)
			}
			nth--
		}
	}
	t.Fatalf("transcript has no session/update %s", typ)
	return nil
}

// request returns the nth agent-to-client request with the method.
func (tr transcript) request(t testing.TB, method string, nth int) rpcMessage {
	t.Helper()
	for _, m := range tr {
		if m.Dir == "A->C" && m.Method == method && m.ID != nil {
			if nth == 0 {
				return m
			}
			nth--
		}
	}
	t.Fatalf("transcript has no request %s", method)
	return rpcMessage{}
}

// result returns the client's result for the agent's request id.
func (tr transcript) result(t testing.TB, id json.RawMessage) events.JSON {
	t.Helper()
	for _, m := range tr {
		if m.Dir == "C->A" && m.Method == "" && bytes.Equal(m.ID, id) && m.Result != nil {
			return events.JSON(m.Result)
		}
	}
	t.Fatalf("transcript has no result for id %s", id)
	return nil
}
