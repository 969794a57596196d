package events_test

import (
	"testing"

	"skein.dev/pkg/events"
)

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
