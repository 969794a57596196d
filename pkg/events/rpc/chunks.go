package rpc

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/pkg/events"
)

// A reply must fit one NATS message, which the server's max_payload
// bounds (headers included); a larger one is refused by the client library
// and never reaches the requester, who would wait out its timeout. So an
// endpoint's reply that does not fit is never dropped: when the request
// carries events.HeaderAcceptChunks it is sent in chunks (events.HeaderChunk), which
// CallChunked reassembles; otherwise the request fails at once with
// events.CodePayloadTooLarge, and the endpoint logs it.

// MaxReplyChunks bounds the chunks of one reply: a reassembler holds no
// more than that many messages' worth of bytes.
const MaxReplyChunks = 1024

// chunkRoom is what a chunk keeps back from max_payload for its header.
const chunkRoom = 1 << 10

// sendReply answers req with body. Through micro (req.Respond) unless
// async, by publishing on nc otherwise (see RespondAsync). A body larger
// than one message carries is chunked when the requester accepts chunks;
// otherwise it is events.CodePayloadTooLarge, returned for the caller to answer.
// With nc nil (ServeOp's micro form) the size is not known: it answers
// through micro.
func sendReply(nc *nats.Conn, async bool, req micro.Request, body []byte) error {
	if nc == nil {
		return req.Respond(body)
	}
	if int64(len(body)) <= nc.MaxPayload() {
		if async {
			return nc.PublishMsg(&nats.Msg{Subject: req.Reply(), Data: body})
		}
		return req.Respond(body)
	}
	if req.Headers().Get(events.HeaderAcceptChunks) == "" {
		return events.Errorf(events.CodePayloadTooLarge, "the reply of %d bytes is larger than one NATS message carries (max_payload %d bytes), and the request does not accept chunked replies", len(body), nc.MaxPayload())
	}
	return publishChunks(nc, req.Reply(), body)
}

// publishChunks publishes body to reply in chunks of at most one message
// each, in order.
func publishChunks(nc *nats.Conn, reply string, body []byte) error {
	size := int(nc.MaxPayload()) - chunkRoom
	n := (len(body) + size - 1) / size
	if size <= 0 || n > MaxReplyChunks {
		return events.Errorf(events.CodePayloadTooLarge, "the reply of %d bytes is larger than %d chunks of max_payload (%d bytes) carry", len(body), MaxReplyChunks, nc.MaxPayload())
	}
	total := "/" + strconv.Itoa(n)
	for i := range n {
		part := body[i*size : min((i+1)*size, len(body))]
		msg := &nats.Msg{Subject: reply, Data: part, Header: nats.Header{events.HeaderChunk: []string{strconv.Itoa(i+1) + total}}}
		if err := nc.PublishMsg(msg); err != nil {
			return err
		}
	}
	return nil
}

// logUnsent logs a reply that could not be sent.
func logUnsent(lg *slog.Logger, op string, err error) {
	if events.AsError(err).Code == events.CodePayloadTooLarge {
		lg.Error("reply too large", events.LogKeyOp, op, events.LogKeyErr, err)
		return
	}
	lg.Warn("reply not sent", events.LogKeyOp, op, events.LogKeyErr, err)
}

// RequestChunked is Request for a reply that may be larger than one NATS
// message: it asks for a chunked reply (events.HeaderAcceptChunks) and
// reassembles it. It subscribes an inbox of its own for each request, a
// little dearer than Request's shared one, so use it where replies may be
// large (history pages).
func RequestChunked(ctx context.Context, nc *nats.Conn, subject string, req events.Variant, hdr nats.Header) (events.Variant, error) {
	body, err := events.Marshal(req)
	if err != nil {
		return nil, err
	}
	h := nats.Header{}
	maps.Copy(h, hdr)
	h.Set(events.HeaderAcceptChunks, "1")
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, nc.Opts.Timeout)
		defer cancel()
	}
	var reply events.Variant
	err = whileNoResponders(ctx, subject, func() error {
		var err error
		reply, err = requestChunks(ctx, nc, subject, &nats.Msg{Subject: subject, Data: body, Header: h})
		return err
	})
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, transportError(subject, err)
		}
		return nil, err
	}
	return reply, nil
}

