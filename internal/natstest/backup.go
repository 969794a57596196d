package natstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Backup is a stream's snapshot as `nats backup stream` takes it: the
// stream's configuration and state, and the snapshot's bytes (an archive
// of the leader's store), without consumers.
type Backup struct {
	Stream string
	Config json.RawMessage
	State  json.RawMessage
	Data   []byte
}

// SnapshotStream takes a snapshot of stream through nc, as natscli does
// (jsm.go's SnapshotToDirectory): a STREAM.SNAPSHOT request names an inbox;
// the leader sends the snapshot there in chunks, each acknowledged by a
// reply, and ends it with an empty message. nats.go's
// jetstream package has no snapshot call, so the API is driven directly.
func SnapshotStream(ctx context.Context, nc *nats.Conn, stream string) (*Backup, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	req, err := json.Marshal(server.JSApiStreamSnapshotRequest{DeliverSubject: inbox, NoConsumers: true})
	if err != nil {
		return nil, err
	}
	var resp struct {
		server.ApiResponse
		Config json.RawMessage `json:"config"`
		State  json.RawMessage `json:"state"`
	}
	if err := apiRequest(ctx, nc, fmt.Sprintf(server.JSApiStreamSnapshotT, stream), req, &resp); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", stream, err)
	}
	b := &Backup{Stream: stream, Config: resp.Config, State: resp.State}
	var data bytes.Buffer
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", stream, err)
		}
		if len(m.Data) == 0 {
			// The end: with status 204, or with none when the last
			// chunk was also the first; another status is a failure.
			if st := m.Header.Get("Status"); st != "" && st != "204" {
				return nil, fmt.Errorf("snapshot %s: ended with status %s %s", stream, st, m.Header.Get("Description"))
			}
			b.Data = data.Bytes()
			return b, nil
		}
		data.Write(m.Data)
		// The reply acknowledges the chunk: the leader keeps a window of
		// unacknowledged ones in flight.
		if m.Reply != "" {
			if err := m.Respond(nil); err != nil {
				return nil, fmt.Errorf("snapshot %s: acknowledge a chunk: %w", stream, err)
			}
		}
	}
}

// RestoreStream restores b as a new stream, as `nats backup restore
// stream` does: a STREAM.RESTORE request with the backup's configuration
// and state answers a subject to send the snapshot to, in chunks, each a
// request the server acknowledges; an empty request ends it, and its reply
// is the restored stream's (or the failure's). The stream must not exist.
func RestoreStream(ctx context.Context, nc *nats.Conn, b *Backup) error {
	req, err := json.Marshal(struct {
		Config json.RawMessage `json:"config"`
		State  json.RawMessage `json:"state"`
	}{b.Config, b.State})
	if err != nil {
		return err
	}
	var resp server.JSApiStreamRestoreResponse
	if err := apiRequest(ctx, nc, fmt.Sprintf(server.JSApiStreamRestoreT, b.Stream), req, &resp); err != nil {
		return fmt.Errorf("restore %s: %w", b.Stream, err)
	}
	const chunk = 64 << 10
	for data := b.Data; len(data) > 0; {
		n := min(chunk, len(data))
		reply, err := sendChunk(ctx, nc, resp.DeliverSubject, data[:n])
		if err != nil {
			return fmt.Errorf("restore %s: send a chunk: %w", b.Stream, err)
		}
		if len(reply.Data) > 0 {
			var r server.ApiResponse
			if err := json.Unmarshal(reply.Data, &r); err == nil && r.Error != nil {
				return fmt.Errorf("restore %s: %s", b.Stream, r.Error.Description)
			}
		}
		data = data[n:]
	}
	var done server.JSApiStreamCreateResponse
	if err := apiRequest(ctx, nc, resp.DeliverSubject, nil, &done); err != nil {
		return fmt.Errorf("restore %s: %w", b.Stream, err)
	}
	return nil
}

// sendChunk sends one chunk of a restore. The server that took the restore
// request subscribes to the deliver subject, and in a cluster that interest
// reaches the other servers a moment later: a chunk that found nobody (no
// responders, so nobody received it) is sent again until it is answered
// or ctx ends.
func sendChunk(ctx context.Context, nc *nats.Conn, subject string, chunk []byte) (*nats.Msg, error) {
	for {
		reply, err := nc.RequestWithContext(ctx, subject, chunk)
		if !errors.Is(err, nats.ErrNoResponders) {
			return reply, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// apiRequest sends a JetStream API request and decodes its reply into
// resp, or returns the error the reply holds.
func apiRequest(ctx context.Context, nc *nats.Conn, subject string, req []byte, resp any) error {
	m, err := nc.RequestWithContext(ctx, subject, req)
	if err != nil {
		return err
	}
	var r server.ApiResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("decode %q: %w", m.Data, err)
	}
	if r.Error != nil {
		return fmt.Errorf("%s (%d)", r.Error.Description, r.Error.ErrCode)
	}
	return json.Unmarshal(m.Data, resp)
}
