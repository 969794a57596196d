package session_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// The security suite's attacks on workspaces ("a tenant's files are its own") and
// env: each open below is what a caller of namespace team-a tried, and
// each must be refused invalid_request. Every test runs twice: with the
// session service knowing the workspace roots, which refuses at open
// before anything is recorded, and without, where the runner's check at
// launch is what refuses.

// openAs opens sid in namespace ns, as a caller holding a token of ns
// does through the gateway.
func (c *confined) openAs(t *testing.T, ns events.Namespace, sid string, req events.AcpOpenSessionRequest) error {
	t.Helper()
	req.SessionID = &sid
	if req.Agent == "" {
		req.Agent = "test"
	}
	_, err := rpc.Call[events.AcpOpenSessionResponse](t.Context(), c.nc, events.APISubject(ns, events.OpOpenSession), &req, nil)
	return err
}

// eachCheck runs f with the open-time check and then with the launch-time
// check alone.
func eachCheck(t *testing.T, f func(t *testing.T, c *confined, atOpen bool)) {
	for _, atOpen := range []bool{true, false} {
		name := "at-launch"
		if atOpen {
			name = "at-open"
		}
		t.Run(name, func(t *testing.T) { f(t, startConfined(t, atOpen), atOpen) })
	}
}

// refused checks that each open of team-a is refused invalid_request and,
// when the session service checks at open, that it wrote nothing.
func (c *confined) refused(t *testing.T, atOpen bool, opens map[string]events.AcpOpenSessionRequest) {
	t.Helper()
	for name, req := range opens {
		var before map[string]uint64
		if atOpen {
			before = c.streamsState(t.Context(), t)
		}
		if err := c.openAs(t, "team-a", name, req); code(err) != events.CodeInvalidRequest {
			t.Errorf("%s: open = %v, want %s", name, err, events.CodeInvalidRequest)
		}
		if atOpen {
			if after := c.streamsState(t.Context(), t); !equalState(before, after) {
				t.Errorf("%s: a refused open wrote: streams before %v, after %v", name, before, after)
			}
		}
	}
}

// The hole: team-a opened a session working in team-b's session's
// directory, and its agent wrote there. Another namespace's directory,
// existing or not, its own namespace directory, and one named only as an
// additional directory are all refused; team-a's own directory is not.
func TestSecurityCwdInAnotherNamespace(t *testing.T) {
	eachCheck(t, func(t *testing.T, c *confined, atOpen bool) {
		if err := c.openAs(t, "team-b", "victim", events.AcpOpenSessionRequest{}); err != nil {
			t.Fatalf("team-b opens victim: %v", err)
		}
		victim := filepath.Join(c.root, "team-b", "victim")
		if fi, err := os.Stat(victim); err != nil || !fi.IsDir() {
			t.Fatalf("team-b's victim works in %s: %v", victim, err)
		}
		own := filepath.Join(c.root, "team-a", "proj")
		c.refused(t, atOpen, map[string]events.AcpOpenSessionRequest{
			"victim-dir":        {Cwd: &victim},
			"victim-dir-to-be":  {Cwd: new(filepath.Join(c.root, "team-b", "not-yet"))},
			"team-b-itself":     {Cwd: new(filepath.Join(c.root, "team-b"))},
			"victim-as-extra":   {Cwd: &own, AdditionalDirectories: events.JSON(`[` + quote(own) + `,` + quote(victim) + `]`)},
			"prefix-of-team-a":  {Cwd: new(filepath.Join(c.root, "team-a-other"))},
			"default-namespace": {Cwd: new(filepath.Join(c.home, "proj"))},
		})
		entries, err := os.ReadDir(victim)
		if err != nil || len(entries) != 0 {
			t.Errorf("team-b's victim directory holds %v (%v), want nothing", entries, err)
		}
		if err := c.openAs(t, "team-a", "mine", events.AcpOpenSessionRequest{Cwd: &own,
			AdditionalDirectories: events.JSON(`[` + quote(filepath.Join(c.root, "team-a")) + `]`)}); err != nil {
			t.Errorf("team-a opens in its own directory: %v", err)
		}
	})
}

// The root holds every namespace's directory: working in it is working
// in all of them.
func TestSecurityCwdIsTheRoot(t *testing.T) {
	eachCheck(t, func(t *testing.T, c *confined, atOpen bool) {
		c.refused(t, atOpen, map[string]events.AcpOpenSessionRequest{
			"root":            {Cwd: &c.root},
			"root-slash":      {Cwd: new(c.root + "/")},
			"root-dot":        {Cwd: new(c.root + "/.")},
			"root-as-extra":   {Cwd: new(filepath.Join(c.root, "team-a")), AdditionalDirectories: events.JSON(`[` + quote(c.root) + `]`)},
			"root-parent":     {Cwd: new(filepath.Dir(c.root))},
			"root-via-dotdot": {Cwd: new(filepath.Join(c.root, "team-a") + "/..")},
		})
	})
}

