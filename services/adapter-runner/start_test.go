package adapterrunner_test

import (
	"strings"
	"testing"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// An agent that does not start is reported with what it did: the first
// lines it wrote that are not ACP (at most 5, of at most 200 bytes), and
// the tail of its stderr (at most 2 KiB). One whose command does not
// resolve is not installed.
func TestStartFailuresSayWhatTheAgentDid(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the create timeout; skipped in -short")
	}
	const (
		usage = `echo "Usage: foo [--acp]"; echo "error: no API key" >&2; exit 2`
		noisy = `head -c 5000 /dev/zero | tr '\0' x >&2; echo >&2; echo "last words" >&2; exit 1`
	)
	long := strings.Repeat("y", 300)
	h := startWith(t, adapterrunner.Config{CreateTimeout: 3 * time.Second},
		adapterrunner.Agent{ID: "silent", Command: testAgent, Args: []string{"--silent"}},
		adapterrunner.Agent{ID: "garbage", Command: testAgent, Args: []string{"--silent", "--garbage=7"}},
		adapterrunner.Agent{ID: "usage", Command: "/bin/sh", Args: []string{"-c", usage}},
		adapterrunner.Agent{ID: "noisy", Command: "/bin/sh", Args: []string{"-c", noisy}},
		adapterrunner.Agent{ID: "long", Command: "/bin/sh", Args: []string{"-c", "echo " + long + "; exit 3"}},
		adapterrunner.Agent{ID: "missing", Command: "/nonexistent/agent"},
		adapterrunner.Agent{ID: "unresolved", Command: "no-such-agent-on-path"},
	)
	for _, tc := range []struct {
		agent     string
		code      events.Code
		want, not []string // in the message, and not
	}{
		{"silent", events.CodeTimeout,
			[]string{"agent silent did not answer initialize", "(waited 3s)", `; stderr: "`, "silent: not answering", "method=initialize"},
			[]string{"it wrote"}},
		{"garbage", events.CodeTimeout,
			[]string{`; it wrote: "this is not json: garbage line 1 of 7", "this is not json: garbage line 2 of 7"`, "garbage line 5 of 7", "silent: not answering"},
			[]string{"line 6 of 7"}},
		{"usage", events.CodeAdapterExited,
			[]string{"agent usage exited during initialize", `; it wrote: "Usage: foo [--acp]"; stderr: "error: no API key"`}, nil},
		{"noisy", events.CodeAdapterExited,
			[]string{`; stderr: "...xxx`, `xxx\nlast words"`}, []string{"it wrote"}},
		{"long", events.CodeAdapterExited,
			[]string{`; it wrote: "` + long[:200] + `"`}, []string{long[:201]}},
		{"missing", events.CodeAgentNotInstalled, []string{"agent missing is not installed", "/nonexistent/agent"}, nil},
		{"unresolved", events.CodeAgentNotInstalled, []string{"agent unresolved is not installed", "no-such-agent-on-path"}, nil},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			t.Parallel()
			_, err := rpc.Call[events.AcpSessionCreatedResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate),
				&events.AcpCreateSessionRequest{AgentType: tc.agent, McpServers: events.JSON("[]")}, header(tc.agent, "p1"))
			e := events.AsError(err)
			if e == nil || e.Code != tc.code {
				t.Fatalf("create %s = %v, want %s", tc.agent, err, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("create %s = %q, want it to say %q", tc.agent, e.Message, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(e.Message, w) {
					t.Errorf("create %s = %q, want it not to say %q", tc.agent, e.Message, w)
				}
			}
			// 2 KiB of stderr, quoted and labelled.
			if stderr := e.Message[strings.Index(e.Message, "; stderr: ")+1:]; len(stderr) > 2<<10+32 {
				t.Errorf("create %s: the stderr it reports is %d bytes, want about 2 KiB", tc.agent, len(stderr))
			}
		})
	}
}

// A restore whose session/load or session/resume the agent fails with an
// error of its own (not "unknown session") tries it once more, then goes
// down the ladder to a new session, and says why.
func TestRestoreStepsPastAgentErrors(t *testing.T) {
	state := t.TempDir()
	agent := func(id string, args ...string) adapterrunner.Agent {
		return adapterrunner.Agent{ID: id, Command: testAgent, Args: append([]string{"--state-dir", state}, args...)}
	}
	h := startWith(t, adapterrunner.Config{},
		// gemini-cli, which lost its chat file.
		agent("broken", "--load-session", "--fail-load=always"),
		agent("flaky", "--load-session", "--fail-load=1"),
		agent("both", "--resume", "--load-session", "--fail-load=always"),
		agent("resumer", "--resume", "--load-session", "--fail-load=2"),
		agent("neither"))
	for _, tc := range []struct {
		agent, tier, reason string
	}{
		{"broken", events.TierFallback, "session/load: -32603 Internal error, twice"},
		{"flaky", events.TierLoad, "session/load: -32603 Internal error, then it worked on the second try"},
		{"both", events.TierFallback, "session/resume: -32603 Internal error, twice; session/load: -32603 Internal error, twice"},
		// resume used up the failures; load works.
		{"resumer", events.TierLoad, "session/resume: -32603 Internal error, twice"},
		{"neither", events.TierFallback, "the agent offers neither session/resume nor session/load"},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			created := h.create(t, tc.agent, "p1", tc.agent)
			if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
				&events.AcpCloseSessionRequest{}, header(tc.agent, "p1")); err != nil {
				t.Fatal(err)
			}
			ready, err := rpc.Call[events.AdapterReady](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerRestore),
				&events.RestoreRequest{Resume: events.AcpResumeSessionRequest{SessionID: created.SessionID, AgentType: tc.agent, McpServers: events.JSON("[]")}},
				header(tc.agent, "p2"))
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if ready.Tier != tc.tier || ready.Reason != tc.reason {
				t.Errorf("restore = tier %s, reason %q; want %s, %q", ready.Tier, ready.Reason, tc.tier, tc.reason)
			}
			if resumed := ready.Session.SessionID == created.SessionID; resumed != (tc.tier != events.TierFallback) {
				t.Errorf("restore %s gave ACP session %s, created %s", ready.Tier, ready.Session.SessionID, created.SessionID)
			}
		})
	}
}
