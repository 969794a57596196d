package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) commandsCommand() *cobra.Command {
	var (
		c      common
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "commands",
		Short: "Print the commands a session's agent offers",
		Long: `Print the commands (slash commands and skills) the session's agent last
announced, one a line of tab-separated fields: the command as it is typed
("/name"), its description, and the hint for its input when it takes one.
Nothing is printed when the agent announced none. With --json, the reply is
printed as it is: {"commands":[...]}, each command exactly as the agent sent
it. Reading the commands never starts the session's adapter.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			commands, err := cl.commands(cmd.Context(), c.session)
			if err != nil {
				return fmt.Errorf("commands of %s: %w", c.session, err)
			}
			return a.printCommands(commands, asJSON)
		},
	}
	c.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the reply's JSON")
	return cmd
}

// sessionCommands is the reply of GET /v1/sessions/{id}/commands.
type sessionCommands struct {
	Commands json.RawMessage `json:"commands"`
}

// commands returns the commands the session's agent last announced.
func (c *client) commands(ctx context.Context, sid string) (*sessionCommands, error) {
	var resp sessionCommands
	if err := c.do(ctx, http.MethodGet, c.sessionPath(sid, "/commands"), nil, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// availableCommand is the part of an ACP AvailableCommand skein commands
// prints.
type availableCommand struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Input       *struct {
		Hint string `json:"hint"`
	} `json:"input"`
}

// printCommands prints the commands: as the reply's JSON, or one a line,
// the tab-separated fields /NAME, DESCRIPTION and, when it takes input,
// HINT. White space in a field (a tab, a newline) is collapsed to one
// space, so that a line is one command.
func (a *app) printCommands(resp *sessionCommands, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(resp)
		if err != nil {
			return fmt.Errorf("encode commands: %w", err)
		}
		_, err = a.stdout.Write(append(visibleJSON(b), '\n'))
		return err
	}
	var commands []availableCommand
	if len(resp.Commands) > 0 {
		if err := json.Unmarshal(resp.Commands, &commands); err != nil {
			return fmt.Errorf("decode commands: %w", err)
		}
	}
	var buf bytes.Buffer
	for _, cmd := range commands {
		fmt.Fprintf(&buf, "/%s\t%s", flat(cmd.Name), flat(cmd.Description))
		if cmd.Input != nil {
			buf.WriteString("\t" + flat(cmd.Input.Hint))
		}
		buf.WriteByte('\n')
	}
	_, err := a.stdout.Write(buf.Bytes())
	return err
}

// flat returns s with every run of white space as one space.
func flat(s string) string { return Visible(strings.Join(strings.Fields(s), " ")) }
