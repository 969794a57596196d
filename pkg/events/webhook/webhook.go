// Package webhook is the contract of Skein's notifications: the event
// types, a webhook's registration as the ACP_WEBHOOKS bucket stores it, the
// create request's decoder, the check of where a webhook may point (Guard),
// and the Standard Webhooks signature. The gateway registers webhooks with
// it and the notify service delivers them with it; the names on NATS are in
// package events (events.NotifySubject, events.BucketWebhooks).
package webhook

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"skein.dev/pkg/events"
)

// Event types: the "type" of a notification's body, and the last tokens of
// its subject (events.NotifySubject).
const (
	TypeTurnFinished    = "turn.finished"    // a turn ended: completed or cancelled, with its stopReason
	TypeTurnFailed      = "turn.failed"      // a turn failed, with its error code
	TypeSessionWaiting  = "session.waiting"  // a permission or input request waits for a person
	TypeSessionStalled  = "session.stalled"  // the stall watchdog's TurnStall{Stalled: true}
	TypeBudgetExhausted = "budget.exhausted" // a turn ended because its namespace's budget was spent
)

// Types lists every event type, sorted.
var Types = []string{TypeBudgetExhausted, TypeSessionStalled, TypeSessionWaiting, TypeTurnFailed, TypeTurnFinished}

// Limits of a registration.
const (
	MaxURLBytes = 2048
	MaxDelay    = 24 * time.Hour
	// MaxWebhooks bounds the webhooks of one namespace.
	MaxWebhooks = 100
	// MaxBodyBytes bounds a create request's body.
	MaxBodyBytes = 16 << 10
)

// Webhook is one registration, stored in events.BucketWebhooks under
// Key(ns, id) as msgpack. Secret is shown once, in the create answer.
type Webhook struct {
	ID        string           `msgpack:"id"`
	Namespace events.Namespace `msgpack:"ns"`
	URL       string           `msgpack:"url"`
	Events    []string         `msgpack:"events"`
	// Delay holds session.waiting back: it is sent only if the request is
	// still open that long after it was made. Zero: at once.
	Delay   time.Duration `msgpack:"delayNs,omitempty"`
	Secret  string        `msgpack:"secret"`
	Created time.Time     `msgpack:"created"`
}

// Key returns "<ns>.<id>", the webhook's key in both buckets.
func Key(ns events.Namespace, id string) string { return string(ns) + "." + id }

// ConsumerName returns the durable consumer on ACP_NOTIFY that delivers
// the webhook id: "wh-<ns>-<id>".
func ConsumerName(ns events.Namespace, id string) string { return "wh-" + string(ns) + "-" + id }

// Subjects returns the ACP_NOTIFY subjects the webhook receives.
func (w *Webhook) Subjects() []string {
	out := make([]string, len(w.Events))
	for i, t := range w.Events {
		out[i] = events.NotifySubject(w.Namespace, t)
	}
	return out
}

// Encode returns w as stored.
func (w *Webhook) Encode() ([]byte, error) { return msgpack.Marshal(w) }

// Decode reads a stored webhook.
func Decode(data []byte) (*Webhook, error) {
	var w Webhook
	if err := msgpack.Unmarshal(data, &w); err != nil {
		return nil, events.Errorf(events.CodeInvalidPayload, "webhook: %v", err)
	}
	if !ValidID(w.ID) || !w.Namespace.Valid() {
		return nil, events.Errorf(events.CodeInvalidPayload, "webhook: bad id or namespace")
	}
	return &w, nil
}

var idPattern = regexp.MustCompile(`^wh_[a-z2-7]{1,40}$`)

// ValidID reports whether id is a webhook ID, as NewID makes them.
func ValidID(id string) bool { return idPattern.MatchString(id) }

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a random webhook ID: "wh_" and 26 base32 letters.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "wh_" + lowerBase32.EncodeToString(b[:])
}

// CreateRequest is the body of POST /v1/webhooks.
type CreateRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
	// Delay is a Go duration ("90s", "5m"), for session.waiting.
	Delay string `json:"delay,omitempty"`
}

// ParseCreate decodes and checks a create request's body: one JSON
// object, no unknown field, an http or https URL without credentials, one
// or more known event types (no repeats), and a delay in (0, MaxDelay]
// only with session.waiting. Every refusal is CodeInvalidRequest. Where the
// URL points is Guard's to check.
func ParseCreate(body []byte) (*Webhook, error) {
	if len(body) > MaxBodyBytes {
		return nil, events.Errorf(events.CodePayloadTooLarge, "a webhook body is at most %d bytes", MaxBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req CreateRequest
	if err := dec.Decode(&req); err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "malformed webhook: %s", events.Truncate(err.Error(), 200))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, events.Errorf(events.CodeInvalidRequest, "malformed webhook: data after the object")
	}
	if _, err := ParseURL(req.URL); err != nil {
		return nil, err
	}
	if len(req.Events) == 0 {
		return nil, events.Errorf(events.CodeInvalidRequest, "events must name at least one of %s", strings.Join(Types, ", "))
	}
	seen := map[string]bool{}
	for _, t := range req.Events {
		if !slices.Contains(Types, t) {
			return nil, events.Errorf(events.CodeInvalidRequest, "unknown event type %q (want %s)", events.Truncate(t, 64), strings.Join(Types, ", "))
		}
		if seen[t] {
			return nil, events.Errorf(events.CodeInvalidRequest, "event type %q named twice", t)
		}
		seen[t] = true
	}
	w := &Webhook{URL: req.URL, Events: slices.Sorted(slices.Values(req.Events))}
	if req.Delay != "" {
		d, err := time.ParseDuration(req.Delay)
		if err != nil || d <= 0 || d > MaxDelay {
			return nil, events.Errorf(events.CodeInvalidRequest, "delay must be a duration in (0, %s], like \"5m\"", MaxDelay)
		}
		if !seen[TypeSessionWaiting] {
			return nil, events.Errorf(events.CodeInvalidRequest, "delay applies to %s, which events does not name", TypeSessionWaiting)
		}
		w.Delay = d
	}
	return w, nil
}

// ParseURL checks a webhook URL's form: absolute http or https, a host, no
// user information, no fragment, at most MaxURLBytes.
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" || len(raw) > MaxURLBytes {
		return nil, events.Errorf(events.CodeInvalidRequest, "url must be 1 to %d bytes", MaxURLBytes)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, events.Errorf(events.CodeInvalidRequest, "url: %s", events.Truncate(err.Error(), 200))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, events.Errorf(events.CodeInvalidRequest, "url must be http or https")
	case u.Hostname() == "":
		return nil, events.Errorf(events.CodeInvalidRequest, "url has no host")
	case u.User != nil:
		return nil, events.Errorf(events.CodeInvalidRequest, "url must not carry credentials")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, events.Errorf(events.CodeInvalidRequest, "url must not have a fragment")
	}
	return u, nil
}

// View is a webhook as the API shows it: never its secret.
type View struct {
	ID      string   `json:"id"`
	URL     string   `json:"url"`
	Events  []string `json:"events"`
	Delay   string   `json:"delay,omitempty"`
	Created string   `json:"created"`
}

// View returns w as the API shows it.
func (w *Webhook) View() View {
	v := View{ID: w.ID, URL: w.URL, Events: w.Events, Created: w.Created.UTC().Format(time.RFC3339Nano)}
	if w.Delay > 0 {
		v.Delay = w.Delay.String()
	}
	return v
}

// String names the webhook in logs, never with its secret.
func (w *Webhook) String() string { return fmt.Sprintf("%s/%s %s", w.Namespace, w.ID, w.URL) }
