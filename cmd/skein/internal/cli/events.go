package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) historyCommand() *cobra.Command {
	var (
		c             common
		after, before uint64
		limit         uint32
		all, asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Print a page of a session's durable events",
		Long: `Print a page of the session's durable events, the newest by default, under a
header: each event's number (eventNo, from 1 without gaps: a jump means history
was pruned), its sequence (the cursor of --after and --before), its time, its
type, who caused it (the token's name that sent a user message or answered a
request; - for none) and a summary. When there is more, the command says on standard error how
to ask for it. --all prints every event, oldest first. With --json, each event
is printed as its public JSON on a line, without the header.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var q historyQuery
			if cmd.Flags().Changed("after") {
				q.After = &after
			}
			if cmd.Flags().Changed("before") {
				if all {
					return usagef("--all reads from the first event: it does not go with --before")
				}
				q.Before = &before
			}
			if all && q.After == nil {
				var first uint64
				q.After = &first
			}
			if cmd.Flags().Changed("limit") {
				q.Limit = &limit
			}
			cl, done := a.client(&c)
			defer done()
			tw := tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
			if !asJSON {
				fmt.Fprintln(tw, "EVENT\tSEQ\tTIME\tTYPE\tWHO\tSUMMARY")
			}
			for {
				page, err := cl.history(cmd.Context(), c.session, q)
				if err != nil {
					return fmt.Errorf("history of %s: %w", c.session, err)
				}
				var first, last uint64
				for _, raw := range page.Events {
					var e event
					if err := decodeVisible(raw, &e); err != nil {
						return fmt.Errorf("decode event: %w", err)
					}
					if first == 0 {
						first = e.Sequence
					}
					last = e.Sequence
					if asJSON {
						if err := a.printEvent(raw, true); err != nil {
							return err
						}
						continue
					}
					fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", e.EventNo, e.Sequence, shortTime(e.Timestamp), e.Type, who(&e), summary(&e))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				switch {
				case all && page.HasMoreAfter && last > 0:
					q.After = &last
					continue
				case q.After != nil && page.HasMoreAfter && last > 0:
					_, err = fmt.Fprintf(a.stderr, "more: skein history%s --after %d (or --all)\n", sessionFlag(c.session), last)
				case q.After == nil && page.HasMoreBefore && first > 0:
					_, err = fmt.Fprintf(a.stderr, "more: skein history%s --before %d (or --all)\n", sessionFlag(c.session), first)
				}
				return err
			}
		},
	}
	c.register(cmd)
	cmd.Flags().Uint64Var(&after, "after", 0, "events after this sequence")
	cmd.Flags().Uint64Var(&before, "before", 0, "events before this sequence")
	cmd.Flags().Uint32Var(&limit, "limit", 0, "at most this many events a page (default: the server's page size, 100)")
	cmd.Flags().BoolVar(&all, "all", false, "print every event, oldest first, page after page")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each event's public JSON on a line")
	cmd.MarkFlagsMutuallyExclusive("after", "before")
	return cmd
}

// who is the principal that caused e (a user message, an answer), "-"
// when it names none.
func who(e *event) string {
	if e.Principal == "" {
		return "-"
	}
	return e.Principal
}

// shortTime returns an RFC 3339 timestamp as the local time of day, with
// the date when it is not today; the timestamp itself when it does not
// parse.
func shortTime(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	t = t.Local()
	if y, m, d := t.Date(); y == time.Now().Year() && m == time.Now().Month() && d == time.Now().Day() {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04:05")
}

func (a *app) eventsCommand() *cobra.Command {
	var (
		c      common
		after  uint64
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow a session's events live",
		Long: `Follow the session's event stream until interrupted, rendered as skein prompt
renders a turn: each prompt, the agent's reply as it streams, tool calls,
plans, permission requests, and the session's state changes (a turn accepted,
finished, waiting; the session unloaded). With --json, each event is printed
as its JSON on a line instead: durable, ephemeral and state events.

When the stream ends (the gateway restarted or stopped, or this client fell
behind) or the gateway cannot be reached, the command says so on standard
error and connects again, resuming after the last durable event it printed,
until interrupted.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			err := a.follow(cmd.Context(), cl, c.session, after, asJSON)
			if cmd.Context().Err() != nil {
				return nil // interrupted: the normal end
			}
			return err
		},
	}
	c.register(cmd)
	cmd.Flags().Uint64Var(&after, "after", 0, "start after this durable sequence (default: from the beginning)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each event's JSON on a line")
	return cmd
}

