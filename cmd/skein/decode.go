package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// maxDecodeInput bounds what skein decode reads: more than any NATS
// payload (the server's max_payload is at most 64 MiB).
const maxDecodeInput = 64 << 20

// decodeCommand is `skein decode`: one Skein record on stdin, one line of
// JSON on stdout. It is made for natscli's --translate, which runs the
// command once per message with the payload on stdin:
//
//	nats sub 'acp.tail.default.>' --translate 'skein decode'
//
// A payload that is not a Skein record prints {"error": ..., "bytes": N}
// and still exits 0, so that one odd message does not end a nats sub
// session (natscli prints the output either way).
func decodeCommand(stdin io.Reader, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "decode",
		Short: "Print the Skein record on stdin as one line of JSON (for nats sub --translate)",
		Long: `Read one NATS payload from stdin, decode it as a Skein record (any variant:
log records, runner records, API requests and replies, KV values) and print
one line of JSON: {"record": "<variant>", ...its fields}, ACP JSON embedded as
JSON. Durable events and live deltas are shown in the gateway's public form,
without the session, sequence and time their payload does not carry. Made
for the nats CLI:

  nats sub 'acp.tail.default.>' --translate 'skein decode'

A payload that is not a Skein record prints {"error": "...", "bytes": N} and
exits 0, so that a nats sub session keeps going.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			_, err := stdout.Write(append(decodeLine(stdin), '\n'))
			return err
		},
	}
}

// decodeLine reads all of r and returns its record's JSON, or the error
// line.
func decodeLine(r io.Reader) []byte {
	data, err := io.ReadAll(io.LimitReader(r, maxDecodeInput+1))
	if err != nil {
		return errorLine(fmt.Errorf("read stdin: %w", err), len(data))
	}
	if len(data) > maxDecodeInput {
		return errorLine(fmt.Errorf("payload over %d bytes", maxDecodeInput), len(data))
	}
	v, err := events.Unmarshal(data)
	if err != nil {
		return errorLine(err, len(data))
	}
	line, err := eventjson.Record(v)
	if err != nil {
		return errorLine(err, len(data))
	}
	return line
}

func errorLine(err error, n int) []byte {
	line, _ := json.Marshal(struct {
		Error string `json:"error"`
		Bytes int    `json:"bytes"`
	}{err.Error(), n})
	return line
}
