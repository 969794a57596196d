package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
)

func (a *app) discardCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "discard",
		Short: "Delete a session that was opened and never used",
		Long: `Delete the session, as delete does, only if it is idle and holds no user
message, and print "discarded": for a session opened ahead of need and not
wanted after all. A session that ran a prompt (or runs one now), or is a
fork, is session_not_empty, and nothing changes: delete it instead.
Discarding a session that does not exist succeeds.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			if err := cl.do(cmd.Context(), http.MethodPost, cl.sessionPath(c.session, "/discard"), struct{}{}, nil); err != nil {
				return fmt.Errorf("discard %s: %w", c.session, err)
			}
			_, err := fmt.Fprintln(a.stdout, "discarded")
			return err
		},
	}
	c.register(cmd)
	return cmd
}

func (a *app) forkCommand() *cobra.Command {
	var (
		c  common
		at uint64
	)
	cmd := &cobra.Command{
		Use:   "fork NEW_SESSION",
		Short: "Fork a session into a new one, at a point of its history",
		Long: `Make NEW_SESSION a fork of the session (--session): a new session with the
same agent and options, and a log of its own that starts by naming the source
and the sequence it was forked at (--at, a sequence of the source's history
as skein history shows it; the newest by default). Its first prompt gives the
agent the source's history up to that sequence. The source is not changed.
Prints the fork and the sequence.`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, done := a.client(&c)
			defer done()
			f, err := cl.fork(cmd.Context(), c.session, args[0], at)
			if err != nil {
				return fmt.Errorf("fork %s: %w", c.session, err)
			}
			_, err = fmt.Fprintf(a.stdout, "session %s is a fork of %s at %d\n", f.SessionID, f.SourceSessionID, f.AtSequence)
			return err
		},
	}
	c.register(cmd)
	cmd.Flags().Uint64Var(&at, "at", 0, "the source's sequence to fork at (default: its newest)")
	return cmd
}

// forkRequest is the body of POST /v1/sessions/{id}/fork.
type forkRequest struct {
	SessionID  string  `json:"sessionId"`
	AtSequence *uint64 `json:"atSequence,omitempty"`
}

// forkResponse is its answer.
type forkResponse struct {
	SessionID       string `json:"sessionId"`
	SourceSessionID string `json:"sourceSessionId"`
	AtSequence      uint64 `json:"atSequence"`
}

// fork asks the gateway to fork sid into newSID at at (0: the newest).
func (c *client) fork(ctx context.Context, sid, newSID string, at uint64) (*forkResponse, error) {
	req := forkRequest{SessionID: newSID}
	if at > 0 {
		req.AtSequence = &at
	}
	var f forkResponse
	if err := c.do(ctx, http.MethodPost, c.sessionPath(sid, "/fork"), req, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

func (a *app) dirsCommand() *cobra.Command {
	var (
		c      common
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "dirs [PATH]",
		Short: "List the folders a session may work in",
		Long: `List the folders under PATH, one absolute path a line, to choose a session's
cwd (skein open --cwd): only folders, never files, confined to your
namespace's workspace as a cwd is. Without PATH, list your namespace's own
directories under the workspace roots. The first line, "parent: DIR", names
the folder above PATH while that is still in the workspace. With --json, the
gateway's answer {path, parent, directories: [{name, path}], truncated} is
printed as it came.`,
		Args:         cobra.MaximumNArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, done := a.client(&c)
			defer done()
			u := cl.base + "/v1/directories"
			if len(args) == 1 {
				u += "?" + url.Values{"path": {args[0]}}.Encode()
			}
			var raw json.RawMessage
			if err := cl.do(cmd.Context(), http.MethodGet, u, nil, &raw); err != nil {
				return fmt.Errorf("list folders: %w", err)
			}
			if asJSON {
				_, err := fmt.Fprintf(a.stdout, "%s\n", visibleJSON(raw))
				return err
			}
			var l struct {
				Parent      string `json:"parent"`
				Directories []struct {
					Path string `json:"path"`
				} `json:"directories"`
				Truncated bool `json:"truncated"`
			}
			if err := json.Unmarshal(raw, &l); err != nil {
				return fmt.Errorf("list folders: decode the answer: %w", err)
			}
			if l.Parent != "" {
				if _, err := fmt.Fprintf(a.stdout, "parent: %s\n", Visible(l.Parent)); err != nil {
					return err
				}
			}
			for _, d := range l.Directories {
				// Folder names are whoever made them's: an agent's too.
				if _, err := fmt.Fprintln(a.stdout, Visible(d.Path)); err != nil {
					return err
				}
			}
			if l.Truncated {
				_, err := fmt.Fprintln(a.stderr, "(more folders than one answer holds; list a folder below)")
				return err
			}
			return nil
		},
	}
	c.registerServer(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the gateway's JSON answer")
	return cmd
}
