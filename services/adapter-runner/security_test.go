package adapterrunner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// The security suite's attacks on workspaces and env, as the runner meets them at
// launch: whatever the session service let through (a session opened
// before it knew the roots, a directory swapped for a symlink since), the
// runner refuses invalid_request, and no adapter starts.

// createAs sends a create request for sid of namespace ns and returns the
// runner's answer.
func (h *harness) createAs(t *testing.T, ns events.Namespace, sid string, req events.AcpCreateSessionRequest) (*events.AcpSessionCreatedResponse, error) {
	t.Helper()
	if req.AgentType == "" {
		req.AgentType = "test"
	}
	req.ProtocolVersion, req.McpServers = 1, events.JSON("[]")
	hdr := nats.Header{
		events.HeaderNamespace: []string{string(ns)},
		events.HeaderSessionID: []string{sid},
		events.HeaderProcessID: []string{"p-" + sid},
	}
	return rpc.Call[events.AcpSessionCreatedResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate), &req, hdr)
}

// refusedAll checks that each create of team-a is refused
// invalid_request, and that no adapter runs after them.
func (h *harness) refusedAll(t *testing.T, reqs map[string]events.AcpCreateSessionRequest) {
	t.Helper()
	load := h.runner.Info().Load
	for name, req := range reqs {
		if _, err := h.createAs(t, "team-a", name, req); err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("%s: create = %v, want %s", name, err, events.CodeInvalidRequest)
		}
	}
	if got := h.runner.Info().Load; got != load {
		t.Errorf("refused creates left the runner hosting %d adapters, want %d", got, load)
	}
}

// Another namespace's directory, existing or not, the root, and the
// root reached by "..": each refused, as cwd and as additional
// directory; team-a's own directory is not.
func TestSecurityLaunchInAnotherNamespace(t *testing.T) {
	h := start(t)
	root := filepath.Join(h.dataDir, "workspaces")
	a, b := filepath.Join(root, "team-a"), filepath.Join(root, "team-b")
	mkdirs(t, filepath.Join(a, "proj"), filepath.Join(b, "victim"))
	h.refusedAll(t, map[string]events.AcpCreateSessionRequest{
		"victim":        {Cwd: b + "/victim"},
		"to-be":         {Cwd: b + "/not-yet"},
		"team-b":        {Cwd: b},
		"root":          {Cwd: root},
		"root-dotdot":   {Cwd: a + "/.."},
		"victim-extra":  {Cwd: a + "/proj", AdditionalDirectories: []string{a, b + "/victim"}},
		"root-extra":    {Cwd: a + "/proj", AdditionalDirectories: []string{root}},
		"a-prefix-name": {Cwd: a + "-other"},
	})
	if _, err := os.Stat(b + "/not-yet"); !os.IsNotExist(err) {
		t.Errorf("a refused cwd in team-b was created: %v", err)
	}
	if _, err := h.createAs(t, "team-a", "mine", events.AcpCreateSessionRequest{Cwd: a + "/proj", AdditionalDirectories: []string{a}}); err != nil {
		t.Errorf("create in team-a's own directory: %v", err)
	}
}

