package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

var inputIDRE = regexp.MustCompile(`skein answer (\S+) accept`)

// TestAnswer: skein prompt shows an agent's input request with the command
// that answers it, and skein answer answers it once, its content checked
// against the agent's schema.
func TestAnswer(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "demo", "--input-policy", "ask")
	var stdout, stderr testutil.Buffer
	done := make(chan result, 1)
	go func() {
		err := executeWith(t.Context(), map[string]string{cli.EnvServer: e.url}, strings.NewReader(""), &stdout, &stderr,
			"prompt", "-s", "s1", `elicit "Your name?" {"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`+"\nsay after")
		done <- result{stdout: stdout.String(), stderr: stderr.String(), err: err}
	}()
	var id string
	testutil.Eventually(t, "the input request", func() bool {
		if m := inputIDRE.FindStringSubmatch(stdout.String()); m != nil {
			id = m[1]
		}
		return id != ""
	})
	if !strings.Contains(stdout.String(), "[input] Your name? (request "+id+")") {
		t.Errorf("prompt printed\n%s\nwant the agent's question", stdout.String())
	}
	if r := e.run(t.Context(), "", "answer", "-s", "s1", id, "decline", `{"name":"n"}`); r.err == nil {
		t.Errorf("answer decline with content = %q, want an error", r.stdout)
	}
	wantCode(t, e.run(t.Context(), "", "answer", "-s", "s1", id, "accept", `{"name":1}`).err, "invalid_request")
	if r := e.run(t.Context(), "", "answer", "-s", "s1", id, "accept", `{"name":"skein"}`); r.err != nil || r.stdout != "accepted\n" {
		t.Fatalf("answer = %v, printed %q", r.err, r.stdout)
	}
	if r := e.run(t.Context(), "", "answer", "-s", "s1", id, "cancel"); r.err != nil || r.stdout != "not pending: already_resolved\n" {
		t.Errorf("a second answer = %v, printed %q", r.err, r.stdout)
	}
	r := <-done
	if r.err != nil || !strings.Contains(r.stdout, "[input] request "+id+": accepted (accept)") || !strings.HasSuffix(r.stdout, `input: accept {"name":"skein"}`+"\nafter\n") {
		t.Errorf("prompt = %v, printed\n%s", r.err, r.stdout)
	}
	open, _ := e.LastRequest(events.OpOpenSession).(*events.AcpOpenSessionRequest)
	if open == nil || open.InputPolicy == nil || *open.InputPolicy != events.InputPolicyAsk {
		t.Errorf("open request = %+v, want inputPolicy ask", open)
	}
}