// requestChunks sends msg once, on an inbox of its own, and reassembles
// its reply. Nobody to answer is nats.ErrNoResponders; ctx's end, its
// error.
func requestChunks(ctx context.Context, nc *nats.Conn, subject string, msg *nats.Msg) (events.Variant, error) {
	inbox := nc.NewInbox()
	// Room for every chunk a reply may have: a full channel would drop
	// one, and the request would wait out its deadline for it.
	ch := make(chan *nats.Msg, MaxReplyChunks+1)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, transportError(subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }() // the connection may be closing
	msg.Reply = inbox
	if err := nc.PublishMsg(msg); err != nil {
		return nil, transportError(subject, err)
	}
	var r chunkReader
	for {
		var msg *nats.Msg
		select {
		case msg = <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if msg.Header.Get("Status") == "503" && len(msg.Data) == 0 {
			return nil, nats.ErrNoResponders
		}
		reply, err := r.add(msg)
		if err != nil {
			return nil, events.Errorf(events.CodeInvalidPayload, "reply from %s: %v", subject, err)
		}
		if reply == nil {
			continue
		}
		if err := ReplyError(reply); err != nil {
			return nil, err
		}
		return events.Unmarshal(reply.Data)
	}
}

// CallChunked is RequestChunked for a reply that must be a *T.
func CallChunked[T any, PT interface {
	*T
	events.Variant
}](ctx context.Context, nc *nats.Conn, subject string, req events.Variant, hdr nats.Header) (PT, error) {
	v, err := RequestChunked(ctx, nc, subject, req, hdr)
	if err != nil {
		return nil, err
	}
	t, ok := v.(PT)
	if !ok {
		var want PT = new(T)
		return nil, events.Errorf(events.CodeInvalidPayload, "reply from %s is %s, want %s", subject, v.VariantName(), want.VariantName())
	}
	return t, nil
}

// chunkReader reassembles one reply from the messages sent to its inbox.
type chunkReader struct {
	n, got int
	body   []byte
}

// add takes the next message of the reply. It returns the whole reply
// once it has it (a message without events.HeaderChunk is a whole reply, as is
// the last chunk with the others before it), nil while chunks are
// missing, and an error for a message that does not follow.
func (r *chunkReader) add(msg *nats.Msg) (*nats.Msg, error) {
	h := msg.Header.Get(events.HeaderChunk)
	if h == "" {
		if r.got > 0 {
			return nil, events.Errorf(events.CodeInvalidPayload, "a whole reply after chunk %d of %d", r.got, r.n)
		}
		return msg, nil
	}
	i, n, err := parseChunk(h)
	if err != nil {
		return nil, err
	}
	switch {
	case r.got == 0 && i == 1:
		r.n = n
	case n != r.n || i != r.got+1:
		return nil, events.Errorf(events.CodeInvalidPayload, "chunk %s after chunk %d of %d", h, r.got, r.n)
	}
	r.got = i
	r.body = append(r.body, msg.Data...)
	if r.got < r.n {
		return nil, nil
	}
	return &nats.Msg{Subject: msg.Subject, Data: r.body}, nil
}

// parseChunk parses a events.HeaderChunk value, "<i>/<n>" with 1 <= i <= n <=
// MaxReplyChunks.
func parseChunk(h string) (i, n int, err error) {
	is, ns, ok := strings.Cut(h, "/")
	if ok {
		i, err = strconv.Atoi(is)
	}
	if ok && err == nil {
		n, err = strconv.Atoi(ns)
	}
	if !ok || err != nil || i < 1 || i > n || n > MaxReplyChunks {
		return 0, 0, events.Errorf(events.CodeInvalidPayload, "bad %s %q", events.HeaderChunk, events.Truncate(h, 40))
	}
	return i, n, nil
}