// A directory of team-a that passed at open and is, by launch, a symlink
// into team-b's (or to the root) is refused: the runner resolves the path
// again when it launches.
func TestSecurityLaunchSymlinkSwappedIntoAnotherNamespace(t *testing.T) {
	h := start(t)
	root := filepath.Join(h.dataDir, "workspaces")
	a, b := filepath.Join(root, "team-a"), filepath.Join(root, "team-b")
	mkdirs(t, filepath.Join(a, "real", "sub"), filepath.Join(a, "extra"), filepath.Join(b, "real", "sub"), filepath.Join(b, "extra"))
	if _, err := h.createAs(t, "team-a", "before", events.AcpCreateSessionRequest{Cwd: a + "/real/sub", AdditionalDirectories: []string{a + "/extra"}}); err != nil {
		t.Fatalf("create in team-a's own directory: %v", err)
	}
	for link, target := range map[string]string{"real": b + "/real", "extra": "../team-b/extra"} {
		if err := os.RemoveAll(filepath.Join(a, link)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(a, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(root, filepath.Join(a, "up")); err != nil {
		t.Fatal(err)
	}
	h.refusedAll(t, map[string]events.AcpCreateSessionRequest{
		"swapped-cwd":   {Cwd: a + "/real/sub"},
		"swapped-dir":   {Cwd: a + "/real"},
		"swapped-to-be": {Cwd: a + "/real/new"},
		"swapped-extra": {Cwd: a, AdditionalDirectories: []string{a + "/extra"}},
		"to-root":       {Cwd: a + "/up"},
		"root-to-b":     {Cwd: a + "/up/team-b/real"},
	})
	if _, err := os.Stat(b + "/real/new"); !os.IsNotExist(err) {
		t.Errorf("a refused cwd in team-b was created: %v", err)
	}
}

// A refusal at launch reads the same whether the path exists elsewhere
// or not, and names neither a root nor where a symlink leads; a cwd the
// runner cannot create says so without the file system's reason.
func TestSecurityLaunchRefusalSaysNothing(t *testing.T) {
	h := start(t)
	root := filepath.Join(h.dataDir, "workspaces")
	a, b := filepath.Join(root, "team-a"), filepath.Join(root, "team-b")
	mkdirs(t, a, b)
	if err := os.Symlink(b+"/x", a+"/peek"); err != nil {
		t.Fatal(err)
	}
	n := 0
	refusal := func(req events.AcpCreateSessionRequest) string {
		t.Helper()
		n++
		_, err := h.createAs(t, "team-a", "s"+strings.Repeat("x", n), req)
		if err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
			t.Fatalf("create %+v = %v, want %s", req, err, events.CodeInvalidRequest)
		}
		return events.AsError(err).Message
	}
	paths := []string{b + "/x", b + "/x/y", a + "/peek", a + "/peek/y"}
	var missing []string
	for _, p := range paths {
		missing = append(missing, refusal(events.AcpCreateSessionRequest{Cwd: p}))
	}
	mkdirs(t, b+"/x/y")
	for i, p := range paths {
		msg := refusal(events.AcpCreateSessionRequest{Cwd: p})
		if msg != missing[i] {
			t.Errorf("cwd %s: the refusal reads %q with team-b's x there, %q without", p, msg, missing[i])
		}
		if strings.HasPrefix(p, a) && strings.Contains(msg, "team-b") {
			t.Errorf("cwd %s: refusal %q says where the symlink leads", p, msg)
		}
	}
	out := t.TempDir()
	if msg := refusal(events.AcpCreateSessionRequest{Cwd: out}); strings.Contains(msg, root) {
		t.Errorf("refusal %q names the workspace root", msg)
	}
	if err := os.WriteFile(a+"/file", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := refusal(events.AcpCreateSessionRequest{Cwd: a + "/file/sub"}); strings.Contains(msg, "not a directory") {
		t.Errorf("refusal %q gives the file system's reason", msg)
	}
}

// An env no process can be given (a NUL in a value or name, "=" in a
// name, an empty name) is refused at launch, even by an agent that lets a
// session set any variable, before any adapter starts.
func TestSecurityLaunchEnvNULAndBadNames(t *testing.T) {
	h := start(t, adapterrunner.Agent{ID: "test", Command: testAgent, AllowEnv: []string{"*"}})
	const secret = "nul-value-77ab"
	h.refusedAll(t, map[string]events.AcpCreateSessionRequest{
		"nul-value": {Env: map[string]string{"OK": "1", "TOKEN": secret + "\x00tail"}},
		"nul-name":  {Env: map[string]string{"A\x00B": secret}},
		"equals":    {Env: map[string]string{"A=B": secret}},
		"empty":     {Env: map[string]string{"": secret}},
	})
	_, err := h.createAs(t, "team-a", "echo", events.AcpCreateSessionRequest{Env: map[string]string{"TOKEN": secret + "\x00"}})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("refusal %v: want one without the value", err)
	}
}

// A namespace named after the default root's directory, "workspaces",
// would have its sessions' HOMEs made among the other namespaces'
// workspaces: its session "default" would get, as HOME, the workspace of
// namespace default's session "home". It is refused, and nothing is made
// there; namespace default's session "home" still starts.
func TestSecurityNamespaceNamedAfterTheRoot(t *testing.T) {
	h := start(t)
	victim := filepath.Join(h.dataDir, "workspaces", "default", "home")
	if _, err := h.createAs(t, "workspaces", "default", events.AcpCreateSessionRequest{}); err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
		t.Fatalf("create workspaces/default = %v, want %s", err, events.CodeInvalidRequest)
	}
	if _, err := os.Stat(victim); err == nil {
		t.Errorf("the refused session made %s, namespace default's session home's workspace", victim)
	}
	if _, err := h.createAs(t, "default", "home", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatalf("create default/home = %v", err)
	}
}
