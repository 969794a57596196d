package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/webhook"
)

// worker delivers one webhook: its consumer on ACP_NOTIFY, consumed.
type worker struct {
	hook     *webhook.Webhook
	consume  jetstream.ConsumeContext
	inflight sync.WaitGroup
	sem      chan struct{}
	client   *http.Client
}

// watchWebhooks follows ACP_WEBHOOKS: a webhook put gets a consumer and a
// worker, a webhook deleted loses both, and its attempts' record. It sends
// on synced once every webhook there was at start is being delivered (or
// the error that kept it from it), then follows until ctx ends.
func (s *Service) watchWebhooks(ctx context.Context, hooks, attempts jetstream.KeyValue, synced chan<- error) {
	w, err := hooks.WatchAll(ctx)
	if err != nil {
		synced <- fmt.Errorf("watch webhooks: %w", err)
		return
	}
	defer func() { _ = w.Stop() }()
	// Webhooks whose consumer could not be made (the stream's leader
	// away, say) are tried again until they can.
	type pending struct {
		h          *webhook.Webhook
		registered time.Time
	}
	failed := map[string]pending{}
	retry := time.NewTicker(startRetry)
	defer retry.Stop()
	initial := true
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			if initial {
				synced <- nil
			}
			return
		case <-retry.C:
			for key, p := range failed {
				if s.start(ctx, p.h, p.registered, attempts) == nil {
					delete(failed, key)
				}
			}
			continue
		case e = <-w.Updates():
		}
		if e == nil {
			if initial {
				initial = false
				s.removeStrays(ctx)
				synced <- nil
			}
			continue
		}
		switch e.Operation() {
		case jetstream.KeyValuePut:
			h, err := webhook.Decode(e.Value())
			if err != nil {
				s.lg.Warn("webhook not delivered: bad registration", "key", e.Key(), events.LogKeyErr, err)
				continue
			}
			if err := s.start(ctx, h, e.Created(), attempts); err != nil {
				failed[e.Key()] = pending{h, e.Created()}
			}
		default:
			delete(failed, e.Key())
			s.remove(ctx, e.Key(), attempts)
		}
	}
}

// removeStrays deletes the webhook consumers whose webhook is gone: one
// deleted while no notify service ran.
func (s *Service) removeStrays(ctx context.Context) {
	str, err := s.js.Stream(ctx, events.StreamNotify)
	if err != nil {
		s.lg.Warn("stray webhook consumers not listed", events.LogKeyErr, err)
		return
	}
	names := str.ConsumerNames(ctx)
	var stray []string
	for name := range names.Name() {
		if !strings.HasPrefix(name, "wh-") {
			continue
		}
		s.mu.Lock()
		found := false
		for _, w := range s.webhooks {
			if webhook.ConsumerName(w.hook.Namespace, w.hook.ID) == name {
				found = true
			}
		}
		s.mu.Unlock()
		if !found {
			stray = append(stray, name)
		}
	}
	for _, name := range stray {
		if err := s.js.DeleteConsumer(ctx, events.StreamNotify, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			s.lg.Warn("stray webhook consumer not deleted", "consumer", name, events.LogKeyErr, err)
		}
	}
}

// start runs the webhook's worker, creating its consumer if it has none.
// The consumer starts at the registration, stored at registered (the
// server's clock, as the notifications' timestamps are), so what was
// notified between the registration and this is delivered too.
func (s *Service) start(ctx context.Context, h *webhook.Webhook, registered time.Time, attempts jetstream.KeyValue) error {
	key := webhook.Key(h.Namespace, h.ID)
	s.mu.Lock()
	_, running := s.webhooks[key]
	s.mu.Unlock()
	if running {
		return nil // a registration never changes
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, events.StreamNotify, jetstream.ConsumerConfig{
		Durable:        webhook.ConsumerName(h.Namespace, h.ID),
		Description:    "Skein webhook " + h.ID,
		FilterSubjects: h.Subjects(),
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &registered,
		AckPolicy:      jetstream.AckExplicitPolicy,
		// An attempt is acked or nakked within its timeout; a process that
		// died holding one gives it back after this.
		AckWait:       s.cfg.Timeout + 20*time.Second,
		MaxDeliver:    -1,
		MaxAckPending: s.cfg.Concurrency * 4,
	})
	if err != nil {
		s.lg.Warn("webhook not delivered yet: consumer, tried again", "webhook", h.String(), events.LogKeyErr, err)
		return err
	}
	wk := &worker{hook: h, sem: make(chan struct{}, s.cfg.Concurrency), client: s.httpClient()}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		wk.sem <- struct{}{}
		wk.inflight.Go(func() {
			defer func() { <-wk.sem }()
			s.attempt(ctx, wk, msg, attempts)
		})
	}, jetstream.PullMaxMessages(s.cfg.Concurrency))
	if err != nil {
		s.lg.Warn("webhook not delivered yet: consume, tried again", "webhook", h.String(), events.LogKeyErr, err)
		return err
	}
	wk.consume = cc
	s.mu.Lock()
	s.webhooks[key] = wk
	s.mu.Unlock()
	return nil
}