// follow prints the stream's events until ctx ends or the feed stops for
// good.
func (a *app) follow(ctx context.Context, cl *client, sid string, after uint64, asJSON bool) error {
	p := a.newPrinter()
	p.session, p.showUser = sid, true
	// The feed's notes are written from its goroutine: they go to standard
	// error, which the printer does not draw on.
	f, err := cl.openFeed(ctx, sid, after, func(s string) { fmt.Fprintf(a.stderr, "skein: %s\n", s) })
	if err != nil {
		return fmt.Errorf("events of %s: %w", sid, err)
	}
	var last uint64
	for ev := range f.events {
		if asJSON {
			var buf bytes.Buffer
			if err := json.Compact(&buf, ev.Data); err != nil {
				return fmt.Errorf("event is not JSON: %w", err)
			}
			buf.WriteByte('\n')
			if _, err := a.stdout.Write(visibleJSON(buf.Bytes())); err != nil {
				return err
			}
			continue
		}
		if err := a.renderLive(p, ev, &last); err != nil {
			return err
		}
	}
	if err := p.finish(); err != nil {
		return err
	}
	if err := f.Err(); err != nil {
		return fmt.Errorf("events of %s: %w", sid, err)
	}
	return nil
}

// renderLive prints one event of a session followed without end: events
// and watch in their human form.
func (a *app) renderLive(p *printer, ev sseEvent, last *uint64) error {
	if ev.Name == sseState {
		var sc stateChange
		if err := decodeVisible(ev.Data, &sc); err != nil {
			return fmt.Errorf("decode state event: %w", err)
		}
		if sc.Change == changeTurnFinished {
			if sc.DiscardDeltas {
				p.discard()
			}
			_ = p.finish() // a write error shows on the next write
		}
		p.line(p.style(sgrDim, "— "+describeState(&sc)))
		return nil
	}
	var e event
	if err := decodeVisible(ev.Data, &e); err != nil {
		return fmt.Errorf("decode %s event: %w", ev.Name, err)
	}
	if ev.ID != "" {
		if seq, err := strconv.ParseUint(ev.ID, 10, 64); err == nil {
			*last = seq
		}
	}
	p.render(&e)
	return p.err
}

// describeState returns a state change as a person reads it.
func describeState(sc *stateChange) string {
	switch sc.Change {
	case changeTurnAccepted:
		return "turn " + sc.TurnID + " started"
	case changeTurnFinished:
		switch {
		case sc.Error != nil:
			return fmt.Sprintf("turn %s failed: %s: %s", sc.TurnID, sc.Error.Code, sc.Error.Message)
		default:
			return fmt.Sprintf("turn %s ended: %s", sc.TurnID, sc.StopReason)
		}
	case changeWaiting:
		if sc.WaitingFor != nil {
			return fmt.Sprintf("waiting for %s (request %s)", orDefault(sc.WaitingFor.Kind, "an answer"), sc.WaitingFor.RequestID)
		}
		return "waiting"
	case changeUnloaded:
		return "unloaded"
	case changeAdapterExit:
		return "the agent's process exited"
	case changeStalled:
		return "stalled: the agent has said nothing for session.stall-after"
	case changeResumed:
		return "the agent speaks again"
	}
	return strings.TrimSpace(sc.Change + " " + sc.Status)
}
