package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"skein.dev/pkg/acp"
)

func (a *app) attachCommand() *cobra.Command {
	var (
		c           common
		interactive bool
	)
	cmd := &cobra.Command{
		Use:   "attach",
		Short: "Show a session's running turn live, as prompt does",
		Long: `Show the session's running or waiting turn as skein prompt shows it: its
prompt and what the agent did so far, from history, then live until the turn
ends. Permission requests are asked on the terminal as prompt asks them. The
first Ctrl-C cancels the turn and waits for its end; a second stops waiting.
The exit code is the turn's, as for prompt (docs/CLI.md). A session with no
running turn prints so on standard error and exits 0.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			t := &turn{app: a, cl: cl, session: c.session}
			if stdin := cmd.InOrStdin(); interactive && isTerminal(stdin) {
				t.input = stdin
			}
			return t.attachTurn(cmd.Context())
		},
	}
	c.register(cmd)
	cmd.Flags().BoolVar(&interactive, "interactive", true, "ask for permission choices on the terminal (only when standard input is one)")
	return cmd
}

// historyScanPages bounds how far back attach looks for the start of the
// running turn.
const historyScanPages = 50

// attachTurn shows the session's running turn, from its prompt on.
func (t *turn) attachTurn(ctx context.Context) error {
	interrupts, release := take(ctx)
	defer release()
	info, err := t.cl.session(ctx, t.session)
	if err != nil {
		return fmt.Errorf("session %s: %w", t.session, err)
	}
	if info.State.Status != "running" && info.State.Status != "stalled" && info.State.Status != "waiting" {
		_, err := fmt.Fprintf(t.app.stderr, "session %s has no running turn (it is %s)\n", t.session, info.State.Status)
		return err
	}
	turnID := info.State.TurnID
	v := t.newView(info.LatestSequence)
	defer v.close()
	v.p.showUser = true
	past, err := t.turnSoFar(ctx, turnID)
	if err != nil {
		return err
	}
	if len(past) > 0 {
		v.last = 0
	}
	v.p.setPhase(phaseThinking)
	for _, e := range past {
		v.last = e.Sequence
		v.showEvent(e)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	// The feed's notes reach the printer through watch, its one writer.
	v.notes = make(chan string, 16)
	f, err := t.cl.openFeed(sctx, t.session, v.last, func(s string) {
		select {
		case v.notes <- s:
		default: // watch is behind; a note about reconnecting can go
		}
	})
	if err != nil {
		return fmt.Errorf("events of %s: %w", t.session, err)
	}
	defer func() {
		stop()
		for range f.events { // the feed ends with sctx
		}
	}()
	// The stream's state events say when the turn ends, and why: the
	// view's end channel is the prompt's answer, which attach has none of.
	return v.watch(ctx, f, nil, turnID, interrupts)
}

// turnSoFar returns the durable events of the turn turnID so far, from
// its prompt (the user_message_chunk events with messageId user_<turnID>)
// on, reading history backwards; none when the prompt is not found.
func (t *turn) turnSoFar(ctx context.Context, turnID string) ([]*event, error) {
	var newer []*event // the events after the pages read so far, oldest first
	var q historyQuery
	for range historyScanPages {
		page, err := t.cl.history(ctx, t.session, q)
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", t.session, err)
		}
		evs := make([]*event, 0, len(page.Events))
		for _, raw := range page.Events {
			var e event
			if err := decodeVisible(raw, &e); err != nil {
				return nil, fmt.Errorf("decode history event: %w", err)
			}
			evs = append(evs, &e)
		}
		start := -1
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Type == acp.UpdateUserMessageChunk && evs[i].MessageID == "user_"+turnID {
				start = i
			} else if start >= 0 {
				break // the prompt's first block was the one after this
			}
		}
		if start >= 0 {
			return append(evs[start:], newer...), nil
		}
		if !page.HasMoreBefore || len(evs) == 0 {
			return nil, nil
		}
		newer = append(evs, newer...)
		before := evs[0].Sequence
		q = historyQuery{Before: &before}
	}
	return nil, nil
}

// turnEnded is the stop reason of a turn whose end was seen without a
// reason.
const turnEnded = ""

// describeEnd returns how a stop reason is printed.
func describeEnd(stopReason string) string {
	if stopReason == turnEnded {
		return "turn ended"
	}
	return stopReason
}
