package gateway

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"skein.dev/pkg/events"
)

// Defaults of Config, as set by RegisterFlags. The prompt's limits (bytes,
// blocks) have one owner, the session service (session.max-prompt-bytes,
// session.max-prompt-blocks), which every prompt reaches, from HTTP or NATS:
// the gateway checks a prompt's shape and bounds its body, nothing more.
const (
	DefaultAddr = ":8080"
	// DefaultMaxBodyBytes is a prompt's content and room for its JSON
	// envelope (the idempotency key, the field names).
	DefaultMaxBodyBytes       = events.DefaultMaxPromptBytes + 64<<10
	DefaultRequestTimeout     = 2 * time.Minute
	DefaultKeepalive          = 15 * time.Second
	DefaultStreamBuffer       = 1024
	DefaultStreamBufferBytes  = 64 << 20
	DefaultStreamWriteTimeout = 30 * time.Second
	DefaultBackfillPage       = 1000
	DefaultShutdownTimeout    = 10 * time.Second
)

// Config configures a Gateway. The zero value is not valid: start from the
// defaults RegisterFlags installs.
type Config struct {
	// Addr is the TCP address the HTTP server listens on. "127.0.0.1:0"
	// picks a free port; Gateway.Addr reports it.
	Addr string
	// MaxBodyBytes bounds every request body. A larger one is
	// payload_too_large and never reaches NATS.
	MaxBodyBytes int64
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
	// ShutdownTimeout bounds how long Run waits for in-flight requests
	// (prompts, mostly) once its context is done.
	ShutdownTimeout time.Duration
}

// RegisterFlags registers the configuration in fs under "gateway." names
// and sets the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "gateway.http-addr", DefaultAddr, "HTTP listen address of the gateway")
	fs.Int64Var(&c.MaxBodyBytes, "gateway.max-body-bytes", DefaultMaxBodyBytes, "maximum size of a request body in bytes")
	fs.DurationVar(&c.RequestTimeout, "gateway.request-timeout", DefaultRequestTimeout, "deadline of request-API calls (a prompt's acceptance, not its turn)")
	fs.DurationVar(&c.Keepalive, "gateway.sse-keepalive", DefaultKeepalive, "interval of keepalive comments on an idle event stream")
	fs.IntVar(&c.StreamBuffer, "gateway.sse-buffer", DefaultStreamBuffer, "live messages buffered per event stream before a slow client is cut off")
	fs.Int64Var(&c.StreamBufferBytes, "gateway.sse-buffer-bytes", DefaultStreamBufferBytes, "payload bytes buffered per event stream before a slow client is cut off")
	fs.DurationVar(&c.StreamWriteTimeout, "gateway.sse-write-timeout", DefaultStreamWriteTimeout, "deadline of one write to an event stream client")
	fs.IntVar(&c.BackfillPage, "gateway.sse-backfill-page", DefaultBackfillPage, fmt.Sprintf("history page size an event stream reads to catch up (at most %d)", events.MaxHistoryLimit))
	fs.DurationVar(&c.ShutdownTimeout, "gateway.shutdown-timeout", DefaultShutdownTimeout, "how long to wait for in-flight requests on shutdown")
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
	return errors.Join(errs...)
}

// promptLimits returns the limits the gateway checks a prompt against:
// its body's, no others. How large a prompt may be is the session
// service's to say.
func (c *Config) promptLimits() events.PromptLimits {
	return events.PromptLimits{MaxBytes: int(c.MaxBodyBytes), MaxBlocks: math.MaxInt}
}
