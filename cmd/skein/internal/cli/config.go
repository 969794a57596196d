package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) configCommand() *cobra.Command {
	var (
		c      common
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print a session's config options",
		Long: `Print the session's config options as the agent last reported them, one a
line of tab-separated fields: the option's ID, its current value, and, for a
select, the values it offers, separated by commas. With --json, the reply is
printed as it is: {"revision":N,"options":[...]}. Reading the options never
starts the session's adapter. Set one with skein config set.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			cfg, err := cl.config(cmd.Context(), c.session)
			if err != nil {
				return fmt.Errorf("config of %s: %w", c.session, err)
			}
			return a.printConfig(cfg, asJSON)
		},
	}
	c.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the reply's JSON")
	cmd.AddCommand(a.configSetCommand())
	return cmd
}

func (a *app) configSetCommand() *cobra.Command {
	var (
		c      common
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "set CONFIG_ID VALUE",
		Short: "Set one of a session's config options",
		Long: `Set the session's config option CONFIG_ID to VALUE: true or false set a
boolean option, anything else is sent as a string (a select's value ID). The
agent validates the value: one it rejects fails with adapter_error. The
session's adapter is restored if it was unloaded. The agent's answer, the
whole new option collection, is printed as skein config prints it (with
--json, as it is).`,
		Args:         cobra.ExactArgs(2),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, done := a.client(&c)
			defer done()
			cfg, err := cl.setConfig(cmd.Context(), c.session, args[0], configValue(args[1]))
			if err != nil {
				return fmt.Errorf("set %s of %s: %w", args[0], c.session, err)
			}
			return a.printConfig(cfg, asJSON)
		},
	}
	c.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the reply's JSON")
	return cmd
}

// configValue returns the value a command-line VALUE stands for: the
// boolean for true and false, else the string.
func configValue(s string) any {
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	return s
}

// configOption is the part of an ACP config option skein config prints.
type configOption struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	CurrentValue json.RawMessage `json:"currentValue"`
	Options      []struct {
		Value   *string `json:"value"`
		Options []struct {
			Value string `json:"value"`
		} `json:"options"` // of a group
	} `json:"options"`
}

// printConfig prints the options: as the reply's JSON, or one a line, the
// tab-separated fields ID, CURRENT and, for a select, VALUES.
func (a *app) printConfig(cfg *sessionConfig, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(cfg)
		if err != nil {
			return fmt.Errorf("encode config: %w", err)
		}
		_, err = a.stdout.Write(append(visibleJSON(b), '\n'))
		return err
	}
	var options []configOption
	if len(cfg.Options) > 0 {
		if err := json.Unmarshal(cfg.Options, &options); err != nil {
			return fmt.Errorf("decode config options: %w", err)
		}
	}
	var buf bytes.Buffer
	for _, o := range options {
		fmt.Fprintf(&buf, "%s\t%s", o.ID, scalar(o.CurrentValue))
		if o.Type == "select" {
			var values []string
			for _, v := range o.Options {
				if v.Value != nil {
					values = append(values, *v.Value)
				}
				for _, g := range v.Options {
					values = append(values, g.Value)
				}
			}
			buf.WriteString("\t" + strings.Join(values, ","))
		}
		buf.WriteByte('\n')
	}
	// The IDs and values are the agent's.
	_, err := io.WriteString(a.stdout, Visible(buf.String()))
	return err
}

// scalar returns a JSON value for a line of text: a string unquoted,
// anything else as compact JSON.
func scalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return Visible(string(raw))
	}
	return string(visibleJSON(buf.Bytes()))
}

func (a *app) infoCommand() *cobra.Command {
	var (
		c      common
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Print the gateway's version and a session's agent info and capabilities",
		Long: `Print the gateway's URL and version (from GET /healthz) after "server: ", then
the agent info (name, title, version) and the capabilities of the session's
agent, as it last reported them, each as compact JSON on a line of its own
after "agentInfo: " and "capabilities: "; null when unknown. With --json, all
are printed as one JSON object {agentInfo, capabilities, server: {url,
version}}.
Reading them never starts the session's adapter.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, done := a.client(&c)
			defer done()
			d, err := cl.info(cmd.Context(), c.session)
			if err != nil {
				return fmt.Errorf("info of %s: %w", c.session, err)
			}
			version, err := cl.serverVersion(cmd.Context())
			if err != nil {
				return fmt.Errorf("version of the gateway: %w", err)
			}
			d.Server = &serverInfo{URL: cl.base, Version: version}
			if asJSON {
				b, err := json.Marshal(d)
				if err != nil {
					return fmt.Errorf("encode info: %w", err)
				}
				_, err = a.stdout.Write(append(visibleJSON(b), '\n'))
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "server: %s %s\nagentInfo: %s\ncapabilities: %s\n",
				cl.base, orDefault(version, "(the gateway reports no version)"), compact(d.AgentInfo), compact(d.Capabilities))
			return err
		},
	}
	c.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print both as one JSON object")
	return cmd
}

// compact returns raw as compact JSON, or null when it is empty.
func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return Visible(string(raw))
	}
	return string(visibleJSON(buf.Bytes()))
}
