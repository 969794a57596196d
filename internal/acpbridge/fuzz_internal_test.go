package acpbridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"testing"
)

// recorder is a transport that keeps what the bridge writes.
type recorder struct {
	mu  sync.Mutex
	out [][]byte
}

func (r *recorder) Read(context.Context) ([]byte, error) { select {} }

func (r *recorder) Write(_ context.Context, msg []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out = append(r.out, append([]byte(nil), msg...))
	return nil
}

// FuzzDispatch feeds the bridge whatever a client may send: every message
// it answers is one JSON-RPC 2.0 message, and nothing panics. The API it
// calls is not there (a closed port), so every method fails as a refused
// connection would.
func FuzzDispatch(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`,
		`{"jsonrpc":"2.0","id":"x","method":"session/new","params":{"cwd":"/","mcpServers":[],"_meta":{"skein":{"agent":1}}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s","prompt":"no"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"session/load","params":{"sessionId":"s","_meta":{"skein":{"after":-1}}}}`,
		`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}`,
		`{"jsonrpc":"2.0","id":4,"result":{"outcome":{"outcome":"selected","optionId":"a"}}}`,
		`{"jsonrpc":"1.0","id":5,"method":"x"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"initialize"}]`,
		`{"jsonrpc":"2.0","id":null,"method":"session/list","params":null}`,
		`{`, `null`, `"x"`, `{"jsonrpc":"2.0","id":{},"method":"a"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := &recorder{}
		c := newConn(Config{BaseURL: "http://127.0.0.1:1", Header: http.Header{}, Agent: "a", Logger: slog.New(slog.DiscardHandler)}, rec)
		ctx, cancel := context.WithCancel(context.Background())
		c.life = ctx
		c.dispatch(ctx, data)
		c.wg.Wait()
		cancel()
		c.stopAll()
		for _, m := range rec.out {
			var msg struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   *rpcError       `json:"error"`
			}
			if err := json.Unmarshal(m, &msg); err != nil || msg.JSONRPC != "2.0" {
				t.Fatalf("the bridge wrote %s (%v)", m, err)
			}
		}
	})
}
