package main

import (
	"context"
	"io"
	"iter"

	"github.com/spf13/cobra"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/pkg/client"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// followCommand is `skein follow`: the Go client's Follow and Subscribe
// (pkg/client) on the command line, for operators and services that reach
// NATS rather than a gateway.
func followCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var (
		conn               natsFlags
		namespace, session string
		after              uint64
		asJSON             bool
	)
	cmd := &cobra.Command{
		Use:   "follow [--session ID [--after N]]",
		Short: "Print the durable events of every session of a namespace as they are stored, over NATS",
		Long: `Connect to Skein's NATS and print each durable event of every session of the
namespace as it is stored, one a line (its sequence, time, type and a
summary; with --json, its JSON object in the gateway's form), until
interrupted. With --session, print that session's history after --after first,
then its new events: every event once, in order. Unlike the other client
commands this one talks to NATS directly (the Go client, pkg/client), not to
a gateway.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, err := conn.connect(cmd, getenv, "skein follow")
			if err != nil {
				return err
			}
			defer nc.Close()
			cl, err := client.New(nc, client.WithNamespace(namespace))
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var evs iter.Seq2[*events.AcpDurableHistoryEntry, error]
			if session != "" {
				evs = cl.Subscribe(ctx, session, after)
			} else {
				evs = cl.Follow(ctx)
			}
			return printEvents(ctx, stdout, evs, asJSON)
		},
	}
	conn.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&namespace, "namespace", string(events.DefaultNamespace), "the namespace to follow")
	fs.StringVarP(&session, "session", "s", "", "follow this session only, from its history after --after")
	fs.Uint64Var(&after, "after", 0, "with --session: start after this durable sequence")
	fs.BoolVar(&asJSON, "json", false, "print each event's JSON on a line")
	return cmd
}

// printEvents prints each event on a line, its public JSON or its
// readable form, until the iteration ends; the end of ctx is the normal
// end.
func printEvents(ctx context.Context, w io.Writer, evs iter.Seq2[*events.AcpDurableHistoryEntry, error], asJSON bool) error {
	for ev, err := range evs {
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		line, err := eventjson.Durable(ev)
		if err != nil {
			return err
		}
		if !asJSON {
			text, err := cli.EventLine(line)
			if err != nil {
				return err
			}
			line = []byte(text)
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return err
		}
	}
	return nil
}
