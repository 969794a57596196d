package cli_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
)

func TestList(t *testing.T) {
	e := newEnv(t)
	for _, sid := range []string{"s1", "s2", "s3"} {
		if r := e.run(t.Context(), "", "open", "-s", sid, "--agent", "demo"); r.err != nil {
			t.Fatalf("open %s: %v %s", sid, r.err, r.stderr)
		}
	}
	// A header, then a row a session in aligned columns (two spaces or
	// more between them): ID, status, what needs you, when it was
	// updated, usage; the title is empty.
	columns := regexp.MustCompile(`\s{2,}`)
	ids := func(out string) []string {
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "SESSION  ") {
			t.Errorf("list printed %q, want a header first", out)
			return nil
		}
		var got []string
		for _, line := range lines[1:] {
			f := columns.Split(strings.TrimRight(line, " "), -1)
			if len(f) != 5 || f[1] != "idle" || f[2] != "-" || (f[3] != "just now" && !strings.HasSuffix(f[3], " ago")) || f[4] != "-" {
				t.Errorf("line %q, want ID, idle, -, a relative time, -", line)
			}
			got = append(got, f[0])
		}
		return got
	}
	testutil.Eventually(t, "three sessions listed", func() bool {
		r := e.run(t.Context(), "", "list")
		return r.err == nil && strings.Count(r.stdout, "\n") == 4
	})
	if r := e.run(t.Context(), "", "list"); strings.Join(ids(r.stdout), ",") != "s3,s2,s1" || r.stderr != "" {
		t.Errorf("list printed %q (stderr %q), want s3, s2, s1 and nothing more", r.stdout, r.stderr)
	}

	// A page at a time: the next page's command is on stderr.
	r := e.run(t.Context(), "", "list", "--limit", "2")
	if got := strings.Join(ids(r.stdout), ","); r.err != nil || got != "s3,s2" || !strings.HasPrefix(r.stderr, "more: skein list --cursor ") {
		t.Fatalf("list --limit 2 = %v, printed %q, stderr %q", r.err, r.stdout, r.stderr)
	}
	cursor := strings.TrimSpace(strings.TrimPrefix(r.stderr, "more: skein list --cursor "))
	cursor = strings.TrimSuffix(cursor, " (or --all)")
	r = e.run(t.Context(), "", "list", "--limit", "2", "--cursor", cursor)
	if got := strings.Join(ids(r.stdout), ","); r.err != nil || got != "s1" || r.stderr != "" {
		t.Errorf("the next page = %v, printed %q, stderr %q; want s1 alone", r.err, r.stdout, r.stderr)
	}
	r = e.run(t.Context(), "", "list", "--limit", "1", "--all")
	if got := strings.Join(ids(r.stdout), ","); r.err != nil || got != "s3,s2,s1" || r.stderr != "" {
		t.Errorf("list --all = %v, printed %q, stderr %q", r.err, r.stdout, r.stderr)
	}

	r = e.run(t.Context(), "", "list", "--json")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.err != nil || len(lines) != 3 {
		t.Fatalf("list --json = %v, printed %q", r.err, r.stdout)
	}
	for i, want := range []string{"s3", "s2", "s1"} {
		var s struct {
			SessionID string          `json:"sessionId"`
			State     json.RawMessage `json:"state"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &s); err != nil || s.SessionID != want || len(s.State) == 0 {
			t.Errorf("line %d = %s, want session %s with its state", i, lines[i], want)
		}
	}

	wantCode(t, e.run(t.Context(), "", "list", "--cursor", "nonsense").err, "invalid_cursor")
	wantCode(t, e.run(t.Context(), "", "list", "--limit", "10001").err, "invalid_request")
	if r := e.run(t.Context(), "", "list", "-s", "s1"); r.err == nil {
		t.Error("list -s succeeded: the command addresses no session")
	}
}
