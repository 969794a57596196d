package eventjson_test

import (
	"fmt"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// A tool_call update as claude-agent-acp wrote it (testdata/transcripts),
// stored as event 7 of session main. The public object flattens it: the
// envelope first, then the update's own members, byte for byte, with
// sessionUpdate turned into type.
func ExampleDurable() {
	entry := &events.AcpDurableHistoryEntry{
		SessionID: "main",
		Sequence:  41,
		EventNo:   7,
		Timestamp: "2026-11-30T07:32:37.845Z",
		Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{
			Update: events.JSON(`{"_meta":{"claudeCode":{"toolName":"Bash"}},"toolCallId":"toolu_mock1","sessionUpdate":"tool_call","name":"Bash","rawInput":{},"status":"pending","title":"Terminal","kind":"execute","content":[]}`),
		}},
	}
	b, err := eventjson.Durable(entry)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(b))
	// Output:
	// {"sessionId":"main","sequence":41,"eventNo":7,"timestamp":"2026-11-30T07:32:37.845Z","durability":"durable","type":"tool_call","_meta":{"claudeCode":{"toolName":"Bash"}},"toolCallId":"toolu_mock1","name":"Bash","rawInput":{},"status":"pending","title":"Terminal","kind":"execute","content":[]}
}

// A permission request keeps the ACP params beside the envelope. The params'
// sessionId is the adapter's private session ID: it collides with the
// envelope's sessionId and is dropped.
func ExampleDurable_permissionRequest() {
	entry := &events.AcpDurableHistoryEntry{
		SessionID: "main",
		Sequence:  44,
		EventNo:   8,
		Timestamp: "2026-11-30T07:32:38.102Z",
		Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurablePermissionRequest{
			RequestID: "perm-01JD3K",
			Request:   events.JSON(`{"sessionId":"799b1354-6bb3-49d3-8245-be95a8e1060c","toolCall":{"toolCallId":"toolu_mock1","title":"touch created-by-mock.txt","kind":"execute"},"options":[{"optionId":"allow-once","name":"Yes","kind":"allow_once"},{"optionId":"reject","name":"No","kind":"reject_once"}]}`),
		}},
	}
	b, err := eventjson.Durable(entry)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(b))
	// Output:
	// {"sessionId":"main","sequence":44,"eventNo":8,"timestamp":"2026-11-30T07:32:38.102Z","durability":"durable","type":"permission_request","requestId":"perm-01JD3K","toolCall":{"toolCallId":"toolu_mock1","title":"touch created-by-mock.txt","kind":"execute"},"options":[{"optionId":"allow-once","name":"Yes","kind":"allow_once"},{"optionId":"reject","name":"No","kind":"reject_once"}]}
}

// A live delta carries the sequence it follows instead of its own.
func ExampleEphemeral() {
	delta := &events.AcpEphemeralSessionUpdateEvent{
		SessionID:     "main",
		AfterSequence: 57,
		Update:        events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done: "},"messageId":"msg_mock_2"}`),
	}
	b, err := eventjson.Ephemeral(delta)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(b))
	// Output:
	// {"sessionId":"main","afterSequence":57,"durability":"ephemeral","type":"agent_message_chunk","content":{"type":"text","text":"Done: "},"messageId":"msg_mock_2"}
}

func ExampleType() {
	for _, u := range []string{
		`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hm"}}`,
		`{"sessionUpdate":"totally_unknown_variant","foo":1}`,
		`{"content":{}}`,
	} {
		typ, err := eventjson.Type(events.JSON(u))
		fmt.Printf("%q %v\n", typ, err)
	}
	// Output:
	// "agent_thought_chunk" <nil>
	// "totally_unknown_variant" <nil>
	// "" invalid_payload: public json: update has no sessionUpdate
}
