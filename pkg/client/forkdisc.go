package client

import (
	"context"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// Discard deletes session sid if it is idle and holds no user message,
// as a client that opened it eagerly and did not use it does; a session in
// use is events.CodeSessionNotEmpty, and nothing changes. Discarding a
// missing session succeeds.
func (c *Client) Discard(ctx context.Context, sid string) error {
	_, err := rpc.Call[events.DiscardSessionResponse](ctx, c.nc, c.subject(events.OpDiscardSession), &events.DiscardSessionRequest{SessionID: &sid}, nil)
	return err
}

// Fork makes newSID a fork of session sid at its log sequence at (0: its
// newest record): a new session with sid's agent and options, whose first
// prompt brings the agent sid's history up to that sequence. sid is not
// changed.
func (c *Client) Fork(ctx context.Context, sid, newSID string, at uint64) (*events.ForkSessionResponse, error) {
	req := &events.ForkSessionRequest{SessionID: &sid, NewSessionID: newSID}
	if at > 0 {
		req.AtSequence = &at
	}
	return rpc.Call[events.ForkSessionResponse](ctx, c.nc, c.subject(events.OpForkSession), req, nil)
}

// Directories lists the folders under path in the namespace's workspace
// ("": the namespace's own directories under the workspace roots), to
// choose a session's cwd from.
func (c *Client) Directories(ctx context.Context, path string) (*events.ListDirectoriesResponse, error) {
	req := &events.ListDirectoriesRequest{}
	if path != "" {
		req.Path = &path
	}
	return rpc.Call[events.ListDirectoriesResponse](ctx, c.nc, c.subject(events.OpListDirectories), req, nil)
}
