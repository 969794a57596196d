package eventjson_test

import (
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

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
		t.Errorf("Record = %s, %v", rec, err)
	}
}
