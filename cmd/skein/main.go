// Command skein is the one Skein binary. It runs any set of services against
// a NATS cluster (skein serve -target=...), the whole stack on an embedded
// NATS for development (skein dev), the client commands that talk to a
// gateway (open, prompt, history, events, ...), and skein follow, which
// reads sessions over NATS with the Go client.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/testagent"
)

func main() {
	// Ctrl-C is routed (cli.Interrupts): a turn being watched takes the
	// first and cancels the turn; otherwise, and the second time, the
	// command's context ends. SIGTERM always ends it.
	intr, ctx := cli.NewInterrupts(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			if s == os.Interrupt {
				intr.Interrupt()
				continue
			}
			intr.Stop()
		}
	}()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// run executes the skein command line and returns the exit code
// (cli.ExitCode; docs/CLI.md lists them).
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	// The test agent is built in: "skein testagent" speaks ACP on stdio, and
	// the adapter-runner starts it for the agent IDs "test" and "demo".
	if len(args) > 0 && args[0] == testAgentCommand {
		return testagent.Main(ctx, args[1:], stdin, stdout, stderr, getenv)
	}
	root := &cobra.Command{
		Use:           "skein",
		Short:         "Durable sessions for ACP coding agents, on NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(devCommand(getenv, stdout, stderr), serveCommand(getenv, stdout, stderr), followCommand(getenv, stdout))
	root.AddCommand(decodeCommand(stdin, stdout), logCommand(getenv, stdout))
	root.AddCommand(provisionCommand(getenv, stdout, stderr), runnerCommand(getenv, stdout, stderr))
	root.AddCommand(cli.Commands(getenv, stdout, stderr)...)
	withGoFlagHelp(ctx, root, getenv, stdout)
	cli.MarkUsage(root)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return cli.ExitOK
	}
	// Cobra's own refusals of a command line that names no command or an
	// unknown one come as plain errors.
	if msg := err.Error(); strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") {
		err = &cli.UsageError{Err: err}
	}
	if !cli.Reported(err) {
		// An error may quote what an agent or a tenant wrote.
		fmt.Fprintln(stderr, "skein:", cli.Visible(err.Error()))
	}
	if _, ok := errors.AsType[*cli.UsageError](err); ok && cmd != nil {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return cli.ExitCode(err)
}
