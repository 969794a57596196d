package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// listedSession is one session of GET /v1/sessions, as the list shows it;
// raw is the object as the gateway sent it (for --json).
type listedSession struct {
	SessionID      string        `json:"sessionId"`
	Agent          string        `json:"agent"`
	LatestSequence uint64        `json:"latestSequence"`
	Title          *string       `json:"title"`
	UpdatedAt      string        `json:"updatedAt"`
	State          sessionState  `json:"state"`
	Usage          *sessionUsage `json:"usage"` // usage.go
	raw            json.RawMessage
}

// sessionState is the part of a session's state the commands print.
type sessionState struct {
	Status   string            `json:"status"`
	TurnID   string            `json:"turnId"`
	Requests []json.RawMessage `json:"requests"`
	Inputs   []json.RawMessage `json:"inputs"`
	Error    *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// waitingFor says what waits for the user: how many permission and input
// requests ("" for none).
func (s *sessionState) waitingFor() string {
	var parts []string
	for _, w := range []struct {
		n    int
		what string
	}{{len(s.Requests), "permission request"}, {len(s.Inputs), "input request"}} {
		switch {
		case w.n == 1:
			parts = append(parts, "1 "+w.what)
		case w.n > 1:
			parts = append(parts, fmt.Sprintf("%d %ss", w.n, w.what))
		}
	}
	return strings.Join(parts, ", ")
}

// sessionPage is one page of GET /v1/sessions.
type sessionPage struct {
	Sessions   []listedSession
	NextCursor string
}

// sessions returns one page of the caller's sessions after cursor ("":
// the first), limit a page (0: the gateway's default).
func (c *client) sessions(ctx context.Context, cursor string, limit uint32) (*sessionPage, error) {
	v := url.Values{}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	if limit != 0 {
		v.Set("limit", strconv.FormatUint(uint64(limit), 10))
	}
	u := c.base + "/v1/sessions"
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	var resp struct {
		Sessions   []json.RawMessage `json:"sessions"`
		NextCursor string            `json:"nextCursor"`
	}
	if err := c.do(ctx, http.MethodGet, u, nil, &resp); err != nil {
		return nil, err
	}
	page := &sessionPage{Sessions: make([]listedSession, len(resp.Sessions)), NextCursor: resp.NextCursor}
	for i, raw := range resp.Sessions {
		if err := json.Unmarshal(raw, &page.Sessions[i]); err != nil {
			return nil, fmt.Errorf("the gateway sent a session that does not read: %w", err)
		}
		page.Sessions[i].raw = raw
	}
	return page, nil
}

func (a *app) listCommand() *cobra.Command {
	var (
		c      common
		limit  uint32
		cursor string
		all    bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List your sessions, the most recently updated first",
		Long: `List your sessions, the most recently updated first, as a table under a
header: the session ID, its status (idle, running, waiting, failed), what needs
you ("2 permission requests", "1 input request", "failed: <code>", or "-"), when it was last
updated ("3m ago"), its usage as the agent last reported it (tokens in its
context/context window, then the session's cost when the agent gives one, as
"1200/200000 0.42 USD"; "-" when none), and its title. No adapter starts.

A page holds --limit sessions (the gateway's default is 50). When there are
more, the command says on stderr how to ask for the next page (--cursor);
--all pages through every session. With --json, each session is printed as
the gateway's JSON object on a line, its values raw.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			tw := tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
			if !asJSON {
				fmt.Fprintln(tw, "SESSION\tSTATUS\tNEEDS\tUPDATED\tUSAGE\tTITLE")
			}
			now := time.Now()
			for {
				page, err := cl.sessions(cmd.Context(), cursor, limit)
				if err != nil {
					return fmt.Errorf("list sessions: %w", err)
				}
				for i := range page.Sessions {
					if err := a.printSession(tw, &page.Sessions[i], asJSON, now); err != nil {
						return err
					}
				}
				if page.NextCursor == "" || !all {
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				if page.NextCursor == "" {
					return nil
				}
				if !all {
					_, err := fmt.Fprintf(a.stderr, "more: skein list --cursor %s (or --all)\n", page.NextCursor)
					return err
				}
				cursor = page.NextCursor
			}
		},
	}
	c.registerServer(cmd)
	cmd.Flags().Uint32Var(&limit, "limit", 0, "sessions a page (1 to 10000; default the gateway's, 50)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "start after this cursor (printed after a page when there are more)")
	cmd.Flags().BoolVar(&all, "all", false, "page through every session")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each session as a JSON object on a line")
	return cmd
}

// printSession prints one session: as a JSON line, or as a row of the
// table: ID, STATUS, NEEDS, UPDATED, USAGE and TITLE.
func (a *app) printSession(tw io.Writer, s *listedSession, asJSON bool, now time.Time) error {
	if asJSON {
		_, err := a.stdout.Write(append(visibleJSON(s.raw), '\n'))
		return err
	}
	attention := s.State.waitingFor()
	switch {
	case attention != "":
	case s.State.Error != nil:
		attention = "failed: " + s.State.Error.Code
	default:
		attention = "-"
	}
	title := ""
	if s.Title != nil {
		title = Visible(strings.Join(strings.Fields(*s.Title), " "))
	}
	_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.SessionID, s.State.Status, attention, ago(s.UpdatedAt, now), usageField(s.Usage), title)
	return err
}

// ago returns an RFC 3339 time relative to now, as people say it: "just
// now", "42s ago", "3m ago", "5h ago", "2d ago", then the date; the
// value itself when it does not parse.
func ago(ts string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return orDefault(ts, "-")
	}
	d := now.Sub(t)
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	case d < 30*24*time.Hour:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
	return t.Local().Format("2006-01-02")
}
