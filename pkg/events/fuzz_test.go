package events_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"skein.dev/pkg/events"
)

// FuzzUnmarshal feeds arbitrary bytes to Unmarshal. It must never panic;
// what it rejects must be an *Error with CodeInvalidPayload; and what it
// accepts must survive Marshal and Unmarshal again unchanged, with Marshal
// reaching a fixed point.
func FuzzUnmarshal(f *testing.F) {
	for _, name := range variantNames() {
		f.Add(mustMarshal(f, newVariant(f, name)))
		v := newVariant(f, name)
		fillVariant(f, v)
		f.Add(mustMarshal(f, v))
	}
	f.Add([]byte{})
	f.Add([]byte{0xc0})
	f.Add(envelope(f, "v", 1, "type", "AcpDurableHistoryEntry", "body", map[string]any{"event": nil}))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := events.Unmarshal(data)
		if err != nil {
			checkInvalidPayload(t, "Unmarshal", err)
			return
		}
		b, err := events.Marshal(v)
		if err != nil {
			t.Fatalf("Marshal(Unmarshal(%x)) = %v", data, err)
		}
		v2, err := events.Unmarshal(b)
		if err != nil {
			t.Fatalf("Unmarshal(Marshal(Unmarshal(%x))) = %v", data, err)
		}
		// Only absence can change form: an empty JSON in an optional
		// field is omitted and comes back nil. Both mean "absent".
		if diff := cmp.Diff(v, v2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip of %x mismatch (-first +second):\n%s", data, diff)
		}
		b2, err := events.Marshal(v2)
		if err != nil {
			t.Fatalf("Marshal(v2) = %v", err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("Marshal is not a fixed point:\n first %x\nsecond %x", b, b2)
		}
	})
}

// Kinds of FuzzPublicJSON's input.
const (
	fuzzDurableUpdate = iota
	fuzzPermissionRequest
	fuzzPermissionResponse
	fuzzEphemeral
	fuzzKinds
)

// FuzzPublicJSON renders arbitrary native JSON as each kind of public
// event. It must never panic; it must fail exactly when the input breaks
// the documented rules, with CodeInvalidPayload; and its output must meet
// the contract checked by checkPublicContract.
func FuzzPublicJSON(f *testing.F) {
	for _, tc := range publicCases(f) {
		switch e := tc.event.(type) {
		case *events.AcpEphemeralSessionUpdateEvent:
			f.Add(uint8(fuzzEphemeral), []byte(e.Update), e.SessionID, e.AfterSequence)
		case *events.AcpDurableHistoryEntry:
			switch v := e.Event.V.(type) {
			case *events.AcpDurableSessionUpdate:
				f.Add(uint8(fuzzDurableUpdate), []byte(v.Update), e.Timestamp, e.Sequence)
			case *events.AcpDurablePermissionRequest:
				f.Add(uint8(fuzzPermissionRequest), []byte(v.Request), v.RequestID, e.Sequence)
			case *events.AcpDurablePermissionResponse:
				f.Add(uint8(fuzzPermissionResponse), []byte(v.Response), v.Status, e.Sequence)
			}
		}
	}
	f.Add(uint8(fuzzDurableUpdate), []byte(`{"sessionUpdate":""}`), "", uint64(0))
	f.Add(uint8(fuzzDurableUpdate), []byte(`{"a":"\"}","sessionUpdate":"x","b":[{"}":"]"}]}`), "", uint64(1))
	f.Add(uint8(fuzzEphemeral), []byte(`[]`), "x", uint64(1))
	f.Fuzz(func(t *testing.T, kind uint8, native []byte, s string, n uint64) {
		var ev any
		switch kind % fuzzKinds {
		case fuzzDurableUpdate:
			ev = &events.AcpDurableHistoryEntry{SessionID: s, Sequence: n, EventNo: n / 2, Timestamp: s,
				Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{Update: native}}}
		case fuzzPermissionRequest:
			ev = &events.AcpDurableHistoryEntry{SessionID: "main", Sequence: n, EventNo: n, Timestamp: "t",
				Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurablePermissionRequest{RequestID: s, Request: native}}}
		case fuzzPermissionResponse:
			var reason *string
			if n%2 == 0 {
				reason = &s
			}
			ev = &events.AcpDurableHistoryEntry{SessionID: "main", Sequence: n, Timestamp: "t",
				Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurablePermissionResponse{RequestID: s, Status: s, Reason: reason, Response: native}}}
		case fuzzEphemeral:
			ev = &events.AcpEphemeralSessionUpdateEvent{SessionID: s, AfterSequence: n, Update: native}
		}
		isUpdate := kind%fuzzKinds == fuzzDurableUpdate || kind%fuzzKinds == fuzzEphemeral

		// The oracle: encoding/json's reading of the input.
		wantOK, wantType := true, ""
		ms, err := readMembers(native)
		if err != nil {
			wantOK = false
		} else if isUpdate {
			wantOK = false
			for _, m := range ms {
				if m.Key == "sessionUpdate" {
					wantOK = m.Raw != `""` && m.Raw[0] == '"'
					if wantOK {
						wantType = canonicalString(t, m.Raw)
					}
					break
				}
			}
		}

		out, err := renderPublic(ev)
		if (err == nil) != wantOK {
			t.Fatalf("render(kind %d, %q) = %s, %v; want success %v", kind%fuzzKinds, native, out, err, wantOK)
		}
		if err != nil {
			checkInvalidPayload(t, "render", err)
		} else {
			checkPublicContract(t, ev, out)
		}
		if isUpdate {
			typ, err := events.PublicJSONType(native)
			if (err == nil) != wantOK || typ != wantType {
				t.Fatalf("PublicJSONType(%q) = %q, %v; want %q, success %v", native, typ, err, wantType, wantOK)
			}
		}
	})
}

// canonicalString returns the value of the raw JSON string.
func canonicalString(t testing.TB, raw string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatalf("canonicalString(%s) = %v", raw, err)
	}
	return s
}
