package main

import (
	"strings"
	"testing"

	"skein.dev/internal/testutil"
)

// TestGoFlagHelp: dev, serve, provision, provision runner and runner print their help as the other
// commands do: the description, the usage line, and every flag with two
// dashes, on standard output; none of them starts.
func TestGoFlagHelp(t *testing.T) {
	for _, tt := range []struct{ cmd, flag string }{{"dev", "--data string"}, {"serve", "--target string"}, {"provision", "--dry-run"},
		{"provision runner", "--revoke"}, {"runner", "--join string"}} {
		for _, help := range []string{"-h", "--help"} {
			var stdout, stderr testutil.Buffer
			code := run(t.Context(), append(strings.Fields(tt.cmd), help), func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
			out := stdout.String()
			if code != 0 || !strings.Contains(out, "\n\nUsage:\n  skein "+tt.cmd+" [flags]\n\nFlags:\n") || !strings.Contains(out, "\n  "+tt.flag) {
				t.Errorf("skein %s %s = exit %d, printed\n%s\nwant the usage and %q", tt.cmd, help, code, out, tt.flag)
			}
			for line := range strings.SplitSeq(out, "\n") {
				if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
					t.Errorf("skein %s %s: flag line %q has one dash", tt.cmd, help, line)
				}
			}
		}
	}
}
