package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"skein.dev/pkg/events"
)

func (a *app) renameCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "rename TITLE...",
		Short: "Rename a session",
		Long: `Set the session's title to the arguments, joined by spaces, and print it.
The title is trimmed and must be 1 to 120 characters of valid UTF-8 without
control characters; any other is invalid_request, and nothing changes. A
renamed session keeps its title: the agent's own titles no longer replace it
(only another rename does). Renaming never starts the session's agent.`,
		Args:         cobra.MinimumNArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The rules are checked here too: JSON would carry invalid
			// UTF-8 as U+FFFD, a title the gateway would then accept.
			title, err := events.NormalizeTitle(strings.Join(args, " "))
			if err != nil {
				return fmt.Errorf("rename %s: %w", c.session, err)
			}
			cl, done := a.client(&c)
			defer done()
			s, err := cl.rename(cmd.Context(), c.session, title)
			if err != nil {
				return fmt.Errorf("rename %s: %w", c.session, err)
			}
			if s.Title == nil {
				return fmt.Errorf("rename %s: the gateway answered a session without a title", c.session)
			}
			_, err = fmt.Fprintf(a.stdout, "session %s is now %q\n", c.session, *s.Title)
			return err
		},
	}
	c.register(cmd)
	return cmd
}

// renameRequest is the body of PATCH /v1/sessions/{id}.
type renameRequest struct {
	Title string `json:"title"`
}

// renamedSession is the part of PATCH /v1/sessions/{id}'s answer (the
// session, as GET shows it) the command uses.
type renamedSession struct {
	SessionID string  `json:"sessionId"`
	Title     *string `json:"title"`
}

// rename asks the gateway to set the session's title.
func (c *client) rename(ctx context.Context, sid, title string) (*renamedSession, error) {
	var s renamedSession
	if err := c.do(ctx, http.MethodPatch, c.sessionPath(sid, ""), renameRequest{Title: title}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
