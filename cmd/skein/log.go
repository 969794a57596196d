package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
)

// logCommand is `skein log`: the records a stream holds on a subject, read
// with batch direct gets, one line of JSON each (as skein decode prints
// them) or their headers.
//
// It exists beside `nats sub --stream ... --terminate-at-end` because that
// reads through a consumer, and on nats-server 2.15.3 a consumer placed on
// a replica that is catching up (after a node's restart, a restore, or a
// follower that fell behind) is not woken by the records the catch-up
// brings: the nats sub then waits for ever, though the stream holds the
// records. A direct get reads what a replica holds and answers at once;
// there is no consumer to be left waiting.
func logCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var (
		conn           natsFlags
		stream         string
		after          uint64
		since, timeout time.Duration
		headers        bool
	)
	cmd := &cobra.Command{
		Use:   "log SUBJECT",
		Short: "Print the records a stream holds on a subject, over NATS, and end",
		Long: `Print every record ACP_LOG or ACP_IO holds on SUBJECT (wildcards allowed),
oldest first, up to the newest stored when it starts, then end: one line of
JSON a record, as 'skein decode' prints it, or with --headers the record's
sequence, subject and headers. The stream is the subject's (acp.log.> is
ACP_LOG, acp.io.> is ACP_IO) unless --stream names another.

  skein log "acp.log.default.$SID.>"
  skein log 'acp.io.default.>' --since 1h
  skein log "acp.log.default.$SID.>" --headers

It reads with direct gets, never through a consumer, so that it cannot be
left waiting by a replica that is catching up (see docs/OPERATIONS.md).`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			subject := args[0]
			if stream == "" {
				var err error
				if stream, err = streamOf(subject); err != nil {
					return err
				}
			}
			nc, err := conn.connect(cmd, getenv, "skein log")
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if since > 0 {
				rctx, cancel := context.WithTimeout(ctx, timeout)
				first, err := eventlog.FirstSince(rctx, js, stream, subject, time.Now().Add(-since))
				cancel()
				if err != nil {
					return err
				}
				if first == nil {
					return nil // nothing stored since then
				}
				after = max(after, first.Sequence-1)
			}
			print := func(r *eventlog.Record) error {
				_, err := stdout.Write(logLine(r, headers))
				return err
			}
			return readLog(ctx, js, stream, subject, after, timeout, print)
		},
	}
	conn.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&stream, "stream", "", "the stream to read (default: the subject's, ACP_LOG or ACP_IO)")
	fs.Uint64Var(&after, "after", 0, "start after this stream sequence")
	fs.DurationVar(&since, "since", 0, "start with the first record stored this long ago (1h, 30m)")
	fs.BoolVar(&headers, "headers", false, "print each record's sequence, subject and headers instead of its JSON")
	fs.DurationVar(&timeout, "timeout", 10*time.Second, "how long one read may wait for its answer")
	return cmd
}

// streamOf returns the stream that stores subject.
func streamOf(subject string) (string, error) {
	switch {
	case strings.HasPrefix(subject, "acp.log."):
		return events.StreamLog, nil
	case strings.HasPrefix(subject, "acp.io."):
		return events.StreamIO, nil
	}
	return "", fmt.Errorf("%s is not an acp.log or acp.io subject: name its stream with --stream", subject)
}

// logBatch is how many records one direct get asks for.
const logBatch = 256

// logBehindFor bounds how long readLog waits for a replica that answered
// short of the newest record it was told of (direct gets on R3 may be
// served by a follower that is behind) before it says so.
const logBehindFor = 10 * time.Second

// readLog calls print for each record on subject after the sequence after,
// oldest first, up to the subject's newest record when it starts.
//
// Each read waits at most timeout for its answer: a user whose replies
// cannot reach it (an inbox its permissions refuse) gets an error, not a
// wait for ever.
func readLog(ctx context.Context, js jetstream.JetStream, stream, subject string, after uint64, timeout time.Duration, print func(*eventlog.Record) error) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	last, err := eventlog.Last(rctx, js, stream, subject)
	cancel()
	if err != nil {
		return err
	}
	var behindSince time.Time
	for last != nil && after < last.Sequence {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		recs, err := eventlog.Forward(rctx, js, stream, subject, after, logBatch)
		cancel()
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			// The replica that answered has not stored what another
			// told of yet: ask again, for a while.
			if behindSince.IsZero() {
				behindSince = time.Now()
			} else if time.Since(behindSince) > logBehindFor {
				return fmt.Errorf("%s: no record after %d on %s, though %d is stored: a replica is behind", stream, after, subject, last.Sequence)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		behindSince = time.Time{}
		for _, r := range recs {
			if r.Sequence > last.Sequence {
				return nil
			}
			if err := print(r); err != nil {
				return err
			}
			after = r.Sequence
		}
	}
	return nil
}

// directGetHeaders are the headers a direct get adds to a record's own,
// which the line before them already says or which say nothing of it.
var directGetHeaders = map[string]bool{
	jetstream.StreamHeader: true, jetstream.SequenceHeader: true, jetstream.SubjectHeader: true,
	jetstream.TimeStampHeaer: true, "Nats-Num-Pending": true, jetstream.LastSequenceHeader: true, "Nats-UpTo-Sequence": true,
}

// logLine is one record as skein log prints it.
func logLine(r *eventlog.Record, headers bool) []byte {
	if !headers {
		v, err := events.Unmarshal(r.Data)
		if err != nil {
			return append(errorLine(err, len(r.Data)), '\n')
		}
		line, err := eventjson.Record(v)
		if err != nil {
			return append(errorLine(err, len(r.Data)), '\n')
		}
		return append(line, '\n')
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[#%d] %s\n", r.Sequence, r.Subject)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		if !directGetHeaders[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range r.Header[k] {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	b.WriteString("\n")
	return []byte(b.String())
}
