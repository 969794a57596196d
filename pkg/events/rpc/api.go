package rpc

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/pkg/events"
)

// RespondError answers req with err. Anything that is not an *Error is
// answered as CodeInternal with a fixed message: internals stay in the
// caller's log, which is the caller's to write.
func RespondError(req micro.Request, err error) error {
	e, body := publicError(err)
	return req.Error(string(e.Code), e.Message, body)
}

// publicError is err as a reply tells it: internal errors masked, and the
// AcpErrorResponse body.
func publicError(err error) (*events.Error, []byte) {
	e := events.AsError(err)
	if e.Code == events.CodeInternal {
		e = events.ErrInternal
	}
	body, merr := events.Marshal(e.Response())
	if merr != nil {
		body = nil
	}
	return e, body
}

// Respond answers req with v.
func Respond(req micro.Request, v events.Variant) error {
	body, err := events.Marshal(v)
	if err != nil {
		return RespondError(req, err)
	}
	return req.Respond(body)
}

// OpHandler serves one op of the request API for the namespace named by the
// request's subject (acp.api.<ns>.<op>).
type OpHandler func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error)

// ServeOp runs h for req and answers with its result or error. Internal
// errors are logged to lg in full, then masked in the reply. With nc nil it
// answers through micro, and must run in the endpoint's handler; with nc set
// it publishes the reply itself (RespondAsync), for handlers that hand
// requests to goroutines.
func ServeOp(ctx context.Context, nc *nats.Conn, lg *slog.Logger, op events.Op, h OpHandler, req micro.Request) {
	serveOp(ctx, nc, nc != nil, lg, string(op), apiNamespace, h, req)
}

// apiNamespace is the namespace an API request's subject names.
func apiNamespace(req micro.Request) (events.Namespace, error) {
	return events.NamespaceFromAPISubject(req.Subject())
}

// serveOp is ServeOp for any endpoint: namespace finds the namespace the
// handler is given, and the handler's context carries the request's
// headers (RequestHeaders). It answers through micro unless async, by
// publishing on nc otherwise; with nc set, a reply larger than one message
// carries is chunked or fails the request at once (sendReply), logged.
func serveOp(ctx context.Context, nc *nats.Conn, async bool, lg *slog.Logger, op string, namespace func(micro.Request) (events.Namespace, error), h OpHandler, req micro.Request) {
	ns, err := namespace(req)
	var resp events.Variant
	if err == nil {
		resp, err = h(context.WithValue(ctx, headersKey{}, req.Headers()), ns, req.Data())
	}
	var body []byte
	if err == nil {
		body, err = events.Marshal(resp)
	}
	if err == nil {
		if err = sendReply(nc, async, req, body); err == nil {
			return
		}
		logUnsent(lg, op, err)
		if events.AsError(err).Code != events.CodePayloadTooLarge {
			return // the transport failed: an error reply would fail too
		}
	}
	if events.AsError(err).Code == events.CodeInternal {
		lg.Error("request failed", events.LogKeyOp, op, events.LogKeyErr, err)
	}
	if async {
		_ = RespondErrorAsync(nc, req, err)
	} else {
		_ = RespondError(req, err)
	}
}

// RespondAsync answers req with v from outside its handler, after the
// handler returned: handlers that do slow work hand the request to a
// goroutine. micro's own Respond and Error must not be used there, since
// micro reads the request's error after the handler returns; this publishes
// the reply directly, bypassing micro's per-endpoint error stats.
func RespondAsync(nc *nats.Conn, req micro.Request, v events.Variant) error {
	body, err := events.Marshal(v)
	if err != nil {
		return RespondErrorAsync(nc, req, err)
	}
	return nc.PublishMsg(&nats.Msg{Subject: req.Reply(), Data: body})
}

// RespondErrorAsync is RespondError from outside the handler (see
// RespondAsync).
func RespondErrorAsync(nc *nats.Conn, req micro.Request, err error) error {
	e, body := publicError(err)
	return nc.PublishMsg(&nats.Msg{
		Subject: req.Reply(),
		Data:    body,
		Header: nats.Header{
			micro.ErrorCodeHeader: []string{string(e.Code)},
			micro.ErrorHeader:     []string{e.Message},
		},
	})
}

// ReplyError returns the *Error a reply carries, or nil when it carries none.
func ReplyError(msg *nats.Msg) error {
	code := msg.Header.Get(micro.ErrorCodeHeader)
	if code == "" {
		return nil
	}
	if er, err := events.Decode[events.AcpErrorResponse](msg.Data); err == nil {
		return &events.Error{Code: events.Code(er.Code), Message: er.Message}
	}
	return &events.Error{Code: events.Code(code), Message: msg.Header.Get(micro.ErrorHeader)}
}

