package eventjson_test

import (
	"encoding/json"
	"errors"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

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
			typ, err := eventjson.Type(native)
			if (err == nil) != wantOK || typ != wantType {
				t.Fatalf("Type(%q) = %q, %v; want %q, success %v", native, typ, err, wantType, wantOK)
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

var errInvalidPayload = &events.Error{Code: events.CodeInvalidPayload}

// checkInvalidPayload fails t unless err is an *events.Error with
// CodeInvalidPayload.
func checkInvalidPayload(t testing.TB, op string, err error) {
	t.Helper()
	if !errors.Is(err, errInvalidPayload) {
		t.Errorf("%s error = %v, want CodeInvalidPayload", op, err)
	}
	if _, ok := err.(*events.Error); !ok {
		t.Errorf("%s error is %T, want *events.Error", op, err)
	}
}
