// Command skein is the one Skein binary. It runs any set of services against
// a NATS cluster (skein serve -target=...), the whole stack on an embedded
// NATS for development (skein dev), the client commands that talk to a
// gateway (open, prompt, history, events, ...), and skein follow, which
// reads sessions over NATS with the Go client.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/testagent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// run executes the skein command line and returns the exit code.
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
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(devCommand(getenv, stdout, stderr), serveCommand(getenv, stderr), followCommand(getenv, stdout))
	root.AddCommand(decodeCommand(stdin, stdout), logCommand(getenv, stdout))
	root.AddCommand(provisionCommand(getenv, stdout, stderr))
	root.AddCommand(cli.Commands(getenv, stdout, stderr)...)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "skein:", err)
		return 1
	}
	return 0
}
