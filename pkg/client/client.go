// Package client is the Go client of Skein's NATS API, for services that
// talk to Skein directly rather than through the HTTP gateway.
//
// A Client addresses one namespace. Requests travel as msgpack over the
// nats micro endpoints acp.api.<ns>.<op>; reads come from the history
// service and the log, never from an adapter. Waiting is a read of the
// log: Prompt sends the prompt, gets its acceptance at once, then reads
// the session's log for the turn's end, so no request is held open across
// a turn. Subscribe and Follow subscribe to the stream's RePublish first,
// then read what they missed from history, and deduplicate by (session,
// sequence), so a subscriber sees every durable event exactly once, in
// order, however it joined.
//
// Every error a request can end with is an *events.Error whose code
// matches the registry's sentinels with errors.Is:
//
//	if errors.Is(err, events.ErrSessionNotFound) { ... }
package client

import (
	"context"
	"encoding/json"
	"iter"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// Client talks to Skein in one namespace over a NATS connection it does
// not own. It is safe for concurrent use.
type Client struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	ns       events.Namespace
	pageSize uint32
}

// Option configures a Client.
type Option func(*Client) error

// WithNamespace addresses ns instead of events.DefaultNamespace.
func WithNamespace(ns string) Option {
	return func(c *Client) error {
		n, err := events.ParseNamespace(ns)
		c.ns = n
		return err
	}
}

// WithPageSize sets how many events or sessions each read behind an
// iterator asks for (default 100, at most 10,000).
func WithPageSize(n uint32) Option {
	return func(c *Client) error {
		if n == 0 || n > events.MaxHistoryLimit {
			return events.Errorf(events.CodeInvalidRequest, "page size must be between 1 and %d, got %d", events.MaxHistoryLimit, n)
		}
		c.pageSize = n
		return nil
	}
}

// New returns a Client on nc.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, js: js, ns: events.DefaultNamespace, pageSize: 100}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Namespace is the namespace c addresses.
func (c *Client) Namespace() events.Namespace { return c.ns }

func (c *Client) subject(op events.Op) string { return events.APISubject(c.ns, op) }

// Open opens session sid with req (its SessionID is set to sid), or does
// nothing when it is open already with the same settings.
func (c *Client) Open(ctx context.Context, sid string, req events.AcpOpenSessionRequest) error {
	req.SessionID = &sid
	_, err := rpc.Call[events.AcpOpenSessionResponse](ctx, c.nc, c.subject(events.OpOpenSession), &req, nil)
	return err
}

// Session returns what Skein knows of session sid. No adapter starts.
func (c *Client) Session(ctx context.Context, sid string) (*events.AcpDurableSessionInfo, error) {
	resp, err := rpc.Call[events.AcpGetDurableSessionResponse](ctx, c.nc, c.subject(events.OpGetSession), &events.AcpGetDurableSessionRequest{SessionID: &sid}, nil)
	if err != nil {
		return nil, err
	}
	return &resp.Session, nil
}

// PromptOption configures one prompt.
type PromptOption func(*events.AcpPromptRequest)

// WithIdempotencyKey makes the prompt safe to send again: a second prompt
// with the same key and content gets the first one's result.
func WithIdempotencyKey(key string) PromptOption {
	return func(r *events.AcpPromptRequest) { r.IdempotencyKey = &key }
}

// WithQueue queues the prompt when the session runs a turn (or prompts
// already wait), rather than failing session_busy: Prompt then returns
// once its own turn, which starts when those before it end, has ended.
func WithQueue() PromptOption {
	return func(r *events.AcpPromptRequest) { r.Queue = true }
}

// Withdraw takes queue entry qid out of session sid's queue before it
// runs; the queue itself is the session's (Session(…).Queue).
func (c *Client) Withdraw(ctx context.Context, sid, qid string) error {
	_, err := rpc.Call[events.PromptWithdrawn](ctx, c.nc, c.subject(events.OpWithdrawPrompt), &events.WithdrawPromptRequest{SessionID: &sid, QueueID: qid}, nil)
	return err
}

// Prompt sends content (an ACP content block array) to session sid and
// returns the turn's result once it has ended: the acceptance comes back
// at once, and the end is read from the log. ctx bounds the whole wait.
func (c *Client) Prompt(ctx context.Context, sid string, content json.RawMessage, opts ...PromptOption) (*events.AcpPromptResponse, error) {
	req := &events.AcpPromptRequest{SessionID: &sid, Content: events.JSON(content)}
	for _, o := range opts {
		o(req)
	}
	return turnwait.Prompt(ctx, c.js, c.ns, req)
}

// PromptText is Prompt with one text block.
func (c *Client) PromptText(ctx context.Context, sid, text string, opts ...PromptOption) (*events.AcpPromptResponse, error) {
	block, err := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	if err != nil {
		return nil, err
	}
	return c.Prompt(ctx, sid, block, opts...)
}