// startRetry is how often a webhook whose consumer could not be made is
// tried again.
const startRetry = 5 * time.Second

// remove stops a deleted webhook's worker and deletes its consumer and
// attempts. Its key names it whether or not this replica ran it.
func (s *Service) remove(ctx context.Context, key string, attempts jetstream.KeyValue) {
	s.mu.Lock()
	wk := s.webhooks[key]
	delete(s.webhooks, key)
	s.mu.Unlock()
	if wk != nil {
		wk.stop()
	}
	ns, id, ok := strings.Cut(key, ".")
	if !ok || !webhook.ValidID(id) {
		return
	}
	if err := s.js.DeleteConsumer(ctx, events.StreamNotify, webhook.ConsumerName(events.Namespace(ns), id)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.lg.Warn("deleted webhook's consumer not deleted", "key", key, events.LogKeyErr, err)
	}
	_ = attempts.Purge(ctx, key)
}

func (w *worker) stop() {
	if w.consume != nil {
		w.consume.Stop()
		<-w.consume.Closed()
	}
	w.inflight.Wait()
	w.client.CloseIdleConnections()
}

// stopAll stops every worker: Run's end.
func (s *Service) stopAll() {
	s.mu.Lock()
	ws := s.webhooks
	s.webhooks = map[string]*worker{}
	s.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
}