// Request sends req to subject and returns the decoded reply. Transport
// failures become CodeUnavailable (nobody serves the subject), CodeTimeout
// (ctx ended first) or CodePayloadTooLarge (req is larger than the server's
// max_payload); an error reply becomes its *Error.
func Request(ctx context.Context, nc *nats.Conn, subject string, req events.Variant, hdr nats.Header) (events.Variant, error) {
	body, err := events.Marshal(req)
	if err != nil {
		return nil, err
	}
	return RequestMsg(ctx, nc, &nats.Msg{Subject: subject, Data: body, Header: hdr})
}

// RequestMsg is Request for a body already encoded: a request passed on
// as it came.
func RequestMsg(ctx context.Context, nc *nats.Conn, msg *nats.Msg) (events.Variant, error) {
	var reply *nats.Msg
	err := whileNoResponders(ctx, msg.Subject, func() error {
		var err error
		reply, err = nc.RequestMsgWithContext(ctx, msg)
		return err
	})
	if err != nil {
		return nil, transportError(msg.Subject, err)
	}
	if err := ReplyError(reply); err != nil {
		return nil, err
	}
	return events.Unmarshal(reply.Data)
}

// Call is Request for a reply that must be a *T.
func Call[T any, PT interface {
	*T
	events.Variant
}](ctx context.Context, nc *nats.Conn, subject string, req events.Variant, hdr nats.Header) (PT, error) {
	v, err := Request(ctx, nc, subject, req, hdr)
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

// CallAgain is Call for an operation that, done twice, does what doing it
// once does (an open, a read, a delete, a keyed prompt's acceptance). Each
// attempt is bounded by attempt; one whose answer never came (timeout: the
// request or its reply was lost with a NATS node, or the replica that held
// it died), or that failed with one of the codes again, is sent again
// after a pause, until ctx ends. A caller in flight across a fault gets
// its answer, not a wait for its whole deadline.
func CallAgain[T any, PT interface {
	*T
	events.Variant
}](ctx context.Context, nc *nats.Conn, subject string, req events.Variant, hdr nats.Header, attempt time.Duration, again ...events.Code) (PT, error) {
	pause := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		v, err := Call[T, PT](actx, nc, subject, req, hdr)
		cancel()
		if err == nil {
			return v, nil
		}
		if code := events.AsError(err).Code; code != events.CodeTimeout && !slices.Contains(again, code) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, events.Errorf(events.CodeTimeout, "no answer from %s in time: %v", subject, err)
		}
		select {
		case <-ctx.Done():
			return nil, events.Errorf(events.CodeTimeout, "no answer from %s in time: %v", subject, err)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// NoRespondersGrace is how long a request of the API (events.IsAPISubject)
// that reached no service is sent again before it is CodeUnavailable. No
// responders is the server's word that nobody received the request, so
// sending it again is safe for any operation; and for a subject a pool of
// replicas serves, it is what a caller sees for a moment while the pool
// changes: a service ready on its own node whose subscription is not yet
// known across the cluster's routes, or its one replica restarting. A
// request to one instance's subject (a runner, a session replica) is
// unavailable at once: there, nobody answering means that instance is
// gone, which its caller acts on.
const NoRespondersGrace = 2 * time.Second

// whileNoResponders calls send until it returns anything but
// nats.ErrNoResponders, for at most NoRespondersGrace or until ctx ends,
// with a growing pause between the calls: for an API subject; for another,
// once.
func whileNoResponders(ctx context.Context, subject string, send func() error) error {
	if !events.IsAPISubject(subject) {
		return send()
	}
	deadline := time.Now().Add(NoRespondersGrace)
	pause := 20 * time.Millisecond
	for {
		err := send()
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().Add(pause).After(deadline) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

func transportError(subject string, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return events.Errorf(events.CodeUnavailable, "no service answers %s", subject)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return events.Errorf(events.CodeTimeout, "no reply from %s in time", subject)
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, nats.ErrMaxPayload):
		// Too large for the transport, now and on every retry: never
		// unavailable, which tells the caller to try again.
		return events.Errorf(events.CodePayloadTooLarge, "the request to %s is larger than the NATS server's max_payload", subject)
	default:
		return events.Errorf(events.CodeUnavailable, "request %s: %v", subject, err)
	}
}
