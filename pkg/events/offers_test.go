package events_test

import (
	"testing"

	"skein.dev/pkg/events"
)

func TestGetSessionCommandsRequestValidate(t *testing.T) {
	if sid, err := (&events.GetSessionCommandsRequest{}).Validate(); err != nil || sid != events.DefaultSessionID {
		t.Errorf("Validate() without a session = %q, %v; want main", sid, err)
	}
	if _, err := (&events.GetSessionCommandsRequest{SessionID: new("a.b")}).Validate(); events.AsError(err).Code != events.CodeInvalidSessionID {
		t.Errorf("Validate() of a.b = %v, want invalid_session_id", err)
	}
}

// FuzzGetSessionCommandsRequest decodes arbitrary bytes as a commands
// request, as the history service does: never a panic, and a request that
// validates names a valid session.
func FuzzGetSessionCommandsRequest(f *testing.F) {
	for _, r := range []*events.GetSessionCommandsRequest{{}, {SessionID: new("s1")}, {SessionID: new("a.b")}, {SessionID: new("")}} {
		b, err := events.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := events.Decode[events.GetSessionCommandsRequest](data)
		if err != nil {
			return
		}
		if sid, err := req.Validate(); err == nil && !sid.Valid() {
			t.Fatalf("Validate(%+v) = %q", req, sid)
		}
	})
}

// The session's usage and timing survive the codec: a timing of 0 is a
// measurement, not an absence.
func TestSessionInfoOffersRoundTrip(t *testing.T) {
	zero := uint64(0)
	in := &events.AcpGetDurableSessionResponse{Session: events.AcpDurableSessionInfo{
		SessionID: "s1", State: events.JSON(`{"status":"idle"}`),
		Usage:          &events.SessionUsage{Used: 0, Size: 1, Cost: events.JSON(`{"amount":0,"currency":"USD"}`)},
		LastTurnTiming: &events.TurnTiming{DispatchMs: &zero},
	}}
	b, err := events.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := events.Decode[events.AcpGetDurableSessionResponse](b)
	if err != nil {
		t.Fatal(err)
	}
	got := out.Session
	if got.Usage == nil || got.Usage.Size != 1 || string(got.Usage.Cost) != `{"amount":0,"currency":"USD"}` ||
		got.LastTurnTiming == nil || got.LastTurnTiming.DispatchMs == nil || *got.LastTurnTiming.DispatchMs != 0 ||
		got.LastTurnTiming.FirstReplyMs != nil || got.LastTurnTiming.FinishedMs != nil {
		t.Errorf("round trip = %+v, usage %+v, timing %+v", got, got.Usage, got.LastTurnTiming)
	}
}
