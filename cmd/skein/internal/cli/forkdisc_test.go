package cli_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

func TestDiscard(t *testing.T) {
	e := newEnv(t)
	e.open("eager", "plain")
	if r := e.run(t.Context(), "", "discard", "-s", "eager"); r.err != nil || r.stdout != "discarded\n" {
		t.Fatalf("discard = %v, printed %q", r.err, r.stdout)
	}
	if e.Exists("eager") {
		t.Error("the discarded session still exists")
	}
	e.open("used", "plain")
	e.Say("used", "hello")
	wantCode(t, e.run(t.Context(), "", "discard", "-s", "used").err, string(events.CodeSessionNotEmpty))
	if !e.Exists("used") {
		t.Error("a refused discard deleted the session")
	}
}

func TestFork(t *testing.T) {
	e := newEnv(t)
	e.open("src", "plain")
	first := e.Say("src", "alpha answer")
	e.Say("src", "beta answer")
	at := first[len(first)-1]
	r := e.run(t.Context(), "", "fork", "-s", "src", "--at", fmt.Sprint(at), "branch")
	if want := fmt.Sprintf("session branch is a fork of src at %d\n", at); r.err != nil || r.stdout != want {
		t.Fatalf("fork = %v, printed %q, want %q", r.err, r.stdout, want)
	}
	r = e.run(t.Context(), "", "prompt", "-s", "branch", "what came before?")
	if r.err != nil || !strings.Contains(r.stdout, "alpha answer") || strings.Contains(r.stdout, "beta answer") {
		t.Errorf("the fork's first prompt = %v, printed %q; want the source's history up to the fork only", r.err, r.stdout)
	}
	if r := e.run(t.Context(), "", "fork", "-s", "src", "newest"); r.err != nil || !strings.Contains(r.stdout, "fork of src at") {
		t.Errorf("fork at the newest = %v, %q", r.err, r.stdout)
	}
	wantCode(t, e.run(t.Context(), "", "fork", "-s", "nobody", "b2").err, string(events.CodeSessionNotFound))
	wantCode(t, e.run(t.Context(), "", "fork", "-s", "src", "--at", "999999999", "b3").err, string(events.CodeInvalidCursor))
	wantCode(t, e.run(t.Context(), "", "fork", "-s", "src", "branch").err, string(events.CodeSessionConflict))
}

func TestDirs(t *testing.T) {
	e := newEnv(t)
	proj := e.WorkDir("proj")
	home := filepath.Dir(proj)
	r := e.run(t.Context(), "", "dirs")
	if r.err != nil || r.stdout != home+"\n" {
		t.Fatalf("dirs = %v, printed %q, want %q", r.err, r.stdout, home)
	}
	r = e.run(t.Context(), "", "dirs", home)
	if r.err != nil || r.stdout != proj+"\n" {
		t.Errorf("dirs %s = %v, printed %q, want %q", home, r.err, r.stdout, proj)
	}
	r = e.run(t.Context(), "", "dirs", proj)
	if r.err != nil || r.stdout != "parent: "+home+"\n" {
		t.Errorf("dirs %s = %v, printed %q, want only its parent", proj, r.err, r.stdout)
	}
	r = e.run(t.Context(), "", "dirs", "--json", home)
	if r.err != nil || !strings.Contains(r.stdout, `"name":"proj"`) {
		t.Errorf("dirs --json = %v, printed %q", r.err, r.stdout)
	}
	wantCode(t, e.run(t.Context(), "", "dirs", "/etc").err, string(events.CodeInvalidRequest))
}
