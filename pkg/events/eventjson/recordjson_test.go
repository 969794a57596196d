package eventjson_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// Every registered variant renders, zero or round-tripped through the
// codec, as one line of valid JSON naming it.
func TestRecordJSONEveryVariant(t *testing.T) {
	names := events.VariantNames()
	slices.Sort(names)
	for _, name := range names {
		v, _ := events.NewVariant(name)
		b, err := events.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, err := events.Unmarshal(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, v := range []events.Variant{v, back} {
			line, err := eventjson.Record(v)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var got struct {
				Record string `json:"record"`
			}
			if err := json.Unmarshal(line, &got); err != nil || got.Record != name || bytes.ContainsAny(line, "\n\r") {
				t.Errorf("Record(%s) = %s", name, line)
			}
		}
	}
}

// Native JSON that the public form cannot show falls back to the fields,
// and bytes that are not JSON become a string: the line stays valid.
func TestRecordJSONInvalidNative(t *testing.T) {
	for _, tc := range []struct {
		v    events.Variant
		want string
	}{
		{&events.AcpDurableSessionUpdate{Update: events.JSON(`[1, 2]`)}, `{"record":"AcpDurableSessionUpdate","update":[1,2]}`},
		{&events.AcpDurableSessionUpdate{Update: events.JSON(`{"content":1}`)}, `{"record":"AcpDurableSessionUpdate","update":{"content":1}}`},
		{&events.AdapterUpdate{Update: events.JSON(`{oops`)}, `{"record":"AdapterUpdate","update":"{oops"}`},
		// A native "record" member never repeats the record key.
		{&events.AcpDurableSessionUpdate{Update: events.JSON(`{"record":"x","sessionUpdate":"plan"}`)}, `{"record":"AcpDurableSessionUpdate","durability":"durable","type":"plan"}`},
	} {
		line, err := eventjson.Record(tc.v)
		if err != nil || string(line) != tc.want {
			t.Errorf("Record = %s, %v; want %s", line, err, tc.want)
		}
	}
}

// The live burst and the runner's routes read as their fields: a person
// sees the updates as JSON, and an earlier runner's record has no route.
func TestRecordJSONLiveBurstAndRoutes(t *testing.T) {
	id := "m1"
	for _, tc := range []struct {
		v    events.Variant
		want string
	}{
		{&events.EphemeralUpdates{SessionID: "s1", AfterSequence: 7, Updates: []events.JSON{events.JSON(`{"sessionUpdate":"agent_message_chunk"}`), events.JSON("{\"a\":\n1}")}},
			`{"record":"EphemeralUpdates","sessionId":"s1","afterSequence":7,"updates":[{"sessionUpdate":"agent_message_chunk"},{"a":1}]}`},
		{&events.AdapterUpdate{Update: events.JSON(`{}`), Kind: "agent_message_chunk", MessageID: &id},
			`{"record":"AdapterUpdate","update":{},"kind":"agent_message_chunk","messageId":"m1"}`},
		{&events.AdapterUpdates{Updates: []events.JSON{events.JSON(`{}`), events.JSON(`{}`)}, Kinds: []string{"plan", "agent_message_chunk"}, MessageIDs: []*string{nil, &id}},
			`{"record":"AdapterUpdates","updates":[{},{}],"kinds":["plan","agent_message_chunk"],"messageIds":[null,"m1"]}`},
		{&events.AdapterUpdates{Updates: []events.JSON{events.JSON(`{}`)}}, `{"record":"AdapterUpdates","updates":[{}]}`},
	} {
		line, err := eventjson.Record(tc.v)
		if err != nil || string(line) != tc.want {
			t.Errorf("Record = %s, %v; want %s", line, err, tc.want)
		}
	}
}

// Route gives the runner's route of each update, and none for a record
// whose lists do not match its updates.
func TestAdapterUpdatesRoute(t *testing.T) {
	id := "m1"
	u := &events.AdapterUpdates{Updates: make([]events.JSON, 2), Kinds: []string{"plan", "agent_message_chunk"}, MessageIDs: []*string{nil, &id}}
	if kind, got, ok := u.Route(1); !ok || kind != "agent_message_chunk" || got == nil || *got != id {
		t.Errorf("Route(1) = %q, %v, %v", kind, got, ok)
	}
	if kind, got, ok := u.Route(0); !ok || kind != "plan" || got != nil {
		t.Errorf("Route(0) = %q, %v, %v", kind, got, ok)
	}
	u.MessageIDs = nil
	if _, got, ok := u.Route(1); !ok || got != nil {
		t.Errorf("Route(1) without messageIds = %v, %v", got, ok)
	}
	for _, bad := range []*events.AdapterUpdates{
		{Updates: make([]events.JSON, 2)},
		{Updates: make([]events.JSON, 2), Kinds: []string{"plan"}},
		{Updates: make([]events.JSON, 2), Kinds: []string{"plan", "plan"}, MessageIDs: []*string{nil}},
		{Updates: make([]events.JSON, 2), Kinds: []string{"plan", ""}},
	} {
		if _, _, ok := bad.Route(1); ok {
			t.Errorf("Route(1) of %+v has a route", bad)
		}
	}
}