// A symlink in team-a's own directory pointing into team-b, or at the
// root, is followed by the check: where it leads is what counts.
func TestSecuritySymlinkIntoAnotherNamespace(t *testing.T) {
	eachCheck(t, func(t *testing.T, c *confined, atOpen bool) {
		a, b := filepath.Join(c.root, "team-a"), filepath.Join(c.root, "team-b")
		mkdirs(t, filepath.Join(b, "victim"), a)
		for link, target := range map[string]string{
			"to-b":        b,
			"to-victim":   filepath.Join(b, "victim"),
			"to-b-rel":    "../team-b",
			"to-root":     c.root,
			"to-b-absent": filepath.Join(b, "absent"),
		} {
			if err := os.Symlink(target, filepath.Join(a, link)); err != nil {
				t.Fatal(err)
			}
		}
		c.refused(t, atOpen, map[string]events.AcpOpenSessionRequest{
			"link-to-b":           {Cwd: new(a + "/to-b")},
			"below-link-to-b":     {Cwd: new(a + "/to-b/victim")},
			"to-be-below-link":    {Cwd: new(a + "/to-b/new")},
			"link-to-victim":      {Cwd: new(a + "/to-victim")},
			"relative-link":       {Cwd: new(a + "/to-b-rel/victim")},
			"link-to-root":        {Cwd: new(a + "/to-root")},
			"dangling-link-to-b":  {Cwd: new(a + "/to-b-absent")},
			"link-as-extra":       {Cwd: &a, AdditionalDirectories: events.JSON(`[` + quote(a+"/to-victim") + `]`)},
			"link-to-root-team-b": {Cwd: new(a + "/to-root/team-b/victim")},
		})
	})
}

// A refusal says nothing about what exists outside the caller's own
// namespace: the same path reads the same whether it is missing, a
// directory or a file, whether a symlink to it dangles or not, and no
// message names a configured root or where a symlink leads.
func TestSecurityRefusalSaysNothing(t *testing.T) {
	eachCheck(t, func(t *testing.T, c *confined, _ bool) {
		a, b := filepath.Join(c.root, "team-a"), filepath.Join(c.root, "team-b")
		mkdirs(t, a, b)
		if err := os.Symlink(filepath.Join(b, "x"), filepath.Join(a, "peek")); err != nil {
			t.Fatal(err)
		}
		// Each open is of a new session: refused at launch, an open may
		// have been recorded, and a second with other options would be a
		// conflict.
		n := 0
		refusal := func(name string, req events.AcpOpenSessionRequest) string {
			t.Helper()
			n++
			err := c.openAs(t, "team-a", fmt.Sprintf("%s-%d", name, n), req)
			if code(err) != events.CodeInvalidRequest {
				t.Fatalf("%s: open = %v, want %s", name, err, events.CodeInvalidRequest)
			}
			return events.AsError(err).Message
		}
		// Each state of team-b's x: missing, a directory, a file.
		states := []func(){
			func() {},
			func() { mkdirs(t, filepath.Join(b, "x")) },
			func() {
				if err := os.Remove(filepath.Join(b, "x")); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(b, "x"), []byte("secret"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
		}
		paths := map[string]string{
			"direct":       filepath.Join(b, "x"),
			"below":        filepath.Join(b, "x", "y"),
			"through-link": filepath.Join(a, "peek"),
			"below-link":   filepath.Join(a, "peek", "y"),
		}
		first := map[string]string{}
		for i, state := range states {
			state()
			for name, p := range paths {
				msg := refusal(name, events.AcpOpenSessionRequest{Cwd: &p})
				if i == 0 {
					first[name] = msg
				} else if msg != first[name] {
					t.Errorf("%s: with team-b's x in state %d the refusal reads %q; with it missing, %q", name, i, msg, first[name])
				}
				extra := refusal(name, events.AcpOpenSessionRequest{Cwd: &a, AdditionalDirectories: events.JSON(`[` + quote(p) + `]`)})
				for _, m := range []string{msg, extra} {
					if name == "through-link" || name == "below-link" {
						if strings.Contains(m, "team-b") {
							t.Errorf("%s: refusal %q says where the symlink leads", name, m)
						}
					}
					for _, leak := range []string{"not a directory", "no such", "points nowhere", "symlink", "exist"} {
						if strings.Contains(strings.ToLower(m), leak) {
							t.Errorf("%s: refusal %q says %q", name, m, leak)
						}
					}
				}
			}
		}
		// A path nowhere near the roots names none of them.
		for _, p := range []string{c.out, "/etc", filepath.Join(c.out, "absent")} {
			if msg := refusal("outside", events.AcpOpenSessionRequest{Cwd: &p}); strings.Contains(msg, c.root) {
				t.Errorf("refusal of %s %q names the workspace root", p, msg)
			}
		}
	})
}

// An env value holding a NUL was recorded, and then every launch of the
// adapter failed for good; names with "=", empty, or holding a NUL were
// accepted. Each is refused at open, even by an agent that lets a session
// set any variable, and the value is never echoed.
func TestSecurityEnvNULAndBadNames(t *testing.T) {
	c := startConfined(t, true)
	const secret = "nul-value-5be0"
	c.refused(t, true, map[string]events.AcpOpenSessionRequest{
		"nul-in-value":   {Agent: "any", Env: events.JSON(`{"OK":"1","TOKEN":"` + secret + `\u0000tail"}`)},
		"nul-in-allowed": {Agent: "test", Env: events.JSON(`{"ALLOWED_A":"` + secret + `\u0000"}`)},
		"equals-in-name": {Agent: "any", Env: events.JSON(`{"A=B":"` + secret + `"}`)},
		"equals-allowed": {Agent: "test", Env: events.JSON(`{"ALLOWED_A=B":"` + secret + `"}`)},
		"empty-name":     {Agent: "any", Env: events.JSON(`{"":"` + secret + `"}`)},
		"nul-in-name":    {Agent: "any", Env: events.JSON(`{"A\u0000B":"` + secret + `"}`)},
	})
	err := c.openAs(t, "team-a", "echo", events.AcpOpenSessionRequest{Agent: "any", Env: events.JSON(`{"TOKEN":"` + secret + `\u0000"}`)})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("refusal %v: want one without the value", err)
	}
	if err := c.openAs(t, "team-a", "fine", events.AcpOpenSessionRequest{Agent: "any", Env: events.JSON(`{"A_B":"x=y z"}`)}); err != nil {
		t.Errorf("open with a plain variable: %v", err)
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}
