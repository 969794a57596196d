package history

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/textproto"

	"github.com/nats-io/nats.go/jetstream"
	"skein.dev/pkg/events"
)

// leaderEntry reads key of bucket from the stream's leader: nil when the
// bucket holds no value for it (never written, deleted or purged).
//
// A KV get is a direct get, which any replica answers, and a replica still
// catching up (after a restore, a scale-up or a restart) answers from what
// it holds: a session opened a moment ago may be missing there. The leader
// has every write the opener was acknowledged, so a miss is asked again of
// it before it becomes session_not_found. Only a miss pays the round trip.
func leaderEntry(ctx context.Context, js jetstream.JetStream, bucket, key string) ([]byte, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		return nil, err
	}
	prefix := js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	m, err := js.Conn().RequestWithContext(ctx, prefix+"STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message struct {
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "read %s from its leader: %v", key, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, nil
		}
		return nil, resp.Error
	}
	if op := kvOperation(resp.Message.Header); op == "DEL" || op == "PURGE" {
		return nil, nil
	}
	return resp.Message.Data, nil
}

// kvOperation returns the KV-Operation header of a stored message's
// header block ("NATS/1.0\r\n" and MIME headers), "" when it has none: a
// put.
func kvOperation(hdr []byte) string {
	if len(hdr) == 0 {
		return ""
	}
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(hdr)))
	if _, err := r.ReadLine(); err != nil {
		return ""
	}
	h, err := r.ReadMIMEHeader()
	if err != nil && len(h) == 0 {
		return ""
	}
	return h.Get("KV-Operation")
}
