package test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/gateway"
)

// TestWhoDidWhat checks issue 32 §2 through the API, with two people's
// tokens on one namespace: who opened the session (createdBy), who sent
// the prompt, who answered the permission and the input request (the
// history entries' "principal"), whose answer won when both answered
// (resolvedBy), and who cancelled (the turn's end in the log). The
// agent's own events name no one.
func TestWhoDidWhat(t *testing.T) {
	ns := natstest.Run(t)
	st := startStackTB(t, ns, testutil.TempDir(t), func(c *stackConfig) {
		for _, p := range []string{"alice", "bob"} {
			c.Gateway.Auth.Tokens = append(c.Gateway.Auth.Tokens, gateway.Token{SHA256: gateway.HashToken(p + "-token"),
				Principal: p, Namespaces: []string{string(events.DefaultNamespace)}, Role: gateway.RoleUser})
		}
	})
	alice, bob := "alice-token", "bob-token"
	base := st.url + "/v1/sessions/who"
	call(t, http.MethodPut, base, alice, `{"agent":"test","permissionPolicy":"ask"}`)
	var info struct {
		CreatedBy string `json:"createdBy"`
		State     struct {
			Requests []struct {
				RequestID string `json:"requestId"`
			} `json:"requests"`
			Inputs []struct {
				RequestID string `json:"requestId"`
			} `json:"inputs"`
		} `json:"state"`
	}
	if err := json.Unmarshal(call(t, http.MethodGet, base, bob, ""), &info); err != nil || info.CreatedBy != "alice" {
		t.Fatalf("GET of the session: createdBy %q (%v), want alice", info.CreatedBy, err)
	}

	script := strings.Join([]string{
		"permission call_1 allow_once=allow,reject_once=reject",
		`elicit "Which branch?" {"type":"object","properties":{"branch":{"type":"string"}},"required":["branch"]}`,
		"say done",
	}, "\n")
	done := make(chan []byte, 1)
	go func() {
		_, b := doAs(t, http.MethodPost, base+"/prompt", alice, promptBody(script))
		done <- b
	}()
	pending := func(what string, n func() int) {
		t.Helper()
		if err := testutil.Poll(t.Context(), what, func() (bool, error) {
			info.State.Requests, info.State.Inputs = nil, nil
			err := json.Unmarshal(call(t, http.MethodGet, base, bob, ""), &info)
			return err == nil && n() > 0, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	pending("the permission request", func() int { return len(info.State.Requests) })
	perm := info.State.Requests[0].RequestID
	if b := call(t, http.MethodPost, base+"/permissions/"+perm, bob, `{"optionId":"allow"}`); !strings.Contains(string(b), `"accepted"`) {
		t.Fatalf("bob's answer: %s", b)
	}
	late := call(t, http.MethodPost, base+"/permissions/"+perm, alice, `{"optionId":"reject"}`)
	var lateAnswer struct{ Status, Reason, ResolvedBy string }
	if err := json.Unmarshal(late, &lateAnswer); err != nil || lateAnswer.Reason != events.ReasonAlreadyResolved || lateAnswer.ResolvedBy != "bob" {
		t.Errorf("alice's late answer: %s, want already_resolved by bob", late)
	}
	pending("the input request", func() int { return len(info.State.Inputs) })
	in := info.State.Inputs[0].RequestID
	call(t, http.MethodPost, base+"/inputs/"+in, bob, `{"action":"accept","content":{"branch":"main"}}`)
	late = call(t, http.MethodPost, base+"/inputs/"+in, alice, `{"action":"decline"}`)
	if err := json.Unmarshal(late, &lateAnswer); err != nil || lateAnswer.ResolvedBy != "bob" {
		t.Errorf("alice's late input answer: %s, want already_resolved by bob", late)
	}
	select {
	case b := <-done:
		if !strings.Contains(string(b), `"end_turn"`) {
			t.Fatalf("the prompt answered %s", b)
		}
	case <-time.After(testutil.PollTimeout):
		t.Fatal("the prompt never answered")
	}

	var page struct {
		Events []struct {
			Type      string `json:"type"`
			Principal string `json:"principal"`
			Status    string `json:"status"`
		} `json:"events"`
	}
	if err := json.Unmarshal(call(t, http.MethodGet, base+"/history?limit=100", alice, ""), &page); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Events {
		got = append(got, e.Type+":"+e.Principal)
	}
	want := "user_message_chunk:alice permission_request: permission_response:bob input_request: input_response:bob agent_message_chunk:"
	if strings.Join(got, " ") != want {
		t.Errorf("history's principals\n got %s\nwant %s", strings.Join(got, " "), want)
	}

	// bob cancels alice's next turn: its end in the log names him.
	go func() {
		_, b := doAs(t, http.MethodPost, base+"/prompt", alice, promptBody("tick 200 100ms"))
		done <- b
	}()
	if err := testutil.Poll(t.Context(), "the second turn running", func() (bool, error) {
		var s struct {
			State struct{ Status string } `json:"state"`
		}
		err := json.Unmarshal(call(t, http.MethodGet, base, bob, ""), &s)
		return err == nil && s.State.Status == string(events.StatusRunning), err
	}); err != nil {
		t.Fatal(err)
	}
	call(t, http.MethodPost, base+"/cancel", bob, `{}`)
	<-done
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	last, err := eventlog.Last(t.Context(), js, events.StreamLog, events.LogSubject(events.DefaultNamespace, "who", events.LogControl))
	if err != nil || last == nil {
		t.Fatalf("the log's last control record: %v, %v", last, err)
	}
	f, err := events.Decode[events.TurnFinished](last.Data)
	if err != nil || f.Outcome != events.OutcomeCancelled || last.Header.Get(events.HeaderPrincipal) != "bob" {
		t.Errorf("the cancelled turn's end: %+v (%v), principal %q; want cancelled by bob", f, err, last.Header.Get(events.HeaderPrincipal))
	}
}
