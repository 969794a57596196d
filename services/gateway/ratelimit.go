package gateway

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"skein.dev/pkg/events"
)

// Per-principal limits: a request rate (a token bucket), and caps on what a
// principal holds open at once, event streams (SSE and watch) and prompts
// waiting for their turn. Over any of them a request is 429 rate_limited
// with Retry-After, and nothing else happens.

// holdKind names what a request holds open while it runs.
type holdKind int

const (
	holdNone holdKind = iota
	holdStream
	holdPrompt
)

// holds says which routes hold something open.
var holds = map[string]holdKind{
	"/v1/sessions/{id}/events": holdStream,
	"/v1/sessions/{id}/watch":  holdStream,
	"/v1/sessions/{id}/prompt": holdPrompt,
}

// probes are the routes no limit applies to: load balancers and
// orchestrators poll them.
var probes = map[string]bool{"/healthz": true, "/readyz": true}

// limitKey names whose limits a request counts against: its principal's,
// as authentication names it, and until then its namespace's.
func (g *Gateway) limitKey(r *http.Request) string {
	if p := principalOf(r); p != "" {
		return "principal " + p // a space: never a namespace
	}
	ns, err := g.namespace(r)
	if err != nil {
		return ""
	}
	return string(ns)
}

// holdRetry is the Retry-After of a refusal for too much held open: the
// time a client should wait before trying again, not a promise.
const holdRetry = time.Second

// limiter keeps every principal's limits. Principals are few (they come
// from the tokens file), so their entries are kept.
type limiter struct {
	rate       rate.Limit
	burst      int
	maxStreams int
	maxPrompts int

	mu  sync.Mutex
	per map[string]*principalLimits
}

type principalLimits struct {
	bucket  *rate.Limiter
	streams int
	prompts int
}

func newLimiter(c *Config) *limiter {
	return &limiter{
		rate: rate.Limit(c.RateLimit), burst: c.RateBurst,
		maxStreams: c.MaxStreams, maxPrompts: c.MaxWaitingPrompts,
		per: map[string]*principalLimits{},
	}
}

func (l *limiter) of(key string) *principalLimits {
	p := l.per[key]
	if p == nil {
		p = &principalLimits{bucket: rate.NewLimiter(l.rate, l.burst)}
		l.per[key] = p
	}
	return p
}

// admit takes one request of key's: it reports whether the request may go
// on, and if not, how long to wait. A request that holds something open
// also takes a place of its kind, which release gives back.
func (l *limiter) admit(key string, kind holdKind, now time.Time) (release func(), wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.of(key)
	held, max := &p.streams, l.maxStreams
	if kind == holdPrompt {
		held, max = &p.prompts, l.maxPrompts
	}
	if kind != holdNone && *held >= max {
		return nil, holdRetry, false
	}
	r := p.bucket.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, d, false
	}
	if kind == holdNone {
		return func() {}, 0, true
	}
	*held++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			*held--
		})
	}, 0, true
}

// rateLimited answers a refused request: Retry-After in whole seconds,
// rounded up, and the typed error.
func rateLimited(w http.ResponseWriter, wait time.Duration) error {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	return events.Errorf(events.CodeRateLimited, "too many requests; retry after %v", wait.Round(time.Millisecond))
}
