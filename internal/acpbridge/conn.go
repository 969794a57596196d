package acpbridge

import (
	"context"
	"encoding/json"
)

// conn is one ACP connection. (A first cut: every request is answered
// method-not-found; the methods follow.)
type conn struct {
	cfg Config
	t   Transport
}

func newConn(cfg Config, t Transport) *conn { return &conn{cfg: cfg, t: t} }

func (c *conn) serve(ctx context.Context) error {
	for {
		msg, err := c.t.Read(ctx)
		if err != nil {
			return err
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(msg, &m) != nil || m.ID == nil || m.Method == "" {
			continue
		}
		resp, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		if err := c.t.Write(ctx, resp); err != nil {
			return err
		}
	}
}
