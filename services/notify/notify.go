// Package notify delivers Skein's notifications: webhooks and the
// acp.notify.<ns>.<type> messages other services read.
//
// It is driven from the log, never from memory. A durable consumer on
// ACP_LOG (derive.go) turns each record that matters (a turn's end, a
// stall, a permission or input request) into a notification, stored in
// ACP_NOTIFY on events.NotifySubject under a Nats-Msg-Id made from the
// record's sequence, so a record delivered again after a restart is not
// notified twice. Each webhook (registered by the gateway in
// ACP_WEBHOOKS) has a durable consumer of its own on ACP_NOTIFY, filtered
// to its namespace and event types (deliver.go): a notification is acked
// once the receiver answered 2xx, and otherwise comes back after an
// exponential backoff, until notify.retry-for after it was stored. So a
// restart of any service, or a receiver down for an hour, loses nothing:
// delivery is at least once, and every attempt carries the same
// webhook-id.
//
// Every connection to a receiver is checked where it is made
// (webhook.Guard.Control): a URL whose name resolves, now, to a private,
// loopback or link-local address reaches nothing, whatever it resolved to
// when the gateway registered it.
package notify

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/defaults"
	"skein.dev/internal/natsmetrics"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
	"skein.dev/pkg/events/webhook"
)

// Config configures the notify service.
type Config struct {
	Replicas int
	// Allow are the refused ranges (private, loopback, link-local) that
	// webhooks may reach all the same: --notify.webhook-allow, which must
	// agree with the gateway's --gateway.webhook-allow.
	Allow []netip.Prefix
	// RetryFor is how long after a notification was stored it is still
	// tried (24 h).
	RetryFor time.Duration
	// BackoffMin and BackoffMax bound the pause after a failed attempt: it
	// doubles from BackoffMin up to BackoffMax.
	BackoffMin, BackoffMax time.Duration
	// Timeout bounds one attempt: connection, request and answer.
	Timeout time.Duration
	// Concurrency is how many attempts of one webhook run at once.
	Concurrency int
}

// RegisterFlags registers the service's flags in fs, prefixed "notify.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("notify.webhook-allow", "CIDRs, comma-separated, that webhooks may reach although private, loopback or link-local (as --gateway.webhook-allow; skein dev allows loopback)", func(s string) error {
		p, err := webhook.ParseAllow(s)
		c.Allow = append(c.Allow, p...)
		return err
	})
	fs.DurationVar(&c.RetryFor, "notify.retry-for", 24*time.Hour, "how long a webhook notification is retried after it was stored")
	fs.DurationVar(&c.BackoffMin, "notify.backoff-min", time.Second, "the pause after a webhook's first failed attempt; it doubles after each other")
	fs.DurationVar(&c.BackoffMax, "notify.backoff-max", time.Hour, "the longest pause between two attempts of a webhook notification")
	fs.DurationVar(&c.Timeout, "notify.timeout", 10*time.Second, "how long a receiver has to answer one webhook attempt")
	fs.IntVar(&c.Concurrency, "notify.concurrency", 8, "attempts of one webhook in flight at once")
}

// DefaultConfig returns the configuration RegisterFlags installs before
// any flag is parsed.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("notify", flag.ContinueOnError))
	return c
}

// WithDefaults returns c with RegisterFlags' defaults in the fields left
// zero.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	defaults.Set(&c.RetryFor, d.RetryFor)
	defaults.Set(&c.BackoffMin, d.BackoffMin)
	defaults.Set(&c.BackoffMax, d.BackoffMax)
	defaults.Set(&c.Timeout, d.Timeout)
	defaults.Set(&c.Concurrency, d.Concurrency)
	return c
}

// Validate reports every invalid field; it changes nothing.
func (c *Config) Validate() error {
	var errs []error
	if c.RetryFor <= 0 || c.RetryFor > streams.DefaultNotifyMaxAge {
		errs = append(errs, fmt.Errorf("notify.retry-for must be in (0, %s] (ACP_NOTIFY's max age), got %s", streams.DefaultNotifyMaxAge, c.RetryFor))
	}
	if c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("notify.backoff-min must be positive and at most notify.backoff-max, got %s and %s", c.BackoffMin, c.BackoffMax))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("notify.timeout must be positive, got %s", c.Timeout))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("notify.concurrency must be at least 1, got %d", c.Concurrency))
	}
	return errors.Join(errs...)
}

// backoff is the pause after the n-th failed attempt (from 1).
func (c *Config) backoff(n int) time.Duration {
	d := c.BackoffMin
	for i := 1; i < n && d < c.BackoffMax; i++ {
		d *= 2
	}
	return min(d, c.BackoffMax)
}

// DeriverConsumer is the durable consumer on ACP_LOG that derives
// notifications from the log.
const DeriverConsumer = "notify"

// Service is the notify service.
type Service struct {
	cfg     Config
	lg      *slog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	guard   webhook.Guard
	metrics *metrics
	ready   chan struct{}

	mu       sync.Mutex
	webhooks map[string]*worker // by webhook.Key
}

// New returns a Service; it does no I/O.
func New(cfg Config, lg *slog.Logger, nc *nats.Conn, reg prometheus.Registerer) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, errors.New("notify: nil NATS connection")
	}
	natsmetrics.Register(reg, natsmetrics.NewConn(natsmetrics.ServiceNotify, nc))
	return &Service{
		cfg:      cfg,
		lg:       lg.With("svc", "notify"),
		nc:       nc,
		guard:    webhook.Guard{Allow: cfg.Allow},
		metrics:  newMetrics(reg),
		ready:    make(chan struct{}),
		webhooks: map[string]*worker{},
	}, nil
}

// Ready is closed once Run derives notifications and delivers webhooks.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run derives and delivers until ctx is done, then stops its consumers and
// waits for the attempts in flight (each bounded by notify.timeout): what
// it had not acked comes back to the next replica or run.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	if err := streams.Provision(ctx, js, streams.Options{Replicas: s.cfg.Replicas}, false); err != nil {
		return err
	}
	s.js = js
	hooks, err := js.KeyValue(ctx, events.BucketWebhooks)
	if err != nil {
		return fmt.Errorf("webhooks bucket: %w", err)
	}
	attempts, err := js.KeyValue(ctx, events.BucketWebhookDeliveries)
	if err != nil {
		return fmt.Errorf("webhook deliveries bucket: %w", err)
	}
	derive, err := s.startDeriver(ctx)
	if err != nil {
		return err
	}
	defer derive.Stop()
	var bg sync.WaitGroup
	defer bg.Wait()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	synced := make(chan error, 1)
	bg.Go(func() { s.watchWebhooks(wctx, hooks, attempts, synced) })
	select {
	case err := <-synced:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return nil
	}
	close(s.ready)
	<-ctx.Done()
	stopWatch()
	bg.Wait()
	s.stopAll()
	return nil
}

// subjectSession returns the namespace and session of a log subject,
// acp.log.<ns>.<sid>.…
func subjectSession(subject string) (events.Namespace, events.SessionID, bool) {
	t := strings.SplitN(subject, ".", 5)
	if len(t) < 5 || t[0] != "acp" || t[1] != "log" {
		return "", "", false
	}
	ns, sid := events.Namespace(t[2]), events.SessionID(t[3])
	return ns, sid, ns.Valid() && sid.Valid()
}
