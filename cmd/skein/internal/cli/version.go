package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"skein.dev/internal/buildinfo"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print skein's version",
		Long: `Print the version of this skein binary: its release, or the revision it was
built from, or "devel". skein info prints the gateway's.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(a.stdout, "skein %s\n", buildinfo.Version())
			return err
		},
	}
}

// serverVersion returns the version the gateway reports in GET /healthz,
// "" when it reports none (a gateway from before it did).
func (c *client) serverVersion(ctx context.Context) (string, error) {
	var resp struct {
		Version string `json:"version"`
	}
	if err := c.do(ctx, http.MethodGet, c.base+"/healthz", nil, &resp); err != nil {
		return "", err
	}
	return resp.Version, nil
}

// completionTimeout bounds a completion's question to the gateway: a
// shell waits for it at every Tab.
const completionTimeout = 2 * time.Second

// complete completes the --session, --agent and --runner flags of cmd,
// when it has them, from the gateway: session IDs from GET /v1/sessions
// (the first page), agent and runner IDs from GET /v1/agents. A gateway
// that does not answer completes nothing.
func (a *app) complete(cmd *cobra.Command) {
	flags := cmd.Flags()
	if flags.Lookup("session") != nil {
		_ = cmd.RegisterFlagCompletionFunc("session", func(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cl, done := a.completionClient(cmd)
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
			defer cancel()
			page, err := cl.sessions(ctx, "", 0)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
			}
			var ids []cobra.Completion
			for _, s := range page.Sessions {
				if strings.HasPrefix(s.SessionID, prefix) {
					desc := s.State.Status
					if s.Title != nil && *s.Title != "" {
						desc += ": " + flat(*s.Title)
					}
					ids = append(ids, cobra.CompletionWithDesc(s.SessionID, desc))
				}
			}
			return ids, cobra.ShellCompDirectiveNoFileComp
		})
	}
	if flags.Lookup("agent") != nil {
		_ = cmd.RegisterFlagCompletionFunc("agent", func(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cl, done := a.completionClient(cmd)
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
			defer cancel()
			list, err := cl.agents(ctx)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
			}
			var ids []cobra.Completion
			for _, ag := range list.Agents {
				if strings.HasPrefix(ag.ID, prefix) {
					desc := "installed"
					if !ag.Installed {
						desc = "not installed"
					}
					ids = append(ids, cobra.CompletionWithDesc(ag.ID, desc))
				}
			}
			return ids, cobra.ShellCompDirectiveNoFileComp
		})
	}
	if flags.Lookup("runner") != nil {
		_ = cmd.RegisterFlagCompletionFunc("runner", func(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cl, done := a.completionClient(cmd)
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
			defer cancel()
			list, err := cl.agents(ctx)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
			}
			var ids []cobra.Completion
			for _, r := range list.Runners {
				if strings.HasPrefix(r.ID, prefix) {
					ids = append(ids, cobra.CompletionWithDesc(r.ID, flat(labelsOf(r.Labels))))
				}
			}
			return ids, cobra.ShellCompDirectiveNoFileComp
		})
	}
}

// completionClient returns a client for the --server and --token the
// command line being completed gives so far.
func (a *app) completionClient(cmd *cobra.Command) (*client, func()) {
	var c common
	if f := cmd.Flags().Lookup("server"); f != nil {
		c.server = f.Value.String()
	}
	if f := cmd.Flags().Lookup("token"); f != nil {
		c.token = f.Value.String()
	}
	return a.client(&c)
}
