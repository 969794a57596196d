package session_test

import (
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

// With session.ask-timeout, a permission and an input request nobody
// answers are answered by Skein with the safe answer, the reject option
// and a decline, recorded with reason ask_timeout and principal skein
// (issue 32 §5); the turn goes on and completes, and a person's answer
// after that is already_resolved, naming skein.
func TestAskTimeout(t *testing.T) {
	h := startRig(t, session.Config{AskTimeout: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond})
	ctx := t.Context()
	if err := h.open(t, "away", events.AcpOpenSessionRequest{PermissionPolicy: new(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	acc, err := h.accept(ctx, "away", "", strings.Join([]string{
		"permission call_1 allow_once=allow,reject_once=reject",
		`elicit "Which branch?" {"type":"object","properties":{"branch":{"type":"string"}},"required":["branch"]}`,
		"say done",
	}, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := (&ioScript{h: h, sid: "away", acc: acc}).await(t)
	if f.Outcome != events.OutcomeCompleted {
		t.Fatalf("the turn ended %s (%v), want completed", f.Outcome, f.Error)
	}
	sid := "away"
	page, err := rpc.Call[events.AcpHistoryPageResponse](ctx, h.nc, events.APISubject("default", events.OpReadHistory),
		&events.AcpReadHistoryRequest{SessionID: &sid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var perm, in string
	var got []string
	for _, e := range page.Events {
		switch v := e.Event.V.(type) {
		case *events.AcpDurablePermissionRequest:
			perm = v.RequestID
		case *events.InputRequest:
			in = v.RequestID
		case *events.AcpDurablePermissionResponse:
			got = append(got, "permission "+v.Status+" "+deref(v.Reason)+" "+e.Principal+" "+string(v.Response))
		case *events.InputResponse:
			got = append(got, "input "+v.Status+" "+deref(v.Reason)+" "+e.Principal+" "+string(v.Response))
		}
	}
	want := []string{
		`permission accepted ask_timeout skein {"outcome":{"outcome":"selected","optionId":"reject"}}`,
		`input accepted ask_timeout skein {"action":"decline"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the answers recorded\n got %s\nwant %s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r, err := h.respondPermission(ctx, "away", perm, "allow"); err != nil || r.ResolvedBy == nil || *r.ResolvedBy != session.PrincipalSkein {
		t.Errorf("a person's answer after Skein's: %+v, %v; want already_resolved by skein", r, err)
	}
	if in == "" {
		t.Error("no input request in the history")
	}
	for _, kind := range []string{"permission", "input"} {
		if n := testutil.Metric(t, h.reg, "acp_session_asks_expired_total", "kind", kind); n != 1 {
			t.Errorf("%s requests answered by Skein: %v, want 1", kind, n)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
