package cli_test

import (
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

func TestRename(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "plain")
	r := e.run(t.Context(), "", "rename", "-s", "s1", "Fix", "the", " build ")
	if r.err != nil || r.stdout != "session s1 is now \"Fix the  build\"\n" {
		t.Fatalf("rename = %v, printed %q", r.err, r.stdout)
	}
	if info := e.Meta("s1").Info; info.Title == nil || *info.Title != "Fix the  build" {
		t.Errorf("s1 after the rename = %+v, want the title %q", info, "Fix the  build")
	}

	// A title that breaks the rules never leaves the command.
	for _, args := range [][]string{
		{" "},
		{strings.Repeat("é", events.MaxTitleRunes+1)},
		{"bell\a"},
		{"a\nb"},
		{"caf\xc3"},
	} {
		err := e.run(t.Context(), "", append([]string{"rename", "-s", "s1"}, args...)...).err
		if events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("rename %q = %v, want %s", args, err, events.CodeInvalidRequest)
		}
	}
	if n := e.Calls(events.OpRenameSession); n != 1 {
		t.Errorf("the gateway passed on %d renames, want 1", n)
	}
	if err := e.run(t.Context(), "", "rename", "-s", "s1").err; err == nil {
		t.Error("rename without a title succeeded")
	}
	wantCode(t, e.run(t.Context(), "", "rename", "-s", "nobody", "x").err, "session_not_found")
	wantCode(t, e.run(t.Context(), "", "rename", "-s", "bad.id", "x").err, "invalid_session_id")
}
