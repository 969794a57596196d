package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
)

// provisionCommand is `skein provision`: create or update every stream and
// bucket Skein uses, with the rights to do so, so that the services can
// start with none (streams.Reconcile).
func provisionCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "provision [--nats URL] [--replicas N] [--dry-run]",
		Short: "Create or update Skein's streams and buckets on a NATS cluster",
		Long: `Create every stream and KV bucket Skein uses that is missing, and bring the
existing ones to their intended configuration where the server can change it
in place (limits, max age, description, ...). A difference it cannot change in
place (storage type, replicas, retention, ...) is reported and then nothing
is changed at all; the exit status is 1. Prints one line per stream (KV
buckets as their streams, KV_<bucket>). Running it again prints unchanged.
Then it waits, for at most two minutes, until every stream serves its
consumers: each replica current, and a consumer placed on each one reads
the stream's last record (right after a restore, a replica still copying
the stream from its leader serves consumers nothing); it prints what it
waits for, and "serving" for each stream. A dry run does not wait.
The same configurations, for a three-server cluster, are ops/nats/*.json
(nats stream add --config FILE).
skein provision runner NAME issues an edge runner's credential (skein
provision runner -h).
Flags take one or two dashes; every flag also reads SKEIN_<NAME>.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runProvision(cmd.Context(), args, getenv, stdout, stderr)
		},
	}
	cmd.AddCommand(provisionRunnerCommand(getenv, stdout, stderr))
	return cmd
}

// errRefused is runProvision's error when a difference was refused (or, in
// a dry run, would be); the lines above it say which.
var errRefused = errors.New("provision refused: nothing was changed")

func runProvision(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		natsURL, credsFile string
		dryRun             bool
		o                  streams.Options
		natsTLS            natsTLSFlags
	)
	fs := flag.NewFlagSet("skein provision", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s), comma separated (env NATS_URL)")
	fs.StringVar(&credsFile, "nats-creds", "", "NATS credentials file")
	natsTLS.register(fs)
	fs.BoolVar(&dryRun, "dry-run", false, "report what would change, change nothing")
	fs.IntVar(&o.Replicas, "replicas", 1, "replicas of the streams and buckets (3 in a cluster)")
	// The session service's names, so one environment serves both.
	fs.Int64Var(&o.MaxEventsPerSession, "session.max-events-per-session", eventlog.DefaultMaxEventsPerSession, "most public events ACP_LOG keeps of a session")
	fs.Int64Var(&o.MaxBytesPerSession, "session.max-bytes-per-session", eventlog.DefaultMaxBytesPerSession, "most bytes of public event payloads ACP_LOG keeps of a session")
	fs.DurationVar(&o.OwnerTTL, "session.owner-ttl", streams.DefaultOwnerTTL, "how long a session's owner lease outlives its last renewal (at least 1s)")
	fs.DurationVar(&o.IOMaxAge, "io-max-age", streams.DefaultIOMaxAge, "how long ACP_IO keeps runner output")
	if v := getenv("NATS_URL"); v != "" {
		natsURL = v
	}
	if err := applyEnv(fs, getenv); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.OwnerTTL < time.Second {
		return fmt.Errorf("session.owner-ttl %v is under the 1s minimum", o.OwnerTTL)
	}
	opts := []nats.Option{nats.Name("skein provision")}
	if credsFile != "" {
		opts = append(opts, nats.UserCredentials(credsFile))
	}
	tlsOpts, err := natsTLS.options()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL, append(opts, tlsOpts...)...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	mode := streams.Update
	if dryRun {
		mode = streams.DryRun
	}
	results, err := streams.Reconcile(ctx, js, o, mode)
	for _, r := range results {
		fmt.Fprintln(stdout, resultLine(r))
	}
	if errors.Is(err, streams.ErrRefused) {
		return errRefused
	}
	if err != nil || dryRun {
		return err
	}
	// Always, not behind a flag: on healthy streams it costs a stream info
	// and a few consumers each, and the time it matters, right after a
	// restore, is when an operator would not think to ask for it.
	return streams.AwaitServing(ctx, js, o, func(stream, status string) {
		fmt.Fprintf(stdout, "%-16s %s\n", stream, status)
	})
}

// resultLine is one stream's line: its name, what happened, and the fields
// that differ (with why, for those refused).
func resultLine(r streams.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s ", r.Stream)
	switch {
	case r.Action == streams.ActionCreate && r.Done:
		b.WriteString("created")
	case r.Action == streams.ActionUpdate && r.Done:
		b.WriteString("updated")
	case r.Action == streams.ActionCreate || r.Action == streams.ActionUpdate:
		b.WriteString("would " + string(r.Action))
	default:
		b.WriteString(string(r.Action))
	}
	for i, c := range r.Changes {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s", sep, c)
		if c.Refused != "" {
			fmt.Fprintf(&b, " (refused: %s)", c.Refused)
		}
	}
	return b.String()
}
