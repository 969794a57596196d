package events_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

const testSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ratio":{"type":"number"},"ok":{"type":"boolean"},"color":{"type":"string","enum":["red","blue"]},"size":{"type":"string","oneOf":[{"const":"s","title":"Small"},{"const":"l","title":"Large"}]},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}},"x":{"type":"_custom"}},"required":["name"]}`

func testParams(schema string) string {
	return `{"sessionId":"acp-1","mode":"form","message":"Who?","requestedSchema":` + schema + `}`
}

func TestParseInputRequest(t *testing.T) {
	if _, err := events.ParseInputRequest([]byte(testParams(testSchema))); err != nil {
		t.Fatalf("a valid request: %v", err)
	}
	for name, params := range map[string]string{
		"url mode":          `{"sessionId":"a","mode":"url","message":"m","elicitationId":"e","url":"https://x"}`,
		"no mode":           `{"message":"m","requestedSchema":{"type":"object"}}`,
		"no message":        `{"mode":"form","requestedSchema":{"type":"object"}}`,
		"no schema":         `{"mode":"form","message":"m"}`,
		"schema not object": `{"mode":"form","message":"m","requestedSchema":[]}`,
		"schema type":       `{"mode":"form","message":"m","requestedSchema":{"type":"array"}}`,
		"property array":    `{"mode":"form","message":"m","requestedSchema":{"properties":{"a":[]}}}`,
		"required unknown":  `{"mode":"form","message":"m","requestedSchema":{"properties":{},"required":["a"]}}`,
		"not an object":     `[]`,
		"invalid":           `{"mode":`,
	} {
		if _, err := events.ParseInputRequest([]byte(params)); err == nil || events.AsError(err).Code != events.CodeAdapterProtocol {
			t.Errorf("%s: %v, want %s", name, err, events.CodeAdapterProtocol)
		}
	}
}

