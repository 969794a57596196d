package gateway

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/webhook"
)

// Defaults of Config, as set by RegisterFlags. The prompt's limits (bytes,
// blocks) have one owner, the session service (session.max-prompt-bytes,
// session.max-prompt-blocks), which every prompt reaches, from HTTP or NATS:
// the gateway checks a prompt's shape and bounds its body, nothing more.
const (
	DefaultAddr = ":8080"
	// DefaultMaxPromptBodyBytes is a prompt's content and room for its
	// JSON envelope (the idempotency key, the field names).
	DefaultMaxPromptBodyBytes = events.DefaultMaxPromptBytes + 64<<10
	// DefaultMaxBodyBytes bounds the body of every other route: an open's
	// settings, an answer, a title.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxHeaderBytes bounds a request's line and headers together.
	DefaultMaxHeaderBytes    = 32 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	// Per principal: requests a second (and the burst above it), event
	// streams open at once, prompts waiting for their turn at once.
	DefaultRateLimit          = 500
	DefaultRateBurst          = 1000
	DefaultMaxStreams         = 256
	DefaultMaxWaitingPrompts  = 256
	DefaultRequestTimeout     = 2 * time.Minute
	DefaultKeepalive          = 15 * time.Second
	DefaultStreamBuffer       = 1024
	DefaultStreamBufferBytes  = 64 << 20
	DefaultStreamWriteTimeout = 30 * time.Second
	DefaultBackfillPage       = 1000
	DefaultShutdownTimeout    = 10 * time.Second
	// Per client address: connections open at once, the time a body may
	// take to arrive, and the failed authentications let through before
	// the next ones wait, up to the longest wait.
	DefaultMaxConnsPerAddr  = 256
	DefaultBodyReadTimeout  = 30 * time.Second
	DefaultAuthFailuresFree = 5
	DefaultAuthBackoffMax   = 30 * time.Second
	// The ACP endpoint (/acp): the connections a principal may hold open
	// at once, and how long a Streamable HTTP connection lives without a
	// receiver or a message (a WebSocket's, without an answered ping).
	DefaultACPMaxConns    = 32
	DefaultACPIdleTimeout = 5 * time.Minute
	// DefaultReadyMaxLoad is the percent of the descriptor or thread limit
	// past which /readyz says unready.
	DefaultReadyMaxLoad = 90
)

// Config configures a Gateway. The zero value is not valid: start from the
// defaults RegisterFlags installs.
type Config struct {
	// Addr is the TCP address the HTTP server listens on. "127.0.0.1:0"
	// picks a free port; Gateway.Addr reports it.
	Addr string
	// Listener, when set, is what Run serves on instead of listening on
	// Addr: bound by a caller that must hold its port before anything
	// else can take it (skein dev, before any adapter starts). Run closes
	// it.
	Listener net.Listener
	// MaxPromptBodyBytes bounds a prompt's body, and MaxBodyBytes every
	// other route's. A larger body is payload_too_large, read no further
	// than the cap, and never reaches NATS.
	MaxPromptBodyBytes int64
	MaxBodyBytes       int64
	// MaxHeaderBytes bounds a request's line (its URL included) and
	// headers together: more is payload_too_large.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds reading a request's headers, and
	// IdleTimeout how long a kept-alive connection may wait for its next
	// request. There is no overall read or write timeout: prompts block
	// through a turn and event streams last as long as the client stays.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// RateLimit is a principal's requests a second, RateBurst how many it
	// may make at once above that; MaxStreams and MaxWaitingPrompts bound
	// the event streams (SSE and watch) and the prompts waiting for their
	// turn it holds at once. Over any is rate_limited, with Retry-After.
	RateLimit         float64
	RateBurst         int
	MaxStreams        int
	MaxWaitingPrompts int
	// RequestTimeout bounds every request-API call, the prompt's
	// acceptance included. The wait for a prompt's turn to end has no
	// deadline: it lasts as long as the HTTP client waits.
	RequestTimeout time.Duration
	// Keepalive is the interval of the ": keepalive" comments on an idle
	// event stream, so proxies do not close it.
	Keepalive time.Duration
	// StreamBuffer is how many live messages one event stream may hold
	// while its client is slow. Past it the stream ends with an error event
	// and the client resumes with Last-Event-ID.
	StreamBuffer int
	// StreamBufferBytes bounds the payload bytes of those messages, since
	// one message may be as large as the NATS server allows. It must be
	// above the server's max_payload.
	StreamBufferBytes int64
	// StreamWriteTimeout bounds one write to an event stream's client.
	StreamWriteTimeout time.Duration
	// BackfillPage is the page size of the history reads an event stream
	// makes to catch up: at most events.MaxHistoryLimit, the largest page
	// a history service serves.
	BackfillPage int
	// MaxConnsPerAddr bounds the connections one client address holds
	// open at once (0: no bound; behind a proxy every client has its
	// address, so bound them there). A connection past it is closed as
	// it is accepted.
	MaxConnsPerAddr int
	// BodyReadTimeout bounds reading a request's body: a client that
	// sends it a byte at a time is cut off.
	BodyReadTimeout time.Duration
	// AuthFailuresFree is how many requests with no valid token an
	// address may make before its next ones are refused unread
	// (rate_limited, Retry-After) for a wait that doubles with each
	// further failure, up to AuthBackoffMax.
	AuthFailuresFree int
	AuthBackoffMax   time.Duration
	// ShutdownTimeout bounds how long Run waits for in-flight requests
	// (prompts, mostly) once its context is done.
	ShutdownTimeout time.Duration
	// Auth is the bearer tokens the gateway accepts (auth.go).
	Auth AuthConfig
	// ReadyMaxLoad is the percent of the process's descriptor limit
	// (RLIMIT_NOFILE) or thread limit at which /readyz says unready
	// (procload.go); 0 checks neither.
	ReadyMaxLoad int
	// ACPMaxConns bounds the ACP connections (/acp, both profiles) a
	// principal holds open at once: one more is rate_limited.
	ACPMaxConns int
	// ACPIdleTimeout ends a Streamable HTTP ACP connection that has had
	// no stream receiver and no message for that long, and a WebSocket
	// whose ping is not answered within it.
	ACPIdleTimeout time.Duration
	// WebhookAllow are the ranges webhooks may reach although private,
	// loopback or link-local (webhooks.go); the notify service, which
	// connects, checks the same with its own --notify.webhook-allow.
	WebhookAllow []netip.Prefix
}

