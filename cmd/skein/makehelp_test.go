package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// make help lists every target with its description in one column, however
// long the longest target's name, and shows no unexpanded make variable.
func TestMakeHelpIsAligned(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	out, err := exec.CommandContext(t.Context(), "make", "-s", "-C", "../..", "help").CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	line := regexp.MustCompile(`^  ([a-z-]+) +(\S.*)$`)
	column, targets := -1, 0
	for l := range strings.Lines(strings.TrimRight(string(out), "\n")) {
		l = strings.TrimSuffix(l, "\n")
		m := line.FindStringSubmatchIndex(l)
		if m == nil {
			t.Errorf("make help line %q is not a target and its description", l)
			continue
		}
		targets++
		if column == -1 {
			column = m[4]
		}
		if m[4] != column {
			t.Errorf("make help: %q's description starts at column %d, the first's at %d", l[m[2]:m[3]], m[4], column)
		}
		if strings.Contains(l, "$(") {
			t.Errorf("make help line %q shows a make variable unexpanded", l)
		}
	}
	if targets < 10 {
		t.Errorf("make help listed %d targets:\n%s", targets, out)
	}
}
