// Command skein-testagent is a deterministic, scriptable ACP agent for tests
// and the Skein dev stack. See package skein.dev/testagent and its README.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"skein.dev/testagent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := testagent.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
