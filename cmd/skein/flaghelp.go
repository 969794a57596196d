package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// dev, serve and provision parse their own flags with package flag (they
// share the services' flag sets, and every flag also reads SKEIN_<NAME>),
// so cobra never sees them, and package flag's help is "Usage of skein
// dev:" and one dash a flag. goFlagHelp gives them the help of every other
// command: the description, the usage line, then the flags with two
// dashes, on standard output.

// helpArgs are the arguments that ask package flag for help.
var helpArgs = []string{"-h", "-help", "--help", "--h"}

// goFlagHelp makes -h and --help of cmd print its help. flagUsage writes
// package flag's list of cmd's flags to w: the command run with -h.
func goFlagHelp(cmd *cobra.Command, out io.Writer, flagUsage func(w io.Writer)) {
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if !slices.ContainsFunc(args, func(a string) bool { return slices.Contains(helpArgs, a) }) {
			return run(c, args)
		}
		var buf bytes.Buffer
		flagUsage(&buf)
		_, err := fmt.Fprintf(out, "%s\n\nUsage:\n  %s [flags]\n\nFlags:\n%s", strings.TrimSpace(c.Long), c.CommandPath(), twoDashes(buf.String()))
		return err
	}
}

// flagLine is a flag's line in package flag's list: two spaces, a dash,
// the name, and its type.
var flagLine = regexp.MustCompile(`^  -([^\s-][^\s]*)(.*)$`)

// twoDashes rewrites package flag's list of flags (flag.PrintDefaults) in
// the form cobra prints: "--name type", the usage indented under it. The
// "Usage of ...:" header goes.
func twoDashes(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "Usage of "):
		case flagLine.MatchString(line):
			b.WriteString(flagLine.ReplaceAllString(line, "  --$1$2") + "\n")
		default:
			b.WriteString("        " + strings.TrimLeft(line, " \t") + "\n")
		}
	}
	return b.String()
}

// withGoFlagHelp applies goFlagHelp to dev, serve, provision, provision
// runner and runner.
func withGoFlagHelp(ctx context.Context, root *cobra.Command, getenv func(string) string, stdout io.Writer) {
	usage := map[string]func(w io.Writer){
		"dev":              func(w io.Writer) { _ = runDev(ctx, []string{"-h"}, getenv, "", io.Discard, w) },
		"serve":            func(w io.Writer) { _ = runServe(ctx, []string{"-h"}, getenv, io.Discard, w) },
		"provision":        func(w io.Writer) { _ = runProvision(ctx, []string{"-h"}, getenv, io.Discard, w) },
		"provision runner": func(w io.Writer) { _ = runProvisionRunner(ctx, []string{"-h"}, getenv, io.Discard, w) },
		"runner":           func(w io.Writer) { _ = runRunner(ctx, []string{"-h"}, getenv, io.Discard, w) },
	}
	var apply func(cmds []*cobra.Command)
	apply = func(cmds []*cobra.Command) {
		for _, cmd := range cmds {
			if u, ok := usage[strings.TrimPrefix(cmd.CommandPath(), root.Name()+" ")]; ok {
				goFlagHelp(cmd, stdout, u)
			}
			apply(cmd.Commands())
		}
	}
	apply(root.Commands())
}
