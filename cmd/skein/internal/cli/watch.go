package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// watchResult is one answer of GET /v1/sessions/{id}/watch.
type watchResult struct {
	Events       []json.RawMessage `json:"events"`
	HasMoreAfter bool              `json:"hasMoreAfter"`
	State        sessionState      `json:"state"`
	Cursor       uint64            `json:"cursor"`
}

// watch long-polls the session for events after the durable sequence
// after, for at most timeout.
func (c *client) watch(ctx context.Context, sid string, after uint64, timeout time.Duration) (*watchResult, error) {
	v := url.Values{}
	v.Set("after", strconv.FormatUint(after, 10))
	v.Set("timeout", timeout.String())
	var r watchResult
	if err := c.do(ctx, http.MethodGet, c.sessionPath(sid, "/watch?"+v.Encode()), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a *app) watchCommand() *cobra.Command {
	var (
		c       common
		after   uint64
		timeout time.Duration
		once    bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow a session by long polling",
		Long: `Follow the session with the gateway's long poll (GET .../watch) instead of
an event stream, for networks that do not keep a stream open: print each
durable event as it is stored, rendered as skein prompt renders a turn, and
the session's state on stderr whenever it changes ("state: waiting, 1
permission request"), until interrupted. Each poll waits at most --timeout for
something new. With --once, print one answer and stop. With --json, each
event is printed as its public JSON on a line.

When the gateway cannot be reached or says it is unavailable (it restarted),
the command says so on stderr and polls again from its cursor, until
interrupted.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			err := a.watchLoop(cmd.Context(), cl, c.session, after, timeout, once, asJSON)
			if cmd.Context().Err() != nil {
				return nil // interrupted: the normal end
			}
			return err
		},
	}
	c.register(cmd)
	cmd.Flags().Uint64Var(&after, "after", 0, "start after this durable sequence (default: from the beginning)")
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Second, "how long one poll waits for something new (at most 30s)")
	cmd.Flags().BoolVar(&once, "once", false, "print one answer and stop")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each event's public JSON on a line")
	return cmd
}

// watchLoop polls until ctx ends, an error no retry cures, or the first
// answer with once. The gateway's absence is retried, with a growing
// pause.
func (a *app) watchLoop(ctx context.Context, cl *client, sid string, after uint64, timeout time.Duration, once, asJSON bool) error {
	lastState := ""
	p := a.newPrinter()
	p.session, p.showUser = sid, true
	outage := false
	for retries := 0; ; {
		r, err := cl.watch(ctx, sid, after, timeout)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !retryable(err) || once {
				_ = p.finish() // the error is what matters now
				return fmt.Errorf("watch %s: %w", sid, err)
			}
			if !outage {
				fmt.Fprintf(a.stderr, "skein: watch %s: %v; polling %s again\n", sid, err, cl.base)
				outage = true
			}
			retries++
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(min(time.Duration(retries)*200*time.Millisecond, maxPause)):
			}
			continue
		}
		if outage {
			fmt.Fprintf(a.stderr, "skein: reconnected to %s after sequence %d\n", cl.base, after)
			outage = false
		}
		retries = 0
		for _, ev := range r.Events {
			if asJSON {
				if _, err := a.stdout.Write(append(visibleJSON(ev), '\n')); err != nil {
					return err
				}
				continue
			}
			var e event
			if err := decodeVisible(ev, &e); err != nil {
				return fmt.Errorf("decode event: %w", err)
			}
			p.render(&e)
		}
		after = r.Cursor
		state := r.State.Status
		if w := r.State.waitingFor(); w != "" {
			state += ", " + w
		} else if r.State.Error != nil {
			state += ": " + r.State.Error.Code
		}
		if state != lastState {
			if state != "running" && state != "stalled" && state != "waiting" {
				p.endLine() // the turn's text is complete
			}
			p.clearRegion()
			if _, err := fmt.Fprintf(a.stderr, "state: %s\n", Visible(state)); err != nil {
				return err
			}
			lastState = state
		}
		if p.err != nil {
			return p.err
		}
		if once {
			return p.finish()
		}
	}
}
