package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"

	"skein.dev/pkg/events"
)

// The Standard Webhooks headers
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
// the message's ID, the same on every attempt; the attempt's Unix time in
// seconds; and "v1,<base64 HMAC-SHA256 of id.timestamp.body>".
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix begins every secret; the rest is the base64 of its key.
const SecretPrefix = "whsec_"

// NewSecret returns a random secret: "whsec_" and the standard base64 of
// 32 random bytes (the specification asks for 24 to 64).
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// Sign returns the webhook-signature value of one attempt: "v1," and the
// base64 HMAC-SHA256, keyed by the secret's decoded key, of
// "<id>.<timestamp>.<body>".
func Sign(secret, id string, timestamp int64, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || !strings.HasPrefix(secret, SecretPrefix) || len(key) == 0 {
		return "", events.Errorf(events.CodeInternal, "webhook secret is not whsec_<base64>")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, timestamp, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}
