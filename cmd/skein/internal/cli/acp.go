package cli

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/spf13/cobra"

	"skein.dev/internal/acpbridge"
)

func (a *app) acpCommand() *cobra.Command {
	var (
		c       common
		agent   string
		policy  string
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "acp",
		Short: "Serve ACP on stdio: an editor's agent whose sessions are Skein's",
		Long: `Speak the Agent Client Protocol (ACP v1) on standard input and output, as an
agent process does, so that any ACP client (Zed, JetBrains, Neovim, the ACP
SDKs) can use Skein as its agent: its threads become durable Skein sessions
that outlive the editor, and anyone with the namespace's token can watch them
and answer them. session/new opens a session (with --agent, --policy, or
_meta.skein.agent, permissionPolicy, sessionId); session/load replays one and
follows it; session/resume follows it; session/close stops following it here
only. Nothing is written to standard output but ACP messages; diagnostics go
to standard error. Ending skein acp ends no session and no turn.
See docs/EDITORS.md.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			header := http.Header{}
			if cl.token != "" {
				header.Set("Authorization", "Bearer "+cl.token)
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			err := acpbridge.Serve(cmd.Context(), acpbridge.Config{
				BaseURL: cl.base,
				Header:  header,
				Client:  cl.http,
				Agent:   agent,
				Policy:  policy,
				Logger:  slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level})),
			}, acpbridge.NewStdio(cmd.InOrStdin(), a.stdout))
			if errors.Is(err, io.EOF) || errors.Is(err, cmd.Context().Err()) {
				return nil
			}
			return err
		},
	}
	c.registerServer(cmd)
	cmd.Flags().StringVar(&agent, "agent", "", "agent of a new session (default: the first agent the runners offer)")
	cmd.Flags().StringVar(&policy, "policy", "ask", "permission policy of a new session: ask, allow_all or reject_all")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log the bridge's diagnostics to standard error")
	return cmd
}