// httpClient returns a client whose every connection is checked by the
// guard where it is made, after resolution: no proxy (one would connect
// for us, unchecked) and no redirect followed (a 3xx is a failed attempt).
func (s *Service) httpClient() *http.Client {
	d := &net.Dialer{Timeout: s.cfg.Timeout, Control: s.guard.Control}
	return &http.Client{
		Timeout: s.cfg.Timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         d.DialContext,
			TLSHandshakeTimeout: s.cfg.Timeout,
			MaxIdleConnsPerHost: s.cfg.Concurrency,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// attempt delivers msg once to the worker's receiver and settles it: ack
// on 2xx; otherwise nak with the next backoff, or term once the
// notification is past notify.retry-for. A session.waiting of a webhook
// with a delay is held until the delay has passed, then sent only if the
// request is still open.
func (s *Service) attempt(ctx context.Context, wk *worker, msg jetstream.Msg, attempts jetstream.KeyValue) {
	md, err := msg.Metadata()
	if err != nil {
		_ = msg.Term()
		return
	}
	h := wk.hook
	id := msg.Headers().Get(jetstream.MsgIDHeader)
	var body webhook.Body
	if err := json.Unmarshal(msg.Data(), &body); err != nil || id == "" {
		s.lg.Warn("notification not delivered: malformed", "webhook", h.String(), events.LogKeyErr, err)
		_ = msg.Term()
		return
	}
	n := int(md.NumDelivered)
	if body.Type == webhook.TypeSessionWaiting && h.Delay > 0 {
		if wait := time.Until(md.Timestamp.Add(h.Delay)); wait > 0 {
			_ = msg.NakWithDelay(wait)
			return
		}
		n-- // its first delivery was the hold
		open, err := s.stillOpen(ctx, h.Namespace, &body)
		if err != nil {
			_ = msg.NakWithDelay(s.cfg.backoff(1))
			return
		}
		if !open {
			_ = msg.Ack()
			return
		}
	}
	n = max(n, 1)
	start := time.Now()
	status, err := s.post(ctx, wk.client, h, id, msg.Data())
	took := time.Since(start)
	if ctx.Err() != nil {
		// Stopping cut the attempt short: it is not the receiver's
		// failure. Another replica, or the next run, takes it now.
		_ = msg.Nak()
		return
	}
	s.metrics.attempt.Observe(took.Seconds())
	a := webhook.Attempt{ID: id, Type: body.Type, At: start.UTC().Format(time.RFC3339Nano), Attempt: n, Status: status, DurationMs: took.Milliseconds()}
	if err != nil {
		a.Error = events.Truncate(err.Error(), 300)
	}
	switch {
	case err == nil && status >= 200 && status < 300:
		a.Final = true
		_ = msg.Ack()
		s.metrics.delivered.Inc()
		s.metrics.latency.Observe(time.Since(md.Timestamp).Seconds())
	case time.Now().Add(s.cfg.backoff(n)).After(md.Timestamp.Add(s.cfg.RetryFor)):
		a.Final = true
		_ = msg.TermWithReason("retries exhausted")
		s.metrics.failed.WithLabelValues(resultGivenUp).Inc()
		s.lg.Warn("webhook notification given up", "webhook", h.String(), "id", id, "attempts", n)
	default:
		_ = msg.NakWithDelay(s.cfg.backoff(n))
		s.metrics.failed.WithLabelValues(resultRetried).Inc()
	}
	s.record(ctx, attempts, webhook.Key(h.Namespace, h.ID), a)
}

// post sends one signed attempt and returns the receiver's status.
func (s *Service) post(ctx context.Context, c *http.Client, h *webhook.Webhook, id string, body []byte) (int, error) {
	ts := time.Now().Unix()
	sig, err := webhook.Sign(h.Secret, id, ts, body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "skein-webhooks")
	req.Header.Set(webhook.HeaderID, id)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(webhook.HeaderSignature, sig)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// stillOpen reports whether the request a session.waiting names has no
// answer in the session's log yet: no permission or input response with
// its request ID after it.
func (s *Service) stillOpen(ctx context.Context, ns events.Namespace, b *webhook.Body) (bool, error) {
	sid := events.SessionID(b.Data.SessionID)
	if !sid.Valid() {
		return false, nil
	}
	subject := events.LogSubject(ns, sid, events.LogEvents)
	for after := b.Data.Sequence; ; {
		recs, err := eventlog.Forward(ctx, s.js, events.StreamLog, subject, after, 256)
		if err != nil || len(recs) == 0 {
			return err == nil, err
		}
		for _, r := range recs {
			after = r.Sequence
			switch r.Header.Get(events.HeaderRecord) {
			case "AcpDurablePermissionResponse", "InputResponse":
			default:
				continue
			}
			v, err := events.Unmarshal(r.Data)
			if err != nil {
				continue
			}
			switch resp := v.(type) {
			case *events.AcpDurablePermissionResponse:
				if resp.RequestID == b.Data.RequestID {
					return false, nil
				}
			case *events.InputResponse:
				if resp.RequestID == b.Data.RequestID {
					return false, nil
				}
			}
		}
	}
}

// record adds a to the webhook's recent attempts (a compare-and-set on its
// key, tried again when another attempt wrote between).
func (s *Service) record(ctx context.Context, attempts jetstream.KeyValue, key string, a webhook.Attempt) {
	for range 5 {
		as := &webhook.Attempts{}
		var rev uint64
		e, err := attempts.Get(ctx, key)
		switch {
		case err == nil:
			rev = e.Revision()
			if as, err = webhook.DecodeAttempts(e.Value()); err != nil {
				as = &webhook.Attempts{}
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			s.lg.Debug("webhook attempt not recorded", events.LogKeyErr, err)
			return
		}
		as.Add(a)
		data, err := as.Encode()
		if err != nil {
			return
		}
		if rev == 0 {
			_, err = attempts.Create(ctx, key, data)
		} else {
			_, err = attempts.Update(ctx, key, data, rev)
		}
		if err == nil {
			return
		}
	}
}
