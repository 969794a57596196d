package gateway

import (
	"net/http"
	"time"
)

// OnStreamSubscribed makes every event stream of g call fn once it is
// subscribed and before it reads history. Call it before g runs.
func OnStreamSubscribed(g *Gateway, fn func()) { g.streamSubscribed = fn }

// SetAuthBackoffFirst sets the wait after an address's first failure past
// the free ones, so that a test can hold an address waiting without
// waiting out the doublings first. Call it before g runs.
func SetAuthBackoffFirst(g *Gateway, d time.Duration) { g.backoff.first = d }

// InProcessClient returns a client that serves each request with g's
// handler in process, as the ACP bridge's API calls are served, from
// remoteAddr.
func InProcessClient(g *Gateway, remoteAddr string) *http.Client {
	return &http.Client{Transport: &inProcess{h: g.handler, work: &g.acp.work, lg: g.lg, remoteAddr: remoteAddr}}
}
