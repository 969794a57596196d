package main

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// natsFlags are how the commands that talk to NATS directly (skein follow,
// skein log) reach it: --nats (or NATS_URL), --nats-creds and
// --inbox-prefix, for a user whose permissions allow only its own inbox.
type natsFlags struct {
	url, creds, inbox string
}

func (f *natsFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.url, "nats", nats.DefaultURL, "NATS server URL(s), comma separated (env NATS_URL)")
	fs.StringVar(&f.creds, "nats-creds", "", "NATS credentials file")
	fs.StringVar(&f.inbox, "inbox-prefix", "", "the inbox prefix the NATS user may subscribe to (e.g. _INBOX.reader-default)")
}

// connect connects as the command name, NATS_URL standing in for an unset
// --nats.
func (f *natsFlags) connect(cmd *cobra.Command, getenv func(string) string, name string) (*nats.Conn, error) {
	url := f.url
	if v := getenv("NATS_URL"); v != "" && !cmd.Flags().Changed("nats") {
		url = v
	}
	opts := []nats.Option{nats.Name(name)}
	if f.creds != "" {
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	if f.inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(f.inbox))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	return nc, nil
}
