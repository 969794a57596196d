package test

import (
	"testing"

	"skein.dev/pkg/events"
)

// The Go client reads what the agent offers and what it costs: the
// commands it announced, its usage and the last turn's timing, over NATS
// from the whole stack.
func TestGoClientOffers(t *testing.T) {
	cl := goClientOn(t, t.TempDir())
	ctx := t.Context()
	if err := cl.Open(ctx, "o1", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Commands(ctx, "o1"); err != nil || string(got) != "[]" {
		t.Fatalf("Commands of a new session = %s, %v; want []", got, err)
	}
	if _, err := cl.PromptText(ctx, "o1", "commands plan=Plan the work\ncost 7 100 1.5 EUR\nsay ok"); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Commands(ctx, "o1"); err != nil || string(got) != `[{"name":"plan","description":"Plan the work","input":null}]` {
		t.Errorf("Commands = %s, %v", got, err)
	}
	info, err := cl.Session(ctx, "o1")
	if err != nil {
		t.Fatal(err)
	}
	if u := info.Usage; u == nil || u.Used != 7 || u.Size != 100 || string(u.Cost) != `{"amount":1.5,"currency":"EUR"}` {
		t.Errorf("Session usage = %+v, want 7/100 at 1.5 EUR", u)
	}
	if tm := info.LastTurnTiming; tm == nil || tm.DispatchMs == nil || tm.FirstReplyMs == nil || tm.FinishedMs == nil {
		t.Errorf("Session lastTurnTiming = %+v, want dispatch, first reply and finish", tm)
	}
	if _, err := cl.Commands(ctx, "nobody"); code(err) != events.CodeSessionNotFound {
		t.Errorf("Commands of an unknown session = %v, want session_not_found", err)
	}
}

func code(err error) events.Code {
	if err == nil {
		return ""
	}
	return events.AsError(err).Code
}
