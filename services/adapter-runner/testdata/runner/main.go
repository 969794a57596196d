// Command runner runs one adapter-runner as a process of its own, for the
// tests that kill it (lifecycle_test.go):
//
//	runner -nats URL [-adapter-runner.* flags]
//
// It logs to stderr, and stops on SIGINT or SIGTERM as skein does.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	adapterrunner "skein.dev/services/adapter-runner"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "runner:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	url := fs.String("nats", "", "NATS server URL")
	var cfg adapterrunner.Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(*url)
	if err != nil {
		return err
	}
	defer nc.Close()
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := adapterrunner.New(cfg, lg, nc, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
