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
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow a session by long polling, one durable event a line",
		Long: `Follow the session with the gateway's long poll (GET .../watch) instead of
an event stream, for networks that do not keep a stream open: print each
durable event's public JSON on a line as it is stored, and the session's
state on stderr whenever it changes ("state: waiting, 1 permission
request"), until interrupted. Each poll waits at most --timeout for
something new. With --once, print one answer and stop.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			err := a.watchLoop(cmd.Context(), cl, c.session, after, timeout, once)
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
	return cmd
}

// watchLoop polls until ctx ends, an error that is not "unavailable"
// (retried, with a growing pause), or the first answer with once.
func (a *app) watchLoop(ctx context.Context, cl *client, sid string, after uint64, timeout time.Duration, once bool) error {
	lastState := ""
	for retries := 0; ; {
		r, err := cl.watch(ctx, sid, after, timeout)
		if err != nil {
			if !isCode(err, "unavailable") || retries >= maxResumes {
				return fmt.Errorf("watch %s: %w", sid, err)
			}
			retries++
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Duration(retries) * 200 * time.Millisecond):
			}
			continue
		}
		retries = 0
		for _, ev := range r.Events {
			if _, err := a.stdout.Write(append(append([]byte(nil), ev...), '\n')); err != nil {
				return err
			}
		}
		after = r.Cursor
		state := r.State.Status
		if w := r.State.waitingFor(); w != "" {
			state += ", " + w
		} else if r.State.Error != nil {
			state += ": " + r.State.Error.Code
		}
		if state != lastState {
			if _, err := fmt.Fprintf(a.stderr, "state: %s\n", state); err != nil {
				return err
			}
			lastState = state
		}
		if once {
			return nil
		}
	}
}