// RegisterFlags registers the configuration in fs under "gateway." names
// and sets the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "gateway.http-addr", DefaultAddr, "HTTP listen address of the gateway")
	fs.Int64Var(&c.MaxPromptBodyBytes, "gateway.max-prompt-body-bytes", DefaultMaxPromptBodyBytes, "maximum size of a prompt's request body in bytes")
	fs.Int64Var(&c.MaxBodyBytes, "gateway.max-body-bytes", DefaultMaxBodyBytes, "maximum size of any other request body in bytes")
	fs.IntVar(&c.MaxHeaderBytes, "gateway.max-header-bytes", DefaultMaxHeaderBytes, "maximum size of a request's line and headers in bytes")
	fs.DurationVar(&c.ReadHeaderTimeout, "gateway.read-header-timeout", DefaultReadHeaderTimeout, "deadline of reading a request's headers")
	fs.DurationVar(&c.IdleTimeout, "gateway.idle-timeout", DefaultIdleTimeout, "how long an idle kept-alive connection stays open")
	fs.Float64Var(&c.RateLimit, "gateway.rate-limit", DefaultRateLimit, "requests a second a principal may make")
	fs.IntVar(&c.RateBurst, "gateway.rate-burst", DefaultRateBurst, "requests a principal may make at once above its rate")
	fs.IntVar(&c.MaxStreams, "gateway.max-streams", DefaultMaxStreams, "event streams (SSE and watch) a principal may hold open at once")
	fs.IntVar(&c.MaxWaitingPrompts, "gateway.max-waiting-prompts", DefaultMaxWaitingPrompts, "prompts a principal may have waiting for their turn at once")
	fs.DurationVar(&c.RequestTimeout, "gateway.request-timeout", DefaultRequestTimeout, "deadline of request-API calls (a prompt's acceptance, not its turn)")
	fs.DurationVar(&c.Keepalive, "gateway.sse-keepalive", DefaultKeepalive, "interval of keepalive comments on an idle event stream")
	fs.IntVar(&c.StreamBuffer, "gateway.sse-buffer", DefaultStreamBuffer, "live messages buffered per event stream before a slow client is cut off")
	fs.Int64Var(&c.StreamBufferBytes, "gateway.sse-buffer-bytes", DefaultStreamBufferBytes, "payload bytes buffered per event stream before a slow client is cut off")
	fs.DurationVar(&c.StreamWriteTimeout, "gateway.sse-write-timeout", DefaultStreamWriteTimeout, "deadline of one write to an event stream client")
	fs.IntVar(&c.BackfillPage, "gateway.sse-backfill-page", DefaultBackfillPage, fmt.Sprintf("history page size an event stream reads to catch up (at most %d)", events.MaxHistoryLimit))
	fs.IntVar(&c.MaxConnsPerAddr, "gateway.max-conns-per-addr", DefaultMaxConnsPerAddr, "connections one client address may hold open at once (0: no bound)")
	fs.DurationVar(&c.BodyReadTimeout, "gateway.body-read-timeout", DefaultBodyReadTimeout, "deadline of reading a request's body")
	fs.IntVar(&c.AuthFailuresFree, "gateway.auth-failures-free", DefaultAuthFailuresFree, "requests without a valid token an address may make before it must wait")
	fs.DurationVar(&c.AuthBackoffMax, "gateway.auth-backoff-max", DefaultAuthBackoffMax, "longest wait of an address whose requests keep failing authentication")
	fs.DurationVar(&c.ShutdownTimeout, "gateway.shutdown-timeout", DefaultShutdownTimeout, "how long to wait for in-flight requests on shutdown")
	fs.IntVar(&c.ReadyMaxLoad, "gateway.ready-max-load", DefaultReadyMaxLoad, "percent of the process's descriptor limit (RLIMIT_NOFILE) or thread limit at which /readyz says unready (0: never)")
	fs.IntVar(&c.ACPMaxConns, "gateway.acp-max-conns", DefaultACPMaxConns, "ACP connections (/acp) a principal may hold open at once")
	fs.DurationVar(&c.ACPIdleTimeout, "gateway.acp-idle-timeout", DefaultACPIdleTimeout, "how long an ACP connection over HTTP lives without a stream receiver or a message, and how long a WebSocket's ping may go unanswered")
	fs.Func("gateway.webhook-allow", "CIDRs, comma-separated, that a webhook URL may resolve to although private, loopback or link-local (repeatable; skein dev allows loopback)", func(v string) error {
		p, err := webhook.ParseAllow(v)
		c.WebhookAllow = append(c.WebhookAllow, p...)
		return err
	})
	c.Auth.RegisterFlags(fs)
}

