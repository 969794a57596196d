package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/webhook"
)

// Webhooks (issue 32 §3). The gateway registers them in ACP_WEBHOOKS and
// reads their recent attempts from ACP_WEBHOOK_DELIVERIES; the notify
// service delivers them. A webhook belongs to the caller's namespace, and
// every route of them needs a token that may write (user or admin): a
// webhook's URL is where a namespace's activity goes.
//
//	POST   /v1/webhooks                  {"url", "events": [...], "delay"?} → 201 {"id", "secret", ...}
//	GET    /v1/webhooks                  {"webhooks": [...]}, never a secret
//	DELETE /v1/webhooks/{id}             empty or {} → 200 {}
//	GET    /v1/webhooks/{id}/deliveries  {"deliveries": [...]}, the newest first

// webhookPath is the prefix of every webhook route (isRead).
const webhookPath = "/v1/webhooks"

// webhookBuckets returns the two buckets, looked up on first use.
func (g *Gateway) webhookBuckets(ctx context.Context) (hooks, attempts jetstream.KeyValue, err error) {
	if hooks, err = g.js.KeyValue(ctx, events.BucketWebhooks); err != nil {
		return nil, nil, events.Errorf(events.CodeUnavailable, "webhooks: %v", err)
	}
	if attempts, err = g.js.KeyValue(ctx, events.BucketWebhookDeliveries); err != nil {
		return nil, nil, events.Errorf(events.CodeUnavailable, "webhooks: %v", err)
	}
	return hooks, attempts, nil
}

// handleCreateWebhook registers a webhook. The body and the URL are
// checked whole before anything is written: a URL whose host resolves to
// an address webhooks may not reach is invalid_request, as is a bad delay
// or an unknown event type. The secret is in this answer only.
func (g *Gateway) handleCreateWebhook(w http.ResponseWriter, r *http.Request) error {
	ns, err := g.namespace(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r, min(g.controlBodyLimit(), webhook.MaxBodyBytes))
	if err != nil {
		return err
	}
	h, err := webhook.ParseCreate(body)
	if err != nil {
		return err
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	if err := (webhook.Guard{Allow: g.cfg.WebhookAllow}).Check(ctx, nil, h.URL); err != nil {
		return err
	}
	hooks, _, err := g.webhookBuckets(ctx)
	if err != nil {
		return err
	}
	n, err := countKeys(ctx, hooks, string(ns)+".*")
	if err != nil {
		return err
	}
	if n >= webhook.MaxWebhooks {
		return events.Errorf(events.CodePayloadTooLarge, "a namespace has at most %d webhooks", webhook.MaxWebhooks)
	}
	h.ID, h.Namespace, h.Secret, h.Created = webhook.NewID(), ns, webhook.NewSecret(), time.Now().UTC()
	data, err := h.Encode()
	if err != nil {
		return err
	}
	if _, err := hooks.Create(ctx, webhook.Key(ns, h.ID), data); err != nil {
		return events.Errorf(events.CodeUnavailable, "webhook not stored: %v", err)
	}
	out, err := json.Marshal(struct {
		webhook.View
		Secret string `json:"secret"`
	}{h.View(), h.Secret})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// countKeys counts the keys of kv that filter matches.
func countKeys(ctx context.Context, kv jetstream.KeyValue, filter string) (int, error) {
	keys, err := listKeys(ctx, kv, filter)
	return len(keys), err
}

func listKeys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
	kl, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, events.Errorf(events.CodeUnavailable, "webhooks: %v", err)
	}
	defer func() { _ = kl.Stop() }()
	var keys []string
	for k := range kl.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// handleListWebhooks lists the namespace's webhooks, sorted by ID.
func (g *Gateway) handleListWebhooks(w http.ResponseWriter, r *http.Request) error {
	ns, err := g.namespace(r)
	if err != nil {
		return err
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	hooks, _, err := g.webhookBuckets(ctx)
	if err != nil {
		return err
	}
	keys, err := listKeys(ctx, hooks, string(ns)+".*")
	if err != nil {
		return err
	}
	views := []webhook.View{}
	for _, k := range keys {
		e, err := hooks.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted since listed
		}
		if err != nil {
			return events.Errorf(events.CodeUnavailable, "webhooks: %v", err)
		}
		h, err := webhook.Decode(e.Value())
		if err != nil {
			return err
		}
		views = append(views, h.View())
	}
	slices.SortFunc(views, func(a, b webhook.View) int { return strings.Compare(a.ID, b.ID) })
	out, err := json.Marshal(map[string]any{"webhooks": views})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// pathWebhook returns the key of the webhook the path names, which must
// exist in the caller's namespace: otherwise not_found.
func (g *Gateway) pathWebhook(ctx context.Context, r *http.Request, hooks jetstream.KeyValue) (string, error) {
	ns, err := g.namespace(r)
	if err != nil {
		return "", err
	}
	id := r.PathValue("id")
	if !webhook.ValidID(id) {
		return "", events.Errorf(events.CodeNotFound, "no webhook %q", events.Truncate(id, 64))
	}
	key := webhook.Key(ns, id)
	if _, err := hooks.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", events.Errorf(events.CodeNotFound, "no webhook %q", id)
	} else if err != nil {
		return "", events.Errorf(events.CodeUnavailable, "webhooks: %v", err)
	}
	return key, nil
}

// handleDeleteWebhook removes a webhook: the notify service stops its
// deliveries and deletes its consumer and its attempts.
func (g *Gateway) handleDeleteWebhook(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, g.controlBodyLimit())
	if err != nil {
		return err
	}
	if err := decodeEmpty(body); err != nil {
		return err
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	hooks, _, err := g.webhookBuckets(ctx)
	if err != nil {
		return err
	}
	key, err := g.pathWebhook(ctx, r, hooks)
	if err != nil {
		return err
	}
	if err := hooks.Delete(ctx, key); err != nil {
		return events.Errorf(events.CodeUnavailable, "webhook not deleted: %v", err)
	}
	writeJSON(w, http.StatusOK, []byte(`{}`))
	return nil
}

// handleWebhookDeliveries shows a webhook's recent attempts, the newest
// first, each with the receiver's status code.
func (g *Gateway) handleWebhookDeliveries(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := g.callContext(r)
	defer cancel()
	hooks, attempts, err := g.webhookBuckets(ctx)
	if err != nil {
		return err
	}
	key, err := g.pathWebhook(ctx, r, hooks)
	if err != nil {
		return err
	}
	as := &webhook.Attempts{Attempts: []webhook.Attempt{}}
	e, err := attempts.Get(ctx, key)
	switch {
	case err == nil:
		if as, err = webhook.DecodeAttempts(e.Value()); err != nil {
			return err
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return events.Errorf(events.CodeUnavailable, "webhook deliveries: %v", err)
	}
	out, err := json.Marshal(as)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