func TestInputSchemaCheck(t *testing.T) {
	s, err := events.ParseInputRequest([]byte(testParams(testSchema)))
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{
		`{"name":"n"}`,
		` { "name" : "" , "age" : -3 } `,
		`{"name":"n","age":3.0,"ratio":1e-3,"ok":false,"color":"red","size":"l","tags":["a","b"],"x":[]}`,
		`{"name":"n","x":"s"}`,
		`{"name":"n","x":2}`,
		`{"name":"n","age":9223372036854775807}`,
	} {
		if err := s.Check(events.JSON(ok)); err != nil {
			t.Errorf("Check(%s) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{
		``, `{}`, `{"age":1}`, `null`, `[]`, `"name"`, `{"name":"n"`,
		`{"name":1}`, `{"name":null}`, `{"name":"n","age":1.5}`, `{"name":"n","age":"1"}`, `{"name":"n","age":1e300}`,
		`{"name":"n","ratio":"1"}`, `{"name":"n","ok":1}`, `{"name":"n","color":"green"}`, `{"name":"n","size":"m"}`,
		`{"name":"n","tags":["c"]}`, `{"name":"n","tags":"a"}`, `{"name":"n","x":{}}`, `{"name":"n","x":null}`,
		`{"name":"n","other":1}`, `{"name":"n","name":"m"}`,
	} {
		if err := s.Check(events.JSON(bad)); err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("Check(%s) = %v, want %s", bad, err, events.CodeInvalidRequest)
		}
	}
}

func TestRespondInputValidate(t *testing.T) {
	for _, ok := range []events.RespondInputRequest{
		{SessionID: "s1", RequestID: "input_1", Action: "accept", Content: events.JSON(`{"a":1}`)},
		{SessionID: "s1", RequestID: "input_1", Action: "accept"},
		{SessionID: "s1", RequestID: "input_1", Action: "decline"},
		{SessionID: "s1", RequestID: "input_1", Action: "cancel"},
	} {
		if _, err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for _, bad := range []events.RespondInputRequest{
		{SessionID: "", RequestID: "input_1", Action: "accept"},
		{SessionID: "s1", RequestID: "", Action: "accept"},
		{SessionID: "s1", RequestID: "a b", Action: "accept"},
		{SessionID: "s1", RequestID: "input_1", Action: "ACCEPT"},
		{SessionID: "s1", RequestID: "input_1", Action: "accept", Content: events.JSON(`[1]`)},
		{SessionID: "s1", RequestID: "input_1", Action: "accept", Content: events.JSON(`{"a":`)},
		{SessionID: "s1", RequestID: "input_1", Action: "decline", Content: events.JSON(`{}`)},
	} {
		if _, err := bad.Validate(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}

func TestInputResponseJSON(t *testing.T) {
	for _, tc := range []struct {
		action, content, want string
	}{
		{"accept", "{ \"a\" : 1.50,\n\"b\":[\"x\"] }", `{"action":"accept","content":{"a":1.50,"b":["x"]}}`},
		{"accept", "", `{"action":"accept"}`},
		{"decline", "", `{"action":"decline"}`},
		{"cancel", "", `{"action":"cancel"}`},
	} {
		if got := string(events.InputResponseJSON(tc.action, events.JSON(tc.content))); got != tc.want {
			t.Errorf("InputResponseJSON(%s, %s) = %s, want %s", tc.action, tc.content, got, tc.want)
		}
	}
}

// The public form of the input events: Skein's envelope, then the agent's
// members byte for byte, its sessionId dropped.
func TestInputPublicJSON(t *testing.T) {
	request := `{"sessionId":"x","mode":"form","message":"Who\u0020?","requestedSchema":{"properties": {"a": {"type":"string"}}}}`
	entry := &events.AcpDurableHistoryEntry{SessionID: "s1", Sequence: 7, EventNo: 3, Timestamp: "t",
		Event: events.Union[events.AcpDurableEvent]{V: &events.InputRequest{RequestID: "input_1", Request: events.JSON(request)}}}
	got, err := eventjson.Durable(entry)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"sessionId":"s1","sequence":7,"eventNo":3,"timestamp":"t","durability":"durable","type":"input_request","requestId":"input_1","mode":"form","message":"Who\u0020?","requestedSchema":{"properties": {"a": {"type":"string"}}}}`
	if string(got) != want {
		t.Errorf("input_request\n got %s\nwant %s", got, want)
	}
	reason := events.ReasonInputPolicy
	entry.Event.V = &events.InputResponse{RequestID: "input_1", Response: events.JSON(`{"action":"decline"}`), Status: events.PermissionTerminal, Reason: &reason}
	if got, err = eventjson.Durable(entry); err != nil {
		t.Fatal(err)
	}
	want = `{"sessionId":"s1","sequence":7,"eventNo":3,"timestamp":"t","durability":"durable","type":"input_response","requestId":"input_1","status":"terminal","reason":"input_policy","action":"decline"}`
	if string(got) != want {
		t.Errorf("input_response\n got %s\nwant %s", got, want)
	}
	// Through the codec, as history carries it, and as skein decode shows it.
	data, err := events.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	back, err := events.Decode[events.AcpDurableHistoryEntry](data)
	if err != nil {
		t.Fatalf("decode a history entry holding an input_response: %v", err)
	}
	if again, err := eventjson.Durable(back); err != nil || string(again) != want {
		t.Errorf("after the codec: %s, %v", again, err)
	}
	rec, err := eventjson.Record(&events.InputRequest{RequestID: "input_1", Request: events.JSON(request)})
	if err != nil || !strings.HasPrefix(string(rec), `{"record":"InputRequest","durability":"durable","type":"input_request","requestId":"input_1",`) ||
		!strings.Contains(string(rec), `"mode":"form"`) {
		t.Errorf("RecordJSON = %s, %v", rec, err)
	}
}

// FuzzInputCheck: Check never panics, and content it accepts is a JSON
// object whose every member is a property of the schema holding a value of
// the property's type, with every required property present.
func FuzzInputCheck(f *testing.F) {
	for _, seed := range []string{`{"name":"n"}`, `{"name":"n","age":3.0,"tags":["a"]}`, `{"name":1}`, `{}`, `[]`, `{"name":"n","age":1e19}`, "{\"name\":\"\xff\"}"} {
		f.Add([]byte(seed))
	}
	s, err := events.ParseInputRequest([]byte(testParams(testSchema)))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		if s.Check(events.JSON(content)) != nil {
			return
		}
		var m map[string]any
		if len(content) > 0 {
			if err := json.Unmarshal(content, &m); err != nil || m == nil {
				t.Fatalf("Check accepted %q, which is not a JSON object (%v)", content, err)
			}
		}
		if _, ok := m["name"].(string); !ok {
			t.Fatalf("Check accepted %q without a string name", content)
		}
		for k, v := range m {
			var ok bool
			switch k {
			case "name":
				_, ok = v.(string)
			case "age":
				n, isNum := v.(float64)
				ok = isNum && n == math.Trunc(n)
			case "ratio":
				_, ok = v.(float64)
			case "ok":
				_, ok = v.(bool)
			case "color":
				ok = v == "red" || v == "blue"
			case "size":
				ok = v == "s" || v == "l"
			case "tags":
				vs, isArr := v.([]any)
				ok = isArr
				for _, e := range vs {
					ok = ok && (e == "a" || e == "b")
				}
			case "x":
				switch x := v.(type) {
				case string, float64, bool:
					ok = true
				case []any:
					ok = true
					for _, e := range x {
						_, isStr := e.(string)
						ok = ok && isStr
					}
				}
			}
			if !ok {
				t.Fatalf("Check accepted %q: %s = %v", content, k, v)
			}
		}
	})
}

// FuzzParseInputRequest: reading an agent's request never panics, and a
// schema it accepts can check any content without panicking.
func FuzzParseInputRequest(f *testing.F) {
	f.Add([]byte(testParams(testSchema)), []byte(`{"name":"n"}`))
	f.Add([]byte(`{"mode":"form","message":"m","requestedSchema":{"properties":{"a":{}}}}`), []byte(`{"a":[1]}`))
	f.Fuzz(func(t *testing.T, params, content []byte) {
		s, err := events.ParseInputRequest(params)
		if err != nil {
			if events.AsError(err).Code != events.CodeAdapterProtocol {
				t.Fatalf("ParseInputRequest(%q) = %v", params, err)
			}
			return
		}
		if err := s.Check(events.JSON(content)); err != nil && events.AsError(err).Code != events.CodeInvalidRequest {
			t.Fatalf("Check(%q) = %v", content, err)
		}
	})
}