// DefaultConfig returns the configuration RegisterFlags installs before
// any flag is parsed.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("gateway", flag.ContinueOnError))
	return c
}

// Validate reports every invalid field.
func (c *Config) Validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("gateway.http-addr must not be empty"))
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("gateway.max-body-bytes must be positive, got %d", c.MaxBodyBytes))
	}
	if c.MaxPromptBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("gateway.max-prompt-body-bytes must be positive, got %d", c.MaxPromptBodyBytes))
	}
	if c.MaxHeaderBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("gateway.max-header-bytes must be at least 1024, got %d", c.MaxHeaderBytes))
	}
	if c.ReadHeaderTimeout <= 0 {
		errs = append(errs, fmt.Errorf("gateway.read-header-timeout must be positive, got %v", c.ReadHeaderTimeout))
	}
	if c.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("gateway.idle-timeout must be positive, got %v", c.IdleTimeout))
	}
	if c.RateLimit <= 0 || c.RateBurst <= 0 {
		errs = append(errs, fmt.Errorf("gateway.rate-limit and gateway.rate-burst must be positive, got %v and %d", c.RateLimit, c.RateBurst))
	}
	if c.MaxStreams <= 0 || c.MaxWaitingPrompts <= 0 {
		errs = append(errs, fmt.Errorf("gateway.max-streams and gateway.max-waiting-prompts must be positive, got %d and %d", c.MaxStreams, c.MaxWaitingPrompts))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("gateway.request-timeout must be positive, got %v", c.RequestTimeout))
	}
	if c.Keepalive <= 0 {
		errs = append(errs, fmt.Errorf("gateway.sse-keepalive must be positive, got %v", c.Keepalive))
	}
	if c.StreamBuffer <= 0 {
		errs = append(errs, fmt.Errorf("gateway.sse-buffer must be positive, got %d", c.StreamBuffer))
	}
	if c.StreamBufferBytes <= 0 {
		errs = append(errs, fmt.Errorf("gateway.sse-buffer-bytes must be positive, got %d", c.StreamBufferBytes))
	}
	if c.StreamWriteTimeout <= 0 {
		errs = append(errs, fmt.Errorf("gateway.sse-write-timeout must be positive, got %v", c.StreamWriteTimeout))
	}
	if c.BackfillPage <= 0 || c.BackfillPage > events.MaxHistoryLimit {
		errs = append(errs, fmt.Errorf("gateway.sse-backfill-page must be in [1, %d] (the largest history page), got %d", events.MaxHistoryLimit, c.BackfillPage))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("gateway.shutdown-timeout must be positive, got %v", c.ShutdownTimeout))
	}
	if c.MaxConnsPerAddr < 0 {
		errs = append(errs, fmt.Errorf("gateway.max-conns-per-addr must not be negative, got %d", c.MaxConnsPerAddr))
	}
	if c.BodyReadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("gateway.body-read-timeout must be positive, got %v", c.BodyReadTimeout))
	}
	if c.AuthFailuresFree < 0 || c.AuthBackoffMax <= 0 {
		errs = append(errs, fmt.Errorf("gateway.auth-failures-free must not be negative and gateway.auth-backoff-max must be positive, got %d and %v", c.AuthFailuresFree, c.AuthBackoffMax))
	}
	if c.ReadyMaxLoad < 0 || c.ReadyMaxLoad > 100 {
		errs = append(errs, fmt.Errorf("gateway.ready-max-load must be a percent in [0, 100], got %d", c.ReadyMaxLoad))
	}
	if c.ACPMaxConns <= 0 {
		errs = append(errs, fmt.Errorf("gateway.acp-max-conns must be positive, got %d", c.ACPMaxConns))
	}
	if c.ACPIdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("gateway.acp-idle-timeout must be positive, got %v", c.ACPIdleTimeout))
	}
	errs = append(errs, c.Auth.validate()...)
	return errors.Join(errs...)
}

// promptLimits returns the limits the gateway checks a prompt against:
// its body's, no others. How large a prompt may be is the session
// service's to say.
func (c *Config) promptLimits() events.PromptLimits {
	return events.PromptLimits{MaxBytes: int(c.MaxPromptBodyBytes), MaxBlocks: math.MaxInt}
}
