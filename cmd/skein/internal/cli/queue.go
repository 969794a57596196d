package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// queueCommand is `skein queue`: what waits in a session's prompt queue,
// and `skein queue rm` to withdraw an entry.
func (a *app) queueCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "List the prompts waiting in a session's queue",
		Long: `List the prompts waiting in the session's queue, in the order they will run:
each entry's ID, who queued it and its text. skein prompt --queue puts a prompt
there while a turn runs; skein queue rm ID withdraws one before it runs.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, done := a.client(&c)
			defer done()
			q, held, err := cl.queue(cmd.Context(), c.session)
			if err != nil {
				return fmt.Errorf("queue of %s: %w", c.session, err)
			}
			if len(q) == 0 {
				_, err := fmt.Fprintf(a.stdout, "nothing waits in the queue of %s\n", c.session)
				return err
			}
			for _, p := range q {
				var text []string
				for _, b := range p.Content {
					if b.Type == "text" {
						text = append(text, b.Text)
					} else {
						text = append(text, "["+b.Type+"]")
					}
				}
				who := p.Principal
				if who == "" {
					who = "-"
				}
				line := Visible(strings.Join(strings.Fields(strings.Join(text, " ")), " "))
				if _, err := fmt.Fprintf(a.stdout, "%d\t%s\t%s\t%s\n", p.Position, p.ID, who, line); err != nil {
					return err
				}
			}
			if held {
				_, err = fmt.Fprintln(a.stderr, "the queue is held: it goes on after the next prompt sent without --queue")
			}
			return err
		},
	}
	c.register(cmd)
	cmd.AddCommand(a.queueRmCommand())
	return cmd
}

func (a *app) queueRmCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:          "rm ID",
		Short:        "Withdraw a queued prompt before it runs",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, done := a.client(&c)
			defer done()
			if err := cl.withdraw(cmd.Context(), c.session, args[0]); err != nil {
				return fmt.Errorf("withdraw %s from %s: %w", args[0], c.session, err)
			}
			_, err := fmt.Fprintf(a.stdout, "withdrew %s\n", args[0])
			return err
		},
	}
	c.register(cmd)
	return cmd
}