// Cancel cancels the session's running turn, and says how that went
// (events.CancelCancelled, events.CancelNoActivePrompt, ...).
func (c *Client) Cancel(ctx context.Context, sid string) (string, error) {
	resp, err := rpc.Call[events.AcpCancelPromptResponse](ctx, c.nc, c.subject(events.OpCancelPrompt), &events.AcpCancelPromptRequest{SessionID: &sid}, nil)
	if err != nil {
		return "", err
	}
	return resp.Status, nil
}

// RespondPermission answers the pending permission request requestID of
// session sid with the option optionID.
func (c *Client) RespondPermission(ctx context.Context, sid, requestID, optionID string) (*events.AcpRespondPermissionResponse, error) {
	return rpc.Call[events.AcpRespondPermissionResponse](ctx, c.nc, c.subject(events.OpRespondPermission),
		&events.AcpRespondPermissionRequest{SessionID: sid, RequestID: requestID, OptionID: optionID}, nil)
}

// RespondInput answers the pending input request requestID of session sid
// (an agent's elicitation/create) with action, events.InputAccept,
// InputDecline or InputCancel, and content, a JSON object fitting the
// agent's requested schema, with accept only (nil: none).
func (c *Client) RespondInput(ctx context.Context, sid, requestID, action string, content events.JSON) (*events.RespondInputResponse, error) {
	return rpc.Call[events.RespondInputResponse](ctx, c.nc, c.subject(events.OpRespondInput),
		&events.RespondInputRequest{SessionID: sid, RequestID: requestID, Action: action, Content: content}, nil)
}

// Unload stops the session's adapter; the next prompt restores it.
func (c *Client) Unload(ctx context.Context, sid string) error {
	_, err := rpc.Call[events.AcpUnloadSessionResponse](ctx, c.nc, c.subject(events.OpUnloadSession), &events.AcpUnloadSessionRequest{SessionID: &sid}, nil)
	return err
}

// Delete removes the session and its history for good.
func (c *Client) Delete(ctx context.Context, sid string) error {
	_, err := rpc.Call[events.AcpDeleteSessionResponse](ctx, c.nc, c.subject(events.OpDeleteSession), &events.AcpDeleteSessionRequest{SessionID: &sid}, nil)
	return err
}

// History yields the session's durable events after the sequence after
// (0: from the first), oldest first, a page per read, until the newest.
// An error ends the iteration after it is yielded.
func (c *Client) History(ctx context.Context, sid string, after uint64) iter.Seq2[*events.AcpDurableHistoryEntry, error] {
	return func(yield func(*events.AcpDurableHistoryEntry, error) bool) {
		for {
			page, err := c.readHistory(ctx, sid, &after, nil)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range page.Events {
				after = page.Events[i].Sequence
				if !yield(&page.Events[i], nil) {
					return
				}
			}
			if !page.HasMoreAfter || len(page.Events) == 0 {
				return
			}
		}
	}
}

// HistoryBackward yields the session's durable events before the sequence
// before (0: from the newest), newest first, a page per read, until the
// oldest retained.
func (c *Client) HistoryBackward(ctx context.Context, sid string, before uint64) iter.Seq2[*events.AcpDurableHistoryEntry, error] {
	return func(yield func(*events.AcpDurableHistoryEntry, error) bool) {
		var cursor *uint64
		if before != 0 {
			cursor = &before
		}
		for {
			page, err := c.readHistory(ctx, sid, nil, cursor)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := len(page.Events) - 1; i >= 0; i-- {
				if !yield(&page.Events[i], nil) {
					return
				}
			}
			if !page.HasMoreBefore || len(page.Events) == 0 {
				return
			}
			cursor = &page.Events[0].Sequence
		}
	}
}

// readHistory reads one page, which may come in chunks: one event larger
// than a NATS message carries is a page of its own.
func (c *Client) readHistory(ctx context.Context, sid string, after, before *uint64) (*events.AcpHistoryPageResponse, error) {
	limit := c.pageSize
	req := &events.AcpReadHistoryRequest{SessionID: &sid, After: after, Before: before, Limit: &limit}
	return rpc.CallChunked[events.AcpHistoryPageResponse](ctx, c.nc, c.subject(events.OpReadHistory), req, nil)
}

// Sessions yields the namespace's sessions, the most recently updated
// first, a page per read. A session updated while the iteration runs may
// move ahead of it and not be yielded; none is yielded twice.
func (c *Client) Sessions(ctx context.Context) iter.Seq2[*events.AcpDurableSessionInfo, error] {
	return func(yield func(*events.AcpDurableSessionInfo, error) bool) {
		limit := min(c.pageSize, events.MaxListLimit)
		req := &events.AcpListDurableSessionsRequest{Limit: &limit}
		for {
			page, err := rpc.Call[events.AcpListDurableSessionsResponse](ctx, c.nc, c.subject(events.OpListSessions), req, nil)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range page.Sessions {
				if !yield(&page.Sessions[i], nil) {
					return
				}
			}
			if page.NextCursor == nil {
				return
			}
			req.Cursor = page.NextCursor
		}
	}
}
