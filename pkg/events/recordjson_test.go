package events_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"skein.dev/pkg/events"
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
			line, err := events.RecordJSON(v)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var got struct {
				Record string `json:"record"`
			}
			if err := json.Unmarshal(line, &got); err != nil || got.Record != name || bytes.ContainsAny(line, "\n\r") {
				t.Errorf("RecordJSON(%s) = %s", name, line)
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
		line, err := events.RecordJSON(tc.v)
		if err != nil || string(line) != tc.want {
			t.Errorf("RecordJSON = %s, %v; want %s", line, err, tc.want)
		}
	}
}
