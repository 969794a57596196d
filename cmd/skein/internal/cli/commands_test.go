package cli_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	adapterrunner "skein.dev/services/adapter-runner"
)

// withAnnouncer adds the agent "announcer": the test agent with --commands,
// which announces its commands right after session/new, as
// claude-code-acp does.
func withAnnouncer(t *testing.T) func(*envOptions) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(o *envOptions) {
		o.stack = append(o.stack, stacktest.WithAgents(adapterrunner.Agent{ID: "announcer", Command: exe, Args: []string{stacktest.AgentArg, "--commands"}}))
	}
}

// skein commands prints what the agent announced, with no turn run, and
// goes on printing it once the adapter is unloaded, without restoring it;
// skein list shows the usage the agent reported.
func TestCommandsAndUsage(t *testing.T) {
	e := newEnv(t, withAnnouncer(t))
	e.open("s1", "announcer")
	const first = "/say\tReply with the given text\ttext\n"
	var out string
	testutil.Eventually(t, "the announced commands served", func() bool {
		r := e.run(t.Context(), "", "commands", "-s", "s1")
		out = r.stdout
		return r.err == nil && strings.Count(out, "\n") == 7
	})
	if !strings.HasPrefix(out, first) || !strings.Contains(out, "/stop\tEnd the turn with a stop reason\treason\n") {
		t.Errorf("skein commands printed %q, want the test agent's seven commands, /say first", out)
	}
	r := e.run(t.Context(), "", "commands", "-s", "s1", "--json")
	var reply struct {
		Commands []json.RawMessage `json:"commands"`
	}
	if r.err != nil || json.Unmarshal([]byte(r.stdout), &reply) != nil || len(reply.Commands) != 7 ||
		string(reply.Commands[0]) != `{"name":"say","description":"Reply with the given text","input":{"hint":"text"}}` {
		t.Errorf("skein commands --json = %v, printed %q", r.err, r.stdout)
	}

	// A session whose agent announced nothing prints nothing.
	e.open("s2", "demo")
	if r := e.run(t.Context(), "", "commands", "-s", "s2"); r.err != nil || r.stdout != "" {
		t.Errorf("skein commands of a session without any = %v, printed %q", r.err, r.stdout)
	}

	if r := e.run(t.Context(), "", "prompt", "-s", "s1", "cost 1200 200000 0.42 USD\ncommands review=Review the code\nsay hi"); r.err != nil {
		t.Fatalf("prompt: %v %s", r.err, r.stderr)
	}
	if r := e.run(t.Context(), "", "commands", "-s", "s1"); r.err != nil || r.stdout != "/review\tReview the code\n" {
		t.Errorf("skein commands after the agent's new list = %v, printed %q", r.err, r.stdout)
	}
	// The list is served from the history service's index, which follows
	// the sessions' projections a moment later.
	usage := map[string]string{}
	testutil.Eventually(t, "skein list shows s1's usage", func() bool {
		clear(usage)
		for line := range strings.SplitSeq(strings.TrimSuffix(e.run(t.Context(), "", "list").stdout, "\n"), "\n") {
			// Columns are aligned with two spaces or more; a field has
			// single spaces at most.
			if f := regexp.MustCompile(`\s{2,}`).Split(strings.TrimRight(line, " "), -1); len(f) >= 5 && f[0] != "SESSION" {
				usage[f[0]] = f[4]
			}
		}
		return usage["s1"] != "-" && usage["s1"] != ""
	})
	if usage["s1"] != "1200/200000 0.42 USD" || usage["s2"] != "-" {
		t.Errorf("skein list usage = %q, want s1 1200/200000 0.42 USD and s2 -", usage)
	}

	if r := e.run(t.Context(), "", "unload", "-s", "s1"); r.err != nil {
		t.Fatalf("unload: %v %s", r.err, r.stderr)
	}
	last := e.Last("s1")
	if r := e.run(t.Context(), "", "commands", "-s", "s1"); r.err != nil || r.stdout != "/review\tReview the code\n" {
		t.Errorf("skein commands of the unloaded session = %v, printed %q", r.err, r.stdout)
	}
	if !e.Unloaded("s1") || e.Last("s1") != last {
		t.Errorf("skein commands restored the unloaded session")
	}
	if r := e.run(t.Context(), "", "commands", "-s", "nobody"); r.err == nil || !strings.Contains(r.err.Error(), "session_not_found") {
		t.Errorf("skein commands of an unknown session = %v, want session_not_found", r.err)
	}
}
