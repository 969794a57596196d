package eventjson_test

import (
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// Who caused an event (issue 32, who did what) is the envelope's
// "principal", after the timestamp, on the entries that name one; a
// native member of that name is then dropped, as any envelope key's; an
// entry that names no one has no "principal", and keeps a native one.
func TestPublicJSONPrincipal(t *testing.T) {
	for _, tt := range []struct {
		name  string
		entry events.AcpDurableHistoryEntry
		want  string
	}{
		{"user message", events.AcpDurableHistoryEntry{SessionID: "s1", Sequence: 5, EventNo: 2, Timestamp: "t", Principal: "alice",
			Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{
				Update: events.JSON(`{"sessionUpdate":"user_message_chunk","principal":"mallory","content":{"type":"text","text":"hi"}}`)}}},
			`{"sessionId":"s1","sequence":5,"eventNo":2,"timestamp":"t","principal":"alice","durability":"durable","type":"user_message_chunk","content":{"type":"text","text":"hi"}}`},
		{"permission answer", events.AcpDurableHistoryEntry{SessionID: "s1", Sequence: 9, EventNo: 4, Timestamp: "t", Principal: "bob",
			Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurablePermissionResponse{RequestID: "perm_1",
				Response: events.JSON(`{"outcome":{"outcome":"selected","optionId":"allow"}}`), Status: events.PermissionAccepted}}},
			`{"sessionId":"s1","sequence":9,"eventNo":4,"timestamp":"t","principal":"bob","durability":"durable","type":"permission_response","requestId":"perm_1","status":"accepted","outcome":{"outcome":"selected","optionId":"allow"}}`},
		{"agent message, no one named", events.AcpDurableHistoryEntry{SessionID: "s1", Sequence: 6, EventNo: 3, Timestamp: "t",
			Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{
				Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","principal":"the agent's own","content":{"type":"text","text":"ok"}}`)}}},
			`{"sessionId":"s1","sequence":6,"eventNo":3,"timestamp":"t","durability":"durable","type":"agent_message_chunk","principal":"the agent's own","content":{"type":"text","text":"ok"}}`},
	} {
		got, err := eventjson.Durable(&tt.entry)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if string(got) != tt.want {
			t.Errorf("%s\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}
