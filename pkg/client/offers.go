package client

import (
	"context"
	"encoding/json"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// Commands returns the commands (ACP's slash commands and skills) the
// session's agent last announced, as a JSON array of ACP AvailableCommand
// objects, each exactly as the agent wrote it: [] when it announced none.
// No adapter starts or is restored. The session's usage and its last
// turn's timing are in Session's answer (Usage, LastTurnTiming).
func (c *Client) Commands(ctx context.Context, sid string) (json.RawMessage, error) {
	resp, err := rpc.Call[events.SessionCommandsResponse](ctx, c.nc, c.subject(events.OpGetSessionCommands), &events.GetSessionCommandsRequest{SessionID: &sid}, nil)
	if err != nil {
		return nil, err
	}
	if len(resp.Commands) == 0 {
		return json.RawMessage(`[]`), nil
	}
	return json.RawMessage(resp.Commands), nil
}
