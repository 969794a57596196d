package events_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"skein.dev/pkg/events"
)

// FuzzUnmarshal feeds arbitrary bytes to Unmarshal. It must never panic;
// what it rejects must be an *Error with CodeInvalidPayload; and what it
// accepts must survive Marshal and Unmarshal again unchanged, with Marshal
// reaching a fixed point.
func FuzzUnmarshal(f *testing.F) {
	for _, name := range variantNames() {
		f.Add(mustMarshal(f, newVariant(f, name)))
		v := newVariant(f, name)
		fillVariant(f, v)
		f.Add(mustMarshal(f, v))
	}
	f.Add([]byte{})
	f.Add([]byte{0xc0})
	f.Add(envelope(f, "v", 1, "type", "AcpDurableHistoryEntry", "body", map[string]any{"event": nil}))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := events.Unmarshal(data)
		if err != nil {
			checkInvalidPayload(t, "Unmarshal", err)
			return
		}
		b, err := events.Marshal(v)
		if err != nil {
			t.Fatalf("Marshal(Unmarshal(%x)) = %v", data, err)
		}
		v2, err := events.Unmarshal(b)
		if err != nil {
			t.Fatalf("Unmarshal(Marshal(Unmarshal(%x))) = %v", data, err)
		}
		// Only absence can change form: an empty JSON in an optional
		// field is omitted and comes back nil. Both mean "absent".
		if diff := cmp.Diff(v, v2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip of %x mismatch (-first +second):\n%s", data, diff)
		}
		b2, err := events.Marshal(v2)
		if err != nil {
			t.Fatalf("Marshal(v2) = %v", err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("Marshal is not a fixed point:\n first %x\nsecond %x", b, b2)
		}
	})
}
