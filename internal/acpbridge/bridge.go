package acpbridge

import (
	"context"
	"log/slog"
	"net/http"
)

// Config is what one bridge connection needs.
type Config struct {
	// BaseURL is the gateway's URL, such as http://127.0.0.1:8080.
	BaseURL string
	// Header is sent on every API request: Authorization, and
	// X-Skein-Namespace when the caller picks one of its token's.
	Header http.Header
	// Client sends the API requests; nil is http.DefaultClient. The gateway
	// gives one that serves them in process.
	Client *http.Client
	// Agent is the agent of a session/new that names none (_meta.skein.agent);
	// empty: the first installed agent the runners offer.
	Agent string
	// Policy is the permission policy of a session/new that names none:
	// ask (the default), allow_all or reject_all.
	Policy string
	// Logger logs what the client is not told; nil discards.
	Logger *slog.Logger
}

// Serve serves one ACP connection on t until the client goes (t's Read
// fails) or ctx ends. It returns once every goroutine it started has
// ended. Sessions outlive it: a turn it started runs on.
func Serve(ctx context.Context, cfg Config, t Transport) error {
	c := newConn(cfg, t)
	return c.serve(ctx)
}
