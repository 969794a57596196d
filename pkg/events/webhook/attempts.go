package webhook

import (
	"github.com/vmihailenco/msgpack/v5"

	"skein.dev/pkg/events"
)

// MaxAttempts is how many recent attempts a webhook's record keeps.
const MaxAttempts = 50

// Attempt is one delivery attempt, as GET /v1/webhooks/{id}/deliveries
// shows it.
type Attempt struct {
	ID      string `msgpack:"id" json:"id"` // the webhook-id
	Type    string `msgpack:"type" json:"type"`
	At      string `msgpack:"at" json:"at"`           // RFC 3339, UTC
	Attempt int    `msgpack:"attempt" json:"attempt"` // 1 for the first
	// Status is the receiver's HTTP status; 0 when there was none (a
	// refused or failed connection, a timeout: Error says).
	Status     int    `msgpack:"status,omitempty" json:"status"`
	Error      string `msgpack:"error,omitempty" json:"error,omitempty"`
	DurationMs int64  `msgpack:"durationMs" json:"durationMs"`
	// Final is set on the attempt after which no other follows: delivered,
	// or given up (retries exhausted).
	Final bool `msgpack:"final,omitempty" json:"final,omitempty"`
}

// Attempts are a webhook's recent attempts, newest first, as
// events.BucketWebhookDeliveries stores them under Key(ns, id).
type Attempts struct {
	Attempts []Attempt `msgpack:"attempts" json:"deliveries"`
}

// Add puts a in front, keeping MaxAttempts.
func (as *Attempts) Add(a Attempt) {
	as.Attempts = append([]Attempt{a}, as.Attempts...)
	if len(as.Attempts) > MaxAttempts {
		as.Attempts = as.Attempts[:MaxAttempts]
	}
}

// Encode returns as as stored.
func (as *Attempts) Encode() ([]byte, error) { return msgpack.Marshal(as) }

// DecodeAttempts reads stored attempts.
func DecodeAttempts(data []byte) (*Attempts, error) {
	var as Attempts
	if err := msgpack.Unmarshal(data, &as); err != nil {
		return nil, events.Errorf(events.CodeInvalidPayload, "webhook attempts: %v", err)
	}
	if as.Attempts == nil {
		as.Attempts = []Attempt{}
	}
	return &as, nil
}
